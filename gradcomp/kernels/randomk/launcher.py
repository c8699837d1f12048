"""Random-k's kernels: the shared positions, the gather of their values, and the decode.

Imported lazily by `gradcomp.kernels` (this module imports Triton). Inputs live on a CUDA
device, or on the CPU when Triton's interpreter is on (TRITON_INTERPRET=1 before the first
import).

* `randomk_encode(x, k, keys)`: (values, indices) of random-k, two launches, no host sync: a
  finiteness pass over x whose programs also compute the positions ``pi(0), ..., pi(k - 1)``
  (pure integer work, hidden under the read of x), then the gather over k.
* `randomk_positions(n, k, keys, device)`: the positions alone, int64, equal bit for bit to
  `gradcomp.kernels.randomk.reference.positions` (its torch reference): one launch over k, no
  host-device copy (the 4 round keys are scalar arguments).
* `randomk_gather(x, indices)`: ``x[indices]`` in x's dtype, all NaN if x holds a NaN or
  +-Inf: a finiteness pass over x (one read, one int8 flag per program) and a gather over
  k that reduces the flags itself; two launches, no host sync.
* `randomk_scatter(values, indices, n)`: the dense decode, ``zeros(n)`` with
  ``out[indices] = values``: torch's fill (at write bandwidth) and one scatter launch over k.
  Not one kernel: with the zeros and the values written by different programs, nothing orders
  a program's zero over a value another program put at the same address, short of a grid-wide
  barrier (unsafe when other kernels, e.g. NCCL's, hold SMs) or of each program finding the
  values of its own tile (the inverse permutation of all n positions: ~10x the positions'
  compute for n = 100 k).
"""
from __future__ import annotations

import torch

from ..launch import MAX_NUMEL, SUPPORTED_DTYPES, cdiv, check_input, interpreting, launch
from . import jit as K
from .reference import check_keys, half_bits

__all__ = ["randomk_encode", "randomk_positions",
           "randomk_gather", "randomk_scatter"]

#: Tiles (elements per program) and warps. The interpreter pays ~ms per program: big tiles.
#: "encode_positions" is the position tile of the fused finiteness pass ("finite" elements of
#: x and "finite_warps" per program).
GPU_TILES = {"positions": 256, "positions_warps": 2, "finite": 8192, "finite_warps": 8,
             "encode_positions": 256, "gather": 1024, "gather_warps": 4, "flags": 4096,
             "scatter": 1024, "scatter_warps": 4}
INTERPRETER_TILES = {"positions": 32768, "positions_warps": 4, "finite": 32768,
                     "finite_warps": 4, "encode_positions": 32768, "gather": 32768,
                     "gather_warps": 4, "flags": 1024, "scatter": 32768, "scatter_warps": 4}


def _tiles() -> dict:
    return INTERPRETER_TILES if interpreting() else GPU_TILES


def _check_device(device) -> torch.device:
    device = torch.device(device)
    if device.type != "cuda" and not interpreting():
        raise RuntimeError("the Triton kernels need a CUDA device (or TRITON_INTERPRET=1 set "
                           "before gradcomp.kernels is first used)")
    return device


