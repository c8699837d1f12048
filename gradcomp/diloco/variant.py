"""A DiLoCo variant as the benches, the performance model and the CLI name it, beside per-step
methods: ``diloco:H=50,method=int8`` (the ``name:key=value,...`` text of `--methods`).

Options: ``H`` (sync_every, required), ``method`` (the outer gradients' gradcomp method,
default none), ``fragments`` (Streaming DiLoCo, default 1), ``delay`` (sync_delay, default
0), ``outer_lr`` and ``outer_momentum`` (the outer SGD with Nesterov momentum; defaults 0.7
and 0.9, DiLoCo's, Douillard et al. 2023 section 3), and any option of the method (e.g.
``ratio=0.01`` for topk). Error feedback is the benches' `error_feedback` setting, as for
per-step methods.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import torch

from ..checks import check_number
from ..compressors import Compressor, compressor
from .diloco import DiLoCo, check_schedule

NAME = "diloco"
#: The variant's own options and their defaults (H has none); the rest go to the method.
DEFAULTS = {"H": None, "method": "none", "fragments": 1, "delay": 0, "outer_lr": 0.7,
            "outer_momentum": 0.9}


@dataclass(frozen=True)
class Variant:
    """One DiLoCo variant: its schedule, outer optimizer and outer-gradient method."""

    H: int
    method: str = "none"
    fragments: int = 1
    delay: int = 0
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    method_options: dict = field(default_factory=dict)
    error_feedback: bool | None = None

    @classmethod
    def from_options(cls, options: dict, error_feedback: bool | None = None) -> "Variant":
        """The variant of `options` (see the module docstring); a ValueError naming a bad
        option and what is allowed."""
        options = dict(options)
        if "H" not in options:
            raise ValueError(f"{NAME}: option H (inner steps between syncs) is required, "
                             "e.g. diloco:H=50,method=int8")
        own = {k: options.pop(k) for k in list(options) if k in DEFAULTS}
        variant = cls(**{**{k: v for k, v in DEFAULTS.items() if k != "H"}, **own},
                      method_options=options, error_feedback=error_feedback)
        check_schedule(variant.H, variant.fragments, variant.delay,
                       (f"{NAME} H", f"{NAME} fragments", f"{NAME} delay"))
        check_number(variant.outer_lr, f"{NAME} outer_lr", 0, above=True)
        check_number(variant.outer_momentum, f"{NAME} outer_momentum", 0, 0.99)
        if variant.method in ("auto", NAME):
            raise ValueError(f"{NAME} method={variant.method!r} is not allowed: choose a "
                             "gradcomp method by name (e.g. none, int8, topk)")
        variant.compressor()  # an unknown method or option raises here
        return variant

    def compressor(self) -> Compressor:
        """The outer gradients' compressor, as `DiLoCo` builds it."""
        try:
            return compressor(self.method, error_feedback=self.error_feedback,
                              **self.method_options)
        except TypeError as exc:
            raise ValueError(f"{NAME} method={self.method!r}: {exc}") from None

    def options(self) -> dict:
        """Every option, defaults included, and the method's own (error_feedback: True where
        it is on)."""
        built = self.compressor().options()
        return {"H": self.H, "method": self.method, "fragments": self.fragments,
                "delay": self.delay, "outer_lr": self.outer_lr,
                "outer_momentum": self.outer_momentum, **built}

    def options_text(self) -> str:
        return json.dumps(self.options(), sort_keys=True)

    def label(self) -> str:
        """``diloco(H=50, method=int8)``: H, the method and the options not at their
        defaults (the method's seed never)."""
        default = compressor(self.method).options()
        shown = {"H": self.H, "method": self.method,
                 **{k: getattr(self, k) for k in ("fragments", "delay", "outer_lr",
                                                  "outer_momentum")
                    if getattr(self, k) != DEFAULTS[k]},
                 **{k: v for k, v in self.method_options.items()
                    if k != "seed" and default.get(k) != v}}
        if self.error_feedback:
            shown["error_feedback"] = True
        return f"{NAME}({', '.join(f'{k}={v}' for k, v in shown.items())})"

    def build(self, model: torch.nn.Module, inner_optimizer: torch.optim.Optimizer,
              process_group=None) -> DiLoCo:
        """The `DiLoCo` of this variant around `model` and `inner_optimizer`, with its outer
        SGD (Nesterov where it has momentum)."""
        outer = torch.optim.SGD(model.parameters(), lr=self.outer_lr,
                                momentum=self.outer_momentum, nesterov=self.outer_momentum > 0)
        return DiLoCo(model, inner_optimizer, outer, self.H, self.method, process_group,
                      self.fragments, self.delay, self.error_feedback, **self.method_options)


def outer_case(options: dict) -> tuple[str, dict]:
    """(method, options) of the outer gradients' compressor of the variant with `options`
    (as `--methods` gives them; error_feedback left out): what its exchange encodes, priced
    like a per-step method's bucket."""
    variant = Variant.from_options({k: v for k, v in options.items() if k != "error_feedback"})
    return variant.method, dict(variant.method_options)


def outer_method(text: str) -> str | None:
    """The outer method of a variant named by `text` (``diloco:H=50,method=int8``, or its
    label ``diloco(H=50, method=int8)``; "none" when it names none); None when `text` names
    no DiLoCo variant."""
    if not (text == NAME or text.startswith((NAME + ":", NAME + "("))):
        return None
    found = re.search(r"[:,(]\s*method=([\w.+-]+)", text)
    return found.group(1) if found else "none"
