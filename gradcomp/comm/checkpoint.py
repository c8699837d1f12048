"""Checkpoints of every rank's hook state in one file, as trainers write them.

The hook's state is per rank: error-feedback residuals and PowerSGD memories differ between
ranks. Trainers (Lightning, Accelerate) and most training scripts write one checkpoint, from
rank 0, and every rank reads that file to resume. `save_state` therefore gathers every rank's
`HookState.state_dict()` to rank 0 (a collective: call it on every rank), and `load_state`
gives each rank its own entry back.

    ckpt = {"model": model.state_dict(), "opt": opt.state_dict(),
            "gradcomp": gradcomp.comm.save_state(ddp_model)}          # on every rank
    if dist.get_rank() == 0:
        torch.save(ckpt, path)
    ...
    state = gradcomp.comm.register(ddp_model, "topk", ratio=0.01, error_feedback=True)
    gradcomp.comm.load_state(ddp_model, torch.load(path)["gradcomp"])  # after register

`AllRanks(ddp_model)` wraps the pair as an object with `state_dict()` / `load_state_dict()`,
for `accelerator.register_for_checkpointing`.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .state import HookState

#: The format of `save_state`'s dictionary.
FORMAT = "gradcomp.ranks/1"
_NUMPY = "__numpy_array__"


def hook_state(model) -> HookState:
    """The `HookState` of gradcomp's hook registered on the DDP `model` (a model wrapped by
    `torch.compile` too); a `HookState` is returned as it is."""
    if isinstance(model, HookState):
        return model
    ddp = getattr(model, "_orig_mod", model)  # torch.compile's wrapper
    if not isinstance(ddp, DistributedDataParallel):
        raise TypeError("pass the DistributedDataParallel model that gradcomp.comm.register was "
                        f"given (or its HookState), got {type(model).__name__}")
    for _, state in getattr(ddp, "_comm_hooks", []):
        if isinstance(state, HookState):
            return state
    raise RuntimeError("no gradcomp hook is registered on this DistributedDataParallel model: "
                       "call gradcomp.comm.register(ddp_model, method, ...) first, then load "
                       "the checkpoint into it (the hook's state is built by register)")


def save_state(model, dst: int = 0) -> dict[str, Any]:
    """Every rank's hook state (tensors on the CPU), gathered to group rank `dst`, which gets
    all of them; other ranks get a dictionary with their own state only (`"complete": False`).
    A collective over the hook's process group: call it on every rank."""
    state = hook_state(model)
    mine = _portable(state.state_dict())
    world, rank = state.world_size, state.ranks.rank
    if world == 1:
        return {"format": FORMAT, "world_size": 1, "complete": True, "ranks": {0: mine}}
    group = state.ranks.group
    gathered = [None] * world if rank == dst else None
    dist.gather_object(mine, gathered, dst=dist.get_global_rank(group, dst), group=group)
    if rank == dst:
        return {"format": FORMAT, "world_size": world, "complete": True,
                "ranks": dict(enumerate(gathered))}
    return {"format": FORMAT, "world_size": world, "complete": False, "ranks": {rank: mine}}


def load_state(model, checkpoint: dict[str, Any]) -> HookState:
    """Restore this rank's entry of a `save_state` dictionary into the hook registered on the
    DDP `model` (register first); floating-point tensors go to the model's device."""
    state = hook_state(model)
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != FORMAT:
        raise ValueError("checkpoint is not what gradcomp.comm.save_state returned (a dict with "
                         f"format {FORMAT!r}); a single rank's HookState.state_dict() goes to "
                         "HookState.load_state_dict")
    rank, world = state.ranks.rank, state.world_size
    if checkpoint["world_size"] != world:
        raise ValueError(f"this checkpoint holds the hook states of {checkpoint['world_size']} "
                         f"ranks; this run has {world}: resume with the same number of ranks")
    if rank not in checkpoint["ranks"]:
        raise ValueError(f"this checkpoint lacks rank {rank}'s hook state (it holds ranks "
                         f"{sorted(checkpoint['ranks'])}): save the dictionary that "
                         "gradcomp.comm.save_state returned on the rank it gathered to (dst, "
                         "default 0)")
    device = None
    module = getattr(getattr(model, "_orig_mod", model), "module", None)
    if module is not None:
        device = next((p.device for p in module.parameters()), None)
    state.load_state_dict(_restored(checkpoint["ranks"][rank], device))
    return state


class AllRanks:
    """Every rank's hook state as one object with `state_dict()` / `load_state_dict()`, for
    trainers that checkpoint registered objects from rank 0 (Accelerate's
    `register_for_checkpointing`). `target`: the DDP model, or its `HookState`."""

    def __init__(self, target):
        hook_state(target)  # refuse a model without gradcomp's hook now, not at the checkpoint
        self.target = target

    @property
    def state(self) -> HookState:
        return hook_state(self.target)

    def state_dict(self) -> dict[str, Any]:
        return save_state(self.target)

    def load_state_dict(self, checkpoint: dict[str, Any]) -> None:
        load_state(self.target, checkpoint)


def _portable(obj):
    """A copy of `obj`'s containers with tensors on the CPU and numpy arrays (PowerSGD's seed
    stream) as tensors, so that `torch.load(..., weights_only=True)` reads the checkpoint."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, np.ndarray):
        return {_NUMPY: torch.from_numpy(obj.astype(np.int64)), "dtype": str(obj.dtype)}
    if isinstance(obj, dict):
        return {k: _portable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_portable(v) for v in obj)
    return obj


def _restored(obj, device: torch.device | None):
    """`_portable` undone, with floating-point tensors on `device` (None: where they are);
    other tensors (the random generators' byte states) stay on the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device) if device is not None and obj.is_floating_point() else obj
    if isinstance(obj, dict):
        if _NUMPY in obj:
            return obj[_NUMPY].numpy().astype(obj["dtype"])
        return {k: _restored(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_restored(v, device) for v in obj)
    return obj
