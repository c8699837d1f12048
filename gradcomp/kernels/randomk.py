"""Random-k's kernels: the shared positions and the gather of their values.

Imported lazily by `gradcomp.kernels` (this module imports Triton). Inputs live on a CUDA
device, or on the CPU when Triton's interpreter is on (TRITON_INTERPRET=1 before the first
import).

* `randomk_positions(n, k, keys, device)`: ``pi(0), ..., pi(k - 1)`` of the keyed Feistel
  permutation of [0, n), int64, equal bit for bit to
  `gradcomp.compressors.permutation.positions` (its torch reference): one launch over k, no
  host-device copy (the 4 round keys are scalar arguments).
* `randomk_gather(x, indices)`: ``x[indices]`` in x's dtype, all NaN if x holds a NaN or
  +-Inf: a finiteness pass over x (one read, one int8 flag per program) and a gather over
  k that reduces the flags itself; two launches, no host sync.

Decoding stays torch (``zeros(n).index_put_``): a fill at memory speed and a scatter of k.
"""
from __future__ import annotations

import torch

from . import _triton_randomk as K
from . import interpreting
from .ops import MAX_NUMEL, _cdiv, _check_input, _launch

__all__ = ["randomk_positions", "randomk_gather"]

ROUNDS = 4
KEY_LIMIT = 2**31
#: Tiles (elements per program) and warps. The interpreter pays ~ms per program: big tiles.
GPU_TILES = {"positions": 256, "positions_warps": 2, "finite": 8192, "finite_warps": 8,
             "gather": 1024, "gather_warps": 4, "flags": 4096}
INTERPRETER_TILES = {"positions": 32768, "positions_warps": 4, "finite": 32768,
                     "finite_warps": 4, "gather": 32768, "gather_warps": 4, "flags": 1024}


def _tiles() -> dict:
    return INTERPRETER_TILES if interpreting() else GPU_TILES


def _half_bits(n: int) -> int:
    """As `gradcomp.compressors.permutation.half_bits` (kernels do not import compressors)."""
    return max(1, -(-(n - 1).bit_length() // 2))


def _check_device(device) -> torch.device:
    device = torch.device(device)
    if device.type != "cuda" and not interpreting():
        raise RuntimeError("the Triton kernels need a CUDA device (or TRITON_INTERPRET=1 set "
                           "before gradcomp.kernels is first used)")
    return device


def randomk_positions(n: int, k: int, keys, device) -> torch.Tensor:
    """The k positions ``pi(0), ..., pi(k - 1)`` in [0, n) (distinct, in this order), int64
    on `device`, for the `ROUNDS` round keys `keys` (ints in [0, 2**31))."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= MAX_NUMEL:
        raise ValueError(f"n={n!r} is not allowed: n must be an integer in [1, {MAX_NUMEL}]")
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= n:
        raise ValueError(f"k={k!r} is not allowed: k must be an integer in [0, n={n}]")
    ok = (isinstance(keys, (list, tuple)) and len(keys) == ROUNDS
          and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < KEY_LIMIT
                  for v in keys))
    if not ok:
        raise ValueError(f"keys={keys!r} is not allowed: keys must be a list of {ROUNDS} "
                         "integers in [0, 2**31)")
    out = torch.empty(k, dtype=torch.int64, device=_check_device(device))
    if k:
        t = _tiles()
        m = _half_bits(n)
        _launch(K._positions_kernel, (_cdiv(k, t["positions"]),), out, n, k, m, (1 << m) - 1,
                *keys, BLOCK=t["positions"], num_warps=t["positions_warps"])
    return out


def randomk_gather(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """``x.reshape(-1)[indices.reshape(-1)]`` in x's dtype; every value NaN if x holds a NaN or
    +-Inf (and NaN at an index outside [0, x.numel()), which is never read)."""
    flat = _check_input(x)
    if not isinstance(indices, torch.Tensor) or indices.dtype not in (torch.int64, torch.int32):
        got = indices.dtype if isinstance(indices, torch.Tensor) else type(indices).__name__
        raise TypeError(f"indices must be an int64 or int32 tensor, got {got}")
    if indices.device != flat.device:
        raise ValueError(f"indices are on {indices.device}, x on {flat.device}: put both on "
                         "one device")
    idx = indices.reshape(-1).contiguous()
    n, k = flat.numel(), idx.numel()
    out = torch.empty(k, dtype=flat.dtype, device=flat.device)
    if k:
        t = _tiles()
        nflags = _cdiv(n, t["finite"])
        flags = torch.empty(nflags, dtype=torch.int8, device=flat.device)
        _launch(K._finite_kernel, (nflags,), flat, flags, n, BLOCK=t["finite"],
                num_warps=t["finite_warps"])
        _launch(K._gather_kernel, (_cdiv(k, t["gather"]),), flat, idx, flags, out, n, k,
                nflags, BLOCK=t["gather"], FBLOCK=t["flags"], num_warps=t["gather_warps"])
    return out
