"""What `gradcomp.fsdp.register` keeps between iterations: the method, the error-feedback
residuals, the call counts and the telemetry; `state_dict()` checkpoints it."""
from __future__ import annotations

import hashlib
from typing import Any

import torch
import torch.distributed as dist

from ..checks import check_int, check_saved_method
from ..comm.agreement import check_agreement
from ..comm.ranks import Ranks
from ..comm.telemetry import BucketRecord, Telemetry
from ..compressors import Compressor
from ..compressors.base import work_dtype
from . import alltoall
from .levels import TwoLevels


class FSDPState:
    """The compressed reduce-scatter of every FSDP module of one model.

    compressor: the method (with or without error feedback). Its residuals are kept per FSDP
        module and chunk, on the rank that computed the gradient: each rank holds the residual
        of its whole local (unsharded) gradient, not a shard of it, so a checkpoint of this
        state is per rank and as large as the model's gradients.
    telemetry_limit: how many per-call records to keep (0: none).
    levels: the 2-level variant's mesh and across-nodes method (`TwoLevels`; None: one
        reduce-scatter over the FSDP group); `compressor` then runs inside each node.

    Telemetry rows are like the DDP hook's, one per reduce-scatter: `bucket` is the FSDP
    module's index (in `model.modules()` order), `bytes_original` what FSDP's own
    reduce-scatter sends from this rank (the chunks for the other ranks, in the reduce dtype),
    `bytes_sent` what this one sends instead.
    """

    def __init__(self, compressor: Compressor, telemetry_limit: int = 100_000,
                 levels: TwoLevels | None = None):
        if not isinstance(compressor, Compressor):
            raise TypeError("compressor must be a gradcomp Compressor, e.g. "
                            "gradcomp.compressor('int8')")
        self.compressor = compressor
        self.levels = levels
        self.telemetry_limit = check_int(telemetry_limit, "telemetry_limit", 0)
        self.telemetry = Telemetry(telemetry_limit) if telemetry_limit else None
        self.calls: dict[int, int] = {}  # FSDP module index -> reduce-scatters done
        self.agreed = False  # across ranks, in this process since the last resume
        rank = dist.get_rank() if dist.is_initialized() else 0
        self.rank, self.world_size = rank, dist.get_world_size() if dist.is_initialized() else 1
        compressor.set_rank(rank)
        if levels is not None:
            levels.across.set_rank(rank)

    @property
    def iteration(self) -> int:
        """Backward passes whose gradients this state has reduced (the most calls of any
        module)."""
        return max(self.calls.values(), default=0)

    def reduce_scatter(self, module_index: int, output: torch.Tensor, flat: torch.Tensor,
                       group, average: bool) -> None:
        """Reduce-scatter `flat` into `output` over `group`, compressed, and record it (one
        record per step of the 2-level variant)."""
        if not self.agreed:
            check_agreement(self.settings(), Ranks(group), flat.device)
            self.agreed = True
        calls = self.calls.get(module_index, 0)
        self.calls[module_index] = calls + 1
        itemsize = flat.element_size()
        if self.levels is None:
            self._step(self.compressor, self.compressor.name, output, flat, group, average,
                       calls, module_index, itemsize)
            return
        levels = self.levels
        levels.check_group(group)
        partial = torch.empty(flat.numel() // levels.per_node, dtype=work_dtype(flat.dtype),
                              device=flat.device)
        self._step(self.compressor, f"{self.compressor.name} (inside)", partial,
                   levels.spread(flat), levels.inside_group, False, calls, module_index, itemsize)
        self._step(levels.across, f"{levels.across.name} (across)", output, partial,
                   levels.across_group, False, calls, module_index, itemsize)
        if average:
            output.div_(dist.get_world_size(group))

    def settings(self) -> dict[str, str]:
        """What every rank must agree on (compared across ranks at the first reduce-scatter in
        a process and after each resume): different methods would exchange different sizes."""
        comps = [self.compressor] + ([self.levels.across] if self.levels is not None else [])
        random = b"".join(c.shared_state() for c in comps if c.shared_randomness)
        return {"method": " / ".join(c.name for c in comps),
                "options": " / ".join(repr(sorted(c.options().items())) for c in comps),
                "iteration": repr(sorted(self.calls.items())),
                "shared random state": hashlib.sha256(random).hexdigest()[:12]}

    def _step(self, compressor, label, output, flat, group, average, iteration, module_index,
              itemsize) -> None:
        """One compressed reduce-scatter over `group`, recorded as `label`; `itemsize`: the
        bytes per value FSDP's own reduce-scatter would send."""
        parts = dist.get_world_size(group)
        rec = None
        if self.telemetry is not None:
            original = flat.numel() // parts * (parts - 1) * itemsize
            rec = self.telemetry.start(BucketRecord(iteration, module_index, label,
                                                    flat.numel(), original, 0), flat.device)
        sent = alltoall.reduce_scatter(compressor, output, flat, group, key=module_index,
                                       average=average, record=rec)
        if rec is not None:
            rec.decoded = rec.now()
            rec.bytes_sent = sent

    def telemetry_rows(self) -> list[dict]:
        """Per-call bytes and encode/communication/decode seconds recorded so far."""
        return self.telemetry.rows() if self.telemetry else []

    def compression_ratio(self) -> float:
        """The compression ratio over the recorded calls: the bytes FSDP's own reduce-scatter
        would have sent over the bytes sent (raw / wire, e.g. 3.9 for int8; NaN when nothing
        is recorded), as `bench train --parallelism fsdp`'s column ratio."""
        rows = self.telemetry_rows()
        sent = sum(r["bytes_sent"] for r in rows)
        return sum(r["bytes_original"] for r in rows) / sent if sent else float("nan")

    def state_dict(self) -> dict[str, Any]:
        across = self.levels.across if self.levels is not None else None
        return {"method": self.compressor.name, "options": self.compressor.options(),
                "across": None if across is None else (across.name, across.options()),
                "calls": dict(self.calls), "compressor": self.compressor.state_dict(),
                "across_compressor": None if across is None else across.state_dict(),
                "rank": self.rank, "world_size": self.world_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        needed = ("method", "options", "calls", "compressor", "rank", "world_size")
        if not isinstance(state, dict) or any(k not in state for k in needed):
            raise ValueError("state is not a gradcomp FSDP checkpoint: pass what "
                             "FSDPState.state_dict() returned")
        check_saved_method(state, self.compressor, "model runs", "register")
        across = self.levels.across if self.levels is not None else None
        mine_across = None if across is None else (across.name, across.options())
        if state.get("across") != mine_across:
            raise ValueError(f"this checkpoint was saved with across={state.get('across')}; "
                             f"this model runs across={mine_across}: register the same 2-level "
                             "methods before loading")
        if (state["rank"], state["world_size"]) != (self.rank, self.world_size):
            raise ValueError(f"this checkpoint holds the state of rank {state['rank']} of "
                             f"{state['world_size']}; this is rank {self.rank} of "
                             f"{self.world_size}: residuals are per rank, so save every "
                             "rank's state and load each rank its own")
        self.calls = dict(state["calls"])
        self.agreed = False
        self.compressor.load_state_dict(state["compressor"])
        if across is not None:
            across.load_state_dict(state["across_compressor"])
