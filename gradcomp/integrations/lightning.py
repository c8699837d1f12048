"""PyTorch Lightning: gradcomp's hook on the strategy's DDP model, on every device, with its
state in Lightning's checkpoints.

    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=DDPStrategy(),
                        callbacks=[Compression("topk", ratio=0.01, error_feedback=True)])

Lightning registers `DDPStrategy(ddp_comm_hook=...)` only on CUDA, so on CPU a hook passed
that way is silently never called; this callback registers gradcomp's hook itself once the
strategy has wrapped the model (any device: CPU/gloo, CUDA/NCCL), gathers every rank's hook
state into the checkpoint (residuals are per rank, and Lightning writes the file from rank 0)
and gives each rank its own back on `Trainer.fit(ckpt_path=...)`.
"""
from __future__ import annotations

import warnings
from typing import Any

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import DDPStrategy
from torch.nn.parallel import DistributedDataParallel

from ..comm import HookState, build_state, load_state, register, save_state


class Compression(Callback):
    """Compress DDP's gradient buckets with gradcomp's `method` (options as for
    `gradcomp.comm.register`: the method's own and the hook's, e.g. `start_iter`).

    `state`: the `HookState` once `fit` has started (telemetry: `state.telemetry_rows()`).
    Checkpoints carry every rank's state (`state_dict()` is a collective, as Lightning calls it
    on every rank); resuming needs the same method, options and number of ranks.
    """

    def __init__(self, method: str = "none", **options):
        build_state(method, **options)  # a bad option fails here, naming it
        self.method = method
        self.options = options
        self.state: HookState | None = None
        self._ddp: DistributedDataParallel | None = None
        self._pending: dict[str, Any] | None = None

    def setup(self, trainer, pl_module, stage: str) -> None:
        strategy = trainer.strategy
        if not isinstance(strategy, DDPStrategy):
            raise ValueError(f"Compression needs strategy=DDPStrategy(...) (or 'ddp'), got "
                             f"{type(strategy).__name__}: gradcomp's hooks compress DDP's "
                             "gradient buckets")
        if getattr(strategy, "_ddp_comm_hook", None) is not None:
            raise ValueError("DDPStrategy(ddp_comm_hook=...) is set and Compression registers "
                             "gradcomp's hook too, but DDP takes one hook: remove ddp_comm_hook "
                             "and ddp_comm_state from DDPStrategy (Compression registers on "
                             "every device and checkpoints the state)")

    def on_fit_start(self, trainer, pl_module) -> None:
        ddp = trainer.strategy.model
        if not isinstance(ddp, DistributedDataParallel):
            raise ValueError(f"Compression needs the strategy to wrap the model in "
                             f"DistributedDataParallel; {type(trainer.strategy).__name__} "
                             f"gave {type(ddp).__name__}")
        if ddp is self._ddp:
            return
        if getattr(ddp, "_comm_hooks", None):
            raise ValueError("this DDP model already has a communication hook; DDP takes one: "
                             "remove the other hook to use Compression")
        carried = self.state.state_dict() if self.state is not None else None  # an earlier fit
        self.state = register(ddp, self.method, **self.options)
        self._ddp = ddp
        if self._pending is not None:
            pending, self._pending = self._pending, None
            load_state(ddp, pending)
        elif carried is not None:
            self.state.load_state_dict(carried)

    def state_dict(self) -> dict[str, Any]:
        return save_state(self._ddp) if self.state is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not state_dict:
            return
        if self._ddp is not None:
            load_state(self._ddp, state_dict)
        else:  # restored before the strategy wraps the model: load at registration
            self._pending = state_dict

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        if not checkpoint.get("callbacks", {}).get(self.state_key):
            warnings.warn("this checkpoint holds no gradcomp hook state (it was saved without "
                          "the Compression callback, or before fit started): compression "
                          "starts afresh, with zero residuals, and the run will not continue "
                          "the saved one exactly", RuntimeWarning, stacklevel=2)
