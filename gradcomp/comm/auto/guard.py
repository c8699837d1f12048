"""The convergence guard of `auto` (`guard=...`, off by default), after Accordion (Agarwal et
al., MLSys 2021): while a bucket's gradient norm changes fast (a critical regime), the bucket
travels with little compression.

Every `every` iterations, each bucket's gradient norm averaged over the interval (the largest
mean any rank saw: one all-reduce, so every rank decides alike) is compared with the previous
interval's: a relative change of more than `threshold` marks the bucket critical for the next
interval. Training starts critical: until two intervals have been compared every bucket is.
A critical bucket goes with the fastest candidate (by `Chooser.predict`) whose measured
compression ratio is at most `max_ratio`; if none is, the least compressing one. Accordion
compares the norms of the gradients accumulated over an epoch; this guard averages the norm of
each iteration's gradient (no copy of the gradients), over intervals of iterations.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ...checks import check_int, check_number
from .choice import Chooser, Reduce

#: guard=True: these settings.
GUARD_DEFAULTS = {"threshold": 0.5, "every": 100, "max_ratio": 2.0}


def guard_settings(guard) -> dict[str, Any] | None:
    """The checked settings of `guard`: None or False (off), True (`GUARD_DEFAULTS`), or a
    dict of some of `GUARD_DEFAULTS`' keys."""
    if guard is None or guard is False:
        return None
    if guard is True:
        return dict(GUARD_DEFAULTS)
    if not isinstance(guard, dict) or set(guard) - set(GUARD_DEFAULTS):
        raise ValueError(f"guard={guard!r} is not allowed: give None (off), True (the "
                         f"defaults {GUARD_DEFAULTS}) or a dict of some of the keys "
                         f"{', '.join(GUARD_DEFAULTS)}")
    settings = {**GUARD_DEFAULTS, **guard}
    check_number(settings["threshold"], "guard threshold", 0, above=True)
    check_int(settings["every"], "guard every", 1)
    check_number(settings["max_ratio"], "guard max_ratio", 1)
    return {"threshold": float(settings["threshold"]), "every": settings["every"],
            "max_ratio": float(settings["max_ratio"])}


@dataclass
class Guard:
    """The guard's measurements and decisions (module docstring); `state_dict()` keeps
    them, the running interval's sums included."""

    threshold: float
    every: int
    max_ratio: float
    start: int = 1
    previous: dict[int, float] = field(default_factory=dict)  # bucket -> last mean norm
    critical: set[int] | None = None  # None: every bucket (no two intervals compared yet)
    sums: dict[int, torch.Tensor] = field(default_factory=dict)  # running interval
    counts: dict[int, int] = field(default_factory=dict)
    size: dict[int, int] = field(default_factory=dict)  # bucket -> bytes
    engaged: list[tuple[int, list[int]]] = field(default_factory=list)  # (iteration, critical)

    def add(self, index: int, buffer: torch.Tensor) -> None:
        """Count the norm of bucket `index`'s gradient in this interval."""
        norm = torch.linalg.vector_norm(buffer, dtype=torch.float64)
        self.sums[index] = self.sums[index] + norm if index in self.sums else norm
        self.counts[index] = self.counts.get(index, 0) + 1
        self.size[index] = buffer.numel() * buffer.element_size()

    def step(self, iteration: int, reduce: Reduce) -> None:
        """At the start of `iteration` (every rank alike): at an interval's end, compare."""
        if iteration <= self.start or (iteration - self.start) % self.every or not self.sums:
            return
        buckets = sorted(self.sums)
        means = reduce(torch.stack([self.sums[b].cpu() / self.counts[b] for b in buckets]))
        now = dict(zip(buckets, means.tolist()))
        if self.previous:
            self.critical = {b for b in buckets if b not in self.previous
                             or abs(now[b] - self.previous[b])
                             > self.threshold * self.previous[b]}
        self.previous, self.sums, self.counts = now, {}, {}
        self.engaged.append((iteration, sorted(self.critical) if self.critical is not None
                             else buckets))

    def limits(self, index: int) -> bool:
        return self.critical is None or index in self.critical

    def choice(self, chooser: Chooser, index: int) -> int:
        """The fastest candidate for critical bucket `index` within `max_ratio`."""
        ratios = {c: self.size[index] / chooser.nbytes[index, c]
                  for c in range(len(chooser.transfers)) if chooser.nbytes.get((index, c))}
        if not ratios:
            return chooser.decisions.get(index, 0)
        allowed = ([c for c, r in ratios.items() if r <= self.max_ratio]
                   or [min(ratios, key=ratios.get)])
        return min(allowed, key=lambda c: chooser.predict(index, c))

    def state_dict(self) -> dict:
        return {"previous": dict(self.previous),
                "critical": None if self.critical is None else sorted(self.critical),
                "sums": {b: float(s) for b, s in self.sums.items()},
                "counts": dict(self.counts), "size": dict(self.size),
                "engaged": list(self.engaged)}

    def load_state_dict(self, state: dict) -> None:
        self.previous, self.counts = dict(state["previous"]), dict(state["counts"])
        self.critical = None if state["critical"] is None else set(state["critical"])
        self.sums = {b: torch.tensor(s, dtype=torch.float64) for b, s in state["sums"].items()}
        self.size, self.engaged = dict(state["size"]), [tuple(e) for e in state["engaged"]]