def _check_k(k, n: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= n:
        raise ValueError(f"k={k!r} is not allowed: k must be an integer in [0, n={n}]")
    return k


def _check_indices(indices, device) -> torch.Tensor:
    """`indices` flattened and contiguous, or a TypeError/ValueError naming the option."""
    if not isinstance(indices, torch.Tensor) or indices.dtype not in (torch.int64, torch.int32):
        got = indices.dtype if isinstance(indices, torch.Tensor) else type(indices).__name__
        raise TypeError(f"indices must be an int64 or int32 tensor, got {got}")
    if indices.device != device:
        raise ValueError(f"indices are on {indices.device}, the values on {device}: put both "
                         "on one device")
    return indices.reshape(-1).contiguous()


def randomk_positions(n: int, k: int, keys, device) -> torch.Tensor:
    """The k positions ``pi(0), ..., pi(k - 1)`` in [0, n) (distinct, in this order), int64
    on `device`, for the 4 round keys `keys` (ints in [0, 2**31))."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= MAX_NUMEL:
        raise ValueError(f"n={n!r} is not allowed: n must be an integer in [1, {MAX_NUMEL}]")
    k = _check_k(k, n)
    keys = check_keys(keys)
    out = torch.empty(k, dtype=torch.int64, device=_check_device(device))
    if k:
        t = _tiles()
        m = half_bits(n)
        launch(K.positions_kernel, (cdiv(k, t["positions"]),), out, n, k, m, (1 << m) - 1,
               *keys, BLOCK=t["positions"], num_warps=t["positions_warps"])
    return out


def randomk_encode(x: torch.Tensor, k: int, keys) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices) of random-k on x (flattened): indices = ``randomk_positions(n, k,
    keys)``, values = ``x[indices]`` in x's dtype, every value NaN if x holds a NaN or +-Inf."""
    flat = check_input(x)
    n = flat.numel()
    k = _check_k(k, n)
    keys = check_keys(keys)
    indices = torch.empty(k, dtype=torch.int64, device=flat.device)
    values = torch.empty(k, dtype=flat.dtype, device=flat.device)
    if k:
        t = _tiles()
        m = half_bits(n)
        nflags = cdiv(n, t["finite"])
        ntiles = cdiv(k, t["encode_positions"])
        flags = torch.empty(nflags, dtype=torch.int8, device=flat.device)
        launch(K.finite_positions_kernel, (nflags,), flat, flags, indices, n, k, m,
               (1 << m) - 1, *keys, max(1, nflags // ntiles), ntiles, BLOCK=t["finite"],
               PBLOCK=t["encode_positions"], num_warps=t["finite_warps"])
        launch(K.gather_kernel, (cdiv(k, t["gather"]),), flat, indices, flags, values, n,
               k, nflags, BLOCK=t["gather"], FBLOCK=t["flags"], num_warps=t["gather_warps"])
    return values, indices


def randomk_gather(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """``x.reshape(-1)[indices.reshape(-1)]`` in x's dtype; every value NaN if x holds a NaN or
    +-Inf (and NaN at an index outside [0, x.numel()), which is never read)."""
    flat = check_input(x)
    idx = _check_indices(indices, flat.device)
    n, k = flat.numel(), idx.numel()
    out = torch.empty(k, dtype=flat.dtype, device=flat.device)
    if k:
        t = _tiles()
        nflags = cdiv(n, t["finite"])
        flags = torch.empty(nflags, dtype=torch.int8, device=flat.device)
        launch(K.finite_kernel, (nflags,), flat, flags, n, BLOCK=t["finite"],
               num_warps=t["finite_warps"])
        launch(K.gather_kernel, (cdiv(k, t["gather"]),), flat, idx, flags, out, n, k,
               nflags, BLOCK=t["gather"], FBLOCK=t["flags"], num_warps=t["gather_warps"])
    return out


def randomk_scatter(values: torch.Tensor, indices: torch.Tensor, n: int) -> torch.Tensor:
    """The dense (n,) tensor in values' dtype that holds ``values[j]`` at ``indices[j]`` and
    zeros elsewhere, as ``zeros(n).index_put_((indices,), values)`` for distinct indices
    (equal bit for bit); an index outside [0, n) is skipped."""
    if not isinstance(values, torch.Tensor) or values.dtype not in SUPPORTED_DTYPES:
        got = values.dtype if isinstance(values, torch.Tensor) else type(values).__name__
        raise TypeError(f"values must be a float32, float16 or bfloat16 tensor, got {got}")
    vals = values.reshape(-1).contiguous()
    _check_device(vals.device)
    idx = _check_indices(indices, vals.device)
    if idx.numel() != vals.numel():
        raise ValueError(f"indices hold {idx.numel()} values, values {vals.numel()}: one index "
                         "per value")
    if isinstance(n, bool) or not isinstance(n, int) or not vals.numel() <= n <= MAX_NUMEL:
        raise ValueError(f"n={n!r} is not allowed: n must be an integer in "
                         f"[values.numel()={vals.numel()}, {MAX_NUMEL}]")
    out = torch.zeros(n, dtype=vals.dtype, device=vals.device)
    t = _tiles()
    k = vals.numel()
    if k:
        launch(K.scatter_kernel, (cdiv(k, t["scatter"]),), vals, idx, out, n, k,
               BLOCK=t["scatter"], num_warps=t["scatter_warps"])
    return out
