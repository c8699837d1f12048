"""Every rank must run the same hook: ranks that differ in method, options, hook options,
communicator, bucket layout, iteration or shared random state would silently train apart, or
issue mismatched collectives (which gloo answers with an abort). The hook compares a digest of
each of these across ranks (one all-gather of a few integers) at its first call in a process and
after every resume, and raises `RankMismatch` on every rank alike."""
from __future__ import annotations

import hashlib
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from ..compressors import Compressor
from .ranks import Ranks, release_round_groups


class RankMismatch(RuntimeError):
    """Ranks registered different hooks (or resumed from different checkpoints)."""


#: The name from before every field was compared (it covered the shared random state only).
SharedRandomnessMismatch = RankMismatch


def settings(state, bucket) -> dict[str, str]:
    """What must agree across ranks at this call, as printable strings; `bucket` is the DDP
    bucket of this call (its index, size and dtype stand for the layout)."""
    comp: Compressor = state.compressor
    buf = bucket.buffer()
    random = comp.shared_state() if comp.shared_randomness else b""
    return {
        "method": comp.name,
        "options": repr(sorted(comp.options().items())),
        "hook options": ", ".join(f"{k}={v}" for k, v in state.hook_options().items()),
        "communicator": f"{state.communicator} (block_size={state.block_size})",
        "bucket": f"index {bucket.index()}, {buf.numel()} x {str(buf.dtype)[6:]}",
        "iteration": str(state.iteration),
        "shared random state": hashlib.sha256(random).hexdigest()[:12],
    }


def digest(value: str) -> int:
    return int.from_bytes(hashlib.sha256(value.encode()).digest()[:7], "little")


def check_agreement(mine: dict[str, str], ranks: Ranks, device: torch.device) -> None:
    """Compare `mine` (from `settings`) across ranks; raise `RankMismatch` on every rank,
    naming the fields and each rank's value, if any differs."""
    if ranks.world_size == 1:
        return
    local = torch.tensor([digest(v) for v in mine.values()], dtype=torch.int64, device=device)
    everyone = [torch.empty_like(local) for _ in range(ranks.world_size)]
    dist.all_gather(everyone, local, group=ranks.group)
    table = torch.stack(everyone).cpu()
    differ = [f for i, f in enumerate(mine) if (table[:, i] != table[0, i]).any()]
    if not differ:
        return
    values: list = [None] * ranks.world_size
    dist.all_gather_object(values, {f: mine[f] for f in differ}, group=ranks.group)
    details = "; ".join(f"{f}: " + ", ".join(f"rank {r} {v[f]!r}" for r, v in enumerate(values))
                        for f in differ)
    raise RankMismatch(f"ranks disagree on the gradcomp hook's {', '.join(differ)} ({details}): "
                       "register the same method, options and hook options on every rank, and "
                       "resume every rank from the same checkpoint")


class CheckpointMismatch(RankMismatch):
    """Not every rank called `save_state` / `load_state` (e.g. ``if rank == 0: save_state``)."""


#: Seconds a rank in `save_state` / `load_state` waits for the others to call it too.
CHECKPOINT_TIMEOUT_S = 30.0
_ABORT = "gradcomp.checkpoint/abort"
_calls: dict[tuple[int, ...], int] = {}  # per group (its global ranks): calls so far


def all_ranks_call(what: str, ranks: Ranks, timeout_s: float, **header) -> None:
    """Make sure every rank of `ranks` called `what` (`save_state` or `load_state`) with the
    same `header`, before any of them exchanges a byte of state; else raise
    `CheckpointMismatch` on every rank within `timeout_s` seconds.

    The ranks meet in the process group's key-value store (never in a collective, so a rank
    that is in a gradient exchange instead cannot take the checkpoint's bytes for gradients):
    each writes a key with its header and waits for the others' keys. A rank that is not there
    after `timeout_s` is taken to be elsewhere, for good: the group is out of step (that rank
    waits in an exchange this one will never join), so this rank writes why into the store,
    ends its process groups (which ends the other rank's wait with an error that the hook
    turns into this message, `explained`) and raises."""
    if ranks.world_size == 1:
        return
    store = dist.distributed_c10d._get_default_store()  # noqa: SLF001 - torch has no public one
    members = tuple(dist.get_process_group_ranks(ranks.group))
    call = _calls[members] = _calls.get(members, 0) + 1
    prefix = f"gradcomp.checkpoint/{'.'.join(map(str, members))}/{call}/"
    me = dist.get_rank()
    mine = f"{what}({', '.join(f'{k}={v}' for k, v in header.items())})"
    store.set(prefix + str(me), mine)
    deadline, waiting = time.monotonic() + timeout_s, [r for r in members if r != me]
    while waiting:
        _raise_if_aborted(store)
        try:
            store.wait([prefix + str(waiting[0])], timedelta(seconds=0.2))
            waiting.pop(0)
        except RuntimeError:  # not there yet
            if time.monotonic() >= deadline:
                _abort(store, f"rank {me} called gradcomp.comm.{what} but rank(s) "
                       f"{', '.join(map(str, waiting))} did not within {timeout_s:g} s")
    calls = {r: store.get(prefix + str(r)).decode() for r in members}
    if len(set(calls.values())) > 1:
        raise CheckpointMismatch("ranks called different checkpoint functions at once ("
                                 + ", ".join(f"rank {r}: {c}" for r, c in calls.items())
                                 + "): call the same one, with the same arguments, on every "
                                 "rank")


def _raise_if_aborted(store) -> None:
    if store.check([_ABORT]):
        raise CheckpointMismatch(store.get(_ABORT).decode())


def _abort(store, what: str) -> None:
    message = (f"{what}: gradcomp.comm.save_state and load_state are collectives, call them "
               "on every rank (save_state gathers every rank's state; write the file from "
               "rank 0 only, e.g. `ckpt = save_state(ddp); if rank == 0: torch.save(ckpt, "
               "path)`). The ranks are out of step, so the process group was ended")
    store.set(_ABORT, message)
    release_round_groups()
    dist.destroy_process_group()
    raise CheckpointMismatch(message)


def explained(error: BaseException, ranks: Ranks) -> BaseException:
    """`error` of a failed gradient exchange, or the `CheckpointMismatch` that caused it (a
    rank that gave up waiting for this one in `save_state` / `load_state`)."""
    if ranks.world_size == 1 or not dist.is_initialized():
        return error
    try:
        store = dist.distributed_c10d._get_default_store()  # noqa: SLF001
        if store.check([_ABORT]):
            return CheckpointMismatch(store.get(_ABORT).decode() + " (this rank was in a "
                                      "gradient exchange instead)")
    except (RuntimeError, ValueError):  # the store is gone with the rank that held it
        pass
    return error
