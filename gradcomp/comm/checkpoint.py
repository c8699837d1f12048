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

What is checked. Both functions first make sure that every rank called them (in the process
group's key-value store, never in a collective: `agreement.all_ranks_call`); a rank left alone
for `timeout_s` seconds (say, ``if rank == 0: save_state(ddp)`` while rank 1 trained on) raises
`CheckpointMismatch`, ends its process group, and the other rank's hook raises the same message
from its gradient exchange. Received gradient payloads are checked before use (sizes as
declared, indices in range). `save_state` writes a SHA-256 of every rank's entry; `load_state`
refuses an entry whose bytes changed, and checks every tensor against the hook it loads into:
residuals one value per element of the saved bucket's parameters in a floating-point dtype,
PowerSGD memories (b, n, r) with n the matrix's columns and r at most its rank, and every value
finite unless `allow_nonfinite=True`; each error names the rank, the entry and what is wrong.
"""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .agreement import CHECKPOINT_TIMEOUT_S, all_ranks_call
from .state import HookState

#: The format of `save_state`'s dictionary (2: with a SHA-256 per rank; 1 is read too).
FORMAT = "gradcomp.ranks/2"
_FORMATS = ("gradcomp.ranks/1", FORMAT)
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


def save_state(model, dst: int = 0, timeout_s: float = CHECKPOINT_TIMEOUT_S) -> dict[str, Any]:
    """Every rank's hook state (tensors on the CPU), gathered to group rank `dst`, which gets
    all of them; other ranks get a dictionary with their own state only (`"complete": False`).
    Each rank's entry carries its SHA-256 (`"sha256"`). A collective over the hook's process
    group: call it on every rank (a rank whose peers do not call it within `timeout_s` seconds
    raises `CheckpointMismatch`, see the module's docstring)."""
    state = hook_state(model)
    all_ranks_call("save_state", state.ranks, timeout_s, dst=dst)
    mine = _portable(state.state_dict())
    world, rank = state.world_size, state.ranks.rank
    if world == 1:
        return _saved(1, True, {0: mine})
    group = state.ranks.group
    gathered = [None] * world if rank == dst else None
    dist.gather_object(mine, gathered, dst=dist.get_global_rank(group, dst), group=group)
    if rank == dst:
        return _saved(world, True, dict(enumerate(gathered)))
    return _saved(world, False, {rank: mine})


def _saved(world: int, complete: bool, ranks: dict) -> dict[str, Any]:
    return {"format": FORMAT, "world_size": world, "complete": complete, "ranks": ranks,
            "sha256": {r: checksum(entry) for r, entry in ranks.items()}}


def load_state(model, checkpoint: dict[str, Any], allow_nonfinite: bool = False,
               timeout_s: float = CHECKPOINT_TIMEOUT_S) -> HookState:
    """Restore this rank's entry of a `save_state` dictionary into the hook registered on the
    DDP `model` (register first); floating-point tensors go to the model's device. The entry
    is checked first (its SHA-256, and every tensor against this hook: see the module's
    docstring; `allow_nonfinite`: accept NaN and infinite values). Call it on every rank."""
    state = hook_state(model)
    if not isinstance(checkpoint, dict) or checkpoint.get("format") not in _FORMATS:
        raise ValueError("checkpoint is not what gradcomp.comm.save_state returned (a dict with "
                         f"format {FORMAT!r}); a single rank's HookState.state_dict() goes to "
                         "HookState.load_state_dict")
    all_ranks_call("load_state", state.ranks, timeout_s)
    rank, world = state.ranks.rank, state.world_size
    if checkpoint["world_size"] != world:
        raise ValueError(f"this checkpoint holds the hook states of {checkpoint['world_size']} "
                         f"ranks; this run has {world}: resume with the same number of ranks")
    if rank not in checkpoint["ranks"]:
        raise ValueError(f"this checkpoint lacks rank {rank}'s hook state (it holds ranks "
                         f"{sorted(checkpoint['ranks'])}): save the dictionary that "
                         "gradcomp.comm.save_state returned on the rank it gathered to (dst, "
                         "default 0)")
    entry = checkpoint["ranks"][rank]
    if checkpoint["format"] == FORMAT:
        saved = checkpoint.get("sha256", {}).get(rank)
        if saved != checksum(entry):
            raise ValueError(f"checkpoint damaged: rank {rank}'s hook state does not match the "
                             f"SHA-256 save_state wrote ({saved!r}); its bytes changed since "
                             "(a disk, a copy or an edit): load an intact copy")
    device = None
    module = getattr(getattr(model, "_orig_mod", model), "module", None)
    if module is not None:
        device = next((p.device for p in module.parameters()), None)
    check_entry(entry, state, rank, module, allow_nonfinite)
    state.load_state_dict(_restored(entry, device))
    return state


def checksum(entry) -> str:
    """The SHA-256 of a `_portable` state: its structure, values and tensors' bytes."""
    digest = hashlib.sha256()

    def feed(obj):
        if isinstance(obj, torch.Tensor):
            t = obj.detach().contiguous().cpu()
            digest.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(obj, dict):
            digest.update(f"D{len(obj)}".encode())
            for k in sorted(obj, key=repr):
                digest.update(repr(k).encode())
                feed(obj[k])
        elif isinstance(obj, (list, tuple)):
            digest.update(f"L{len(obj)}".encode())
            for v in obj:
                feed(v)
        else:
            digest.update(f"V{obj!r}".encode())

    feed(entry)
    return digest.hexdigest()


def check_entry(entry, state: HookState, rank: int, module, allow_nonfinite: bool) -> None:
    """Refuse a rank's saved state whose tensors do not fit the hook it loads into: residuals
    (one value per element of the saved bucket's parameters, floating point), PowerSGD memories
    ((b, n, r) for an (m, n) matrix, r <= rank), and non-finite values unless allowed."""
    def bad(where: str, why: str) -> ValueError:
        return ValueError(f"checkpoint refused: rank {rank}'s {where} {why}")

    sizes = [p.numel() for p in module.parameters()] if module is not None else None
    layout = entry.get("layout", {}) if isinstance(entry, dict) else {}
    rank_option = state.compressor.options().get("rank")

    def walk(obj, path: tuple):
        if isinstance(obj, dict) and _NUMPY not in obj:
            for k, v in obj.items():
                walk(v, (*path, k))
            return
        if not isinstance(obj, torch.Tensor):
            return
        where = "/".join(map(str, path))
        if obj.is_floating_point() and not allow_nonfinite and not torch.isfinite(obj).all():
            raise bad(where, "holds NaN or infinite values (pass allow_nonfinite=True to "
                      "load_state if the run allows them)")
        if "residuals" in path:
            if not obj.is_floating_point():
                raise bad(where, f"is {obj.dtype}, not floating point")
            params = layout.get(path[-1])
            if sizes is not None and params is not None and all(i < len(sizes) for i in params):
                want = state.shard_numel(sum(sizes[i] for i in params))
                if obj.numel() != want:
                    raise bad(where, f"has {obj.numel()} values; the bucket it belongs to "
                              f"holds {want} (shape {tuple(obj.shape)})")
        if "memories" in path and isinstance(path[-1], tuple) and len(path[-1]) == 2:
            cols = path[-1][1]
            if obj.dim() != 3 or obj.shape[1] != cols or not (
                    rank_option is None or 1 <= obj.shape[2] <= rank_option):
                raise bad(where, f"has shape {tuple(obj.shape)}; a PowerSGD memory of a "
                          f"{path[-1][0]} x {cols} matrix is (b, {cols}, r) with r <= "
                          f"{rank_option}")

    walk(entry.get("compressor", {}) if isinstance(entry, dict) else {}, ("compressor",))


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
