"""Random-k's Triton kernels (imported on demand by `gradcomp.kernels.randomk.launcher`).

* `positions_kernel`: ``pi(j)`` for j in [0, k), the cycle-walked Feistel permutation of
  `gradcomp.kernels.randomk.reference`, bit for bit. The kernel computes in uint32, whose
  wrapping multiplies equal the reference's int64 products masked to 32 bits. Cycle walking
  repeats the network on the lanes still >= n until no lane of the tile is.
* `finite_kernel`: one read of x; each program writes one int8 flag, 1 if its tile holds a NaN
  or +-Inf.
* `finite_positions_kernel`: both in one launch: each program reads its tile of x, computes
  its share of the positions (no reads: pure compute, which runs while the loads are in flight
  and while other programs wait on memory), then reduces the tile to its flag.
* `gather_kernel`: values = x[indices]; every program reduces the (few) flags first, and
  writes NaN everywhere if one is set. Kernel order on the stream orders the two passes: no
  atomics, no host sync.
* `scatter_kernel`: out[indices] = values over k (out already zero-filled).
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..tiles import device
from .reference import HASH_C1 as _C1, HASH_C2 as _C2

HASH_C1 = tl.constexpr(_C1)
HASH_C2 = tl.constexpr(_C2)
_EXP32 = tl.constexpr(0x7F800000)  # float32 exponent bits: all set for NaN and +-Inf


@device
def _hash32(x):
    """permutation.hash32 on uint32 (multiplies wrap modulo 2**32)."""
    x ^= x >> 16
    x *= HASH_C1
    x ^= x >> 15
    x *= HASH_C2
    x ^= x >> 15
    return x


@device
def _feistel(v, m, mask, k0, k1, k2, k3):
    """permutation.feistel with 4 rounds on uint32 values in [0, 4**m)."""
    left = v >> m
    right = v & mask
    left, right = right, left ^ (_hash32(right ^ k0) & mask)
    left, right = right, left ^ (_hash32(right ^ k1) & mask)
    left, right = right, left ^ (_hash32(right ^ k2) & mask)
    left, right = right, left ^ (_hash32(right ^ k3) & mask)
    return (left << m) | right


@device
def _walk(j, n, m, mask, k0, k1, k2, k3):
    """pi(j) for uint32 lanes j in [0, n): the network, repeated on the lanes still >= n."""
    v = _feistel(j, m, mask, k0, k1, k2, k3)
    while tl.max((v >= n).to(tl.int32), axis=0) > 0:
        v = tl.where(v >= n, _feistel(v, m, mask, k0, k1, k2, k3), v)
    return v


@device
def _positions_tile(pos_ptr, t, n, k, m, mask, k0, k1, k2, k3, BLOCK: tl.constexpr):
    """Positions t * BLOCK, ..., t * BLOCK + BLOCK - 1 (those < k) into pos_ptr, as int64."""
    j = t * BLOCK + tl.arange(0, BLOCK)
    live = j < k
    v = _walk(tl.where(live, j, 0).to(tl.uint32), n, m, mask, k0, k1, k2, k3)  # dead: from 0
    tl.store(pos_ptr + j, v.to(tl.int64), mask=live)


@triton.jit
def positions_kernel(out_ptr, n, k, m, mask, k0, k1, k2, k3, BLOCK: tl.constexpr):
    _positions_tile(out_ptr, tl.program_id(0), n, k, m, mask, k0, k1, k2, k3, BLOCK)


@device
def _tile_flag(x):
    """1 (int8) if the tile x holds a NaN or +-Inf, else 0."""
    bits = x.to(tl.float32).to(tl.int32, bitcast=True)
    return tl.max(((bits & _EXP32) == _EXP32).to(tl.int8), axis=0)


@triton.jit
def finite_kernel(x_ptr, flags_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(flags_ptr + pid, _tile_flag(x))


@triton.jit
def finite_positions_kernel(x_ptr, flags_ptr, pos_ptr, n, k, m, mask, k0, k1, k2, k3, every,
                            ntiles, BLOCK: tl.constexpr, PBLOCK: tl.constexpr):
    """`finite_kernel` plus the position tiles t = pid / every, + nprog / every, ... (< ntiles)
    when `every` divides pid: the tiles spread evenly over the grid (every = nprog // ntiles
    when there are fewer tiles than programs, else 1)."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)  # in flight during the positions
    if pid % every == 0:
        t = pid // every
        step = tl.num_programs(0) // every
        while t < ntiles:  # not range(): the interpreter (numpy 2) rejects runtime bounds
            _positions_tile(pos_ptr, t, n, k, m, mask, k0, k1, k2, k3, PBLOCK)
            t += step
    tl.store(flags_ptr + pid, _tile_flag(x))


@triton.jit
def gather_kernel(x_ptr, idx_ptr, flags_ptr, out_ptr, n, k, nflags, BLOCK: tl.constexpr,
                  FBLOCK: tl.constexpr):
    seen = tl.zeros([FBLOCK], dtype=tl.int8)
    start = 0
    while start < nflags:  # not range(): the interpreter (numpy 2) rejects runtime bounds
        f = start + tl.arange(0, FBLOCK)
        seen = tl.maximum(seen, tl.load(flags_ptr + f, mask=f < nflags, other=0))
        start += FBLOCK
    finite = tl.max(seen, axis=0) == 0
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < k
    idx = tl.load(idx_ptr + offs, mask=live, other=0)
    inside = live & (idx >= 0) & (idx < n) & finite
    v = tl.load(x_ptr + idx, mask=inside, other=float("nan"))
    tl.store(out_ptr + offs, v, mask=live)


@triton.jit
def scatter_kernel(values_ptr, idx_ptr, out_ptr, n, k, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < k
    idx = tl.load(idx_ptr + offs, mask=live, other=0)
    v = tl.load(values_ptr + offs, mask=live)
    tl.store(out_ptr + idx, v, mask=live & (idx >= 0) & (idx < n))
