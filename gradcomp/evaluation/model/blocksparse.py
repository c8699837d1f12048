"""What the block-sparse all-reduce (`gradcomp.collectives.blocksparse`, whose docstring gives the
cost of each round) is expected to send and do locally, before any gradient exists.

With per-rank block density d and union density u (fractions of blocks non-zero on one rank,
and on some rank), a tensor of S bytes sends ``d (p-1)/p S`` upstream and the largest owner's
shard holds ``u S / p``, so at d = u = 1 both paths cost the same bytes. For independent random
sparsity u = 1 - (1-d)^p (`union_density`). Local work (the bitmap scan, gathering, adding and
writing back blocks) is apart: `local_bytes` counts the bytes it moves in memory, to be priced
at the host's (or device's) memory rate where it matters (CPU workers).
"""
from __future__ import annotations

import math

from ...collectives.blocksparse import Traffic


def union_density(density: float, workers: int) -> float:
    """Fraction of blocks non-zero on some rank when each rank's blocks are non-zero
    independently with probability `density`."""
    return 1.0 - (1.0 - density) ** workers


def local_bytes(workers: int, numel: int, element_bytes: int, density: float,
                union: float) -> float:
    """Bytes the sparse path reads and writes in memory on one rank, counted from the
    collective's rounds for a tensor of S bytes: the bitmap scan reads it twice (2S);
    selecting, adding and sending the non-zero blocks moves about 5dS; writing the union back
    about 2uS, plus copying the own shard once per further peer, 2(p-2)/p uS."""
    size = numel * element_bytes
    return size * (2 + 5 * density + 2 * union + 2 * max(workers - 2, 0) / workers * union)


def expected_traffic(workers: int, numel: int, element_bytes: int, block_size: int,
                     density: float, union: float) -> Traffic:
    """Traffic for per-rank block density `density` and union density `union` (fractions of
    blocks), blocks spread evenly over the owners."""
    blocks = math.ceil(numel / block_size)
    block_bytes = numel * element_bytes / blocks if blocks else 0.0
    p = workers
    return Traffic(math.ceil(blocks / 8), density * blocks * (p - 1) / p * block_bytes,
                   union * blocks / p * block_bytes)
