"""Checks that every rank runs the same hook: ranks whose shared random state differs would
silently train apart."""
from __future__ import annotations

import hashlib

import torch
import torch.distributed as dist

from ..compressors import Compressor
from .ranks import Ranks


class SharedRandomnessMismatch(RuntimeError):
    """Ranks would draw different 'shared' random numbers (different seeds or options)."""


def fingerprint(compressor: Compressor) -> int:
    """A digest of what must agree across ranks: method, options and random generator states."""
    h = hashlib.sha256(repr((compressor.name, sorted(compressor.options().items()))).encode())
    h.update(compressor.shared_state())
    return int.from_bytes(h.digest()[:7], "little")


def check_shared_randomness(compressor: Compressor, ranks: Ranks, device: torch.device) -> None:
    """Compare the compressor's fingerprint across ranks; raise on a mismatch."""
    mine = torch.tensor([fingerprint(compressor)], dtype=torch.int64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(ranks.world_size)]
    dist.all_gather(everyone, mine, group=ranks.group)
    values = [int(t.item()) for t in everyone]
    if len(set(values)) > 1:
        raise SharedRandomnessMismatch(
            f"ranks disagree on the shared random state of {compressor.name!r} "
            f"(options {compressor.options()}): build the compressor with the same seed "
            f"and options on every rank (fingerprints by rank: {values})")
