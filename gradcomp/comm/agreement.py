"""Every rank must run the same hook: ranks that differ in method, options, hook options,
communicator, bucket layout, iteration or shared random state would silently train apart, or
issue mismatched collectives (which gloo answers with an abort). The hook compares a digest of
each of these across ranks (one all-gather of a few integers) at its first call in a process and
after every resume, and raises `RankMismatch` on every rank alike."""
from __future__ import annotations

import hashlib

import torch
import torch.distributed as dist

from ..compressors import Compressor
from .ranks import Ranks


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
