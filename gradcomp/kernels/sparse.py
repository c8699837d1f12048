"""Exact top-k and threshold selection with Triton: the wire tensors of `compressor("topk")`
and `compressor("threshold")`, without host syncs (the launches and their sizes depend only
on the input's size and k).

* `topk_select(x, k)`: the k largest magnitudes (NaN and +-Inf count as +Inf), exactly, ties
  at the k-th magnitude broken by position (the first ones win). Values in x's dtype (bit
  copies), int32 indices. Order: the elements of the first-level magnitude bins (octaves)
  above the bin of the k-th largest, in index order, then the selected elements of that bin,
  in index order; deterministic, and the additive decode does not depend on it (torch.topk's
  order is arbitrary). Reads the input twice (a histogram pass and a split pass); the radix select
  that follows reads only the elements in the k-th largest's bin. Scratch: 8 bytes per
  element.
* `threshold_select(x, threshold, k)`: `Threshold`'s compaction for a given float32
  threshold (a 0-d tensor or a number): non-finite elements first, then elements with
  |x| >= threshold, both in index order, capped at k slots; unfilled slots hold value 0 at
  index 0. Bit for bit the torch reference's wire tensors. Reads the input twice.

Inputs as in `gradcomp.kernels.ops`: float32/float16/bfloat16 CUDA tensors (or CPU tensors
under TRITON_INTERPRET=1) of 1 to MAX_NUMEL elements, compared by the float32 bit pattern of
|x| (exact: float16 and bfloat16 convert to float32 exactly).
"""
from __future__ import annotations

import functools

import torch

from . import _triton_sparse as K
from . import interpreting
from .ops import _cdiv, _check_input, _launch, _p2

__all__ = ["topk_select", "threshold_select"]

_I32 = torch.int32


# -- launch configuration --------------------------------------------------------------------
def _tiles() -> tuple[int, int]:
    """Elements per loop step of (the histogram pass, the other passes). Compiled: the
    ballot-based tl.histogram costs least per element with 32 per thread (4 warps), the
    compaction passes with 16 (sm_90 SASS: ~1.2 and ~1.6 warp instructions per element). The
    interpreter pays per step, but tests want several steps and chunks on small inputs."""
    return (1024, 1024) if interpreting() else (4096, 2048)


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _programs(device: torch.device) -> tuple[int, int]:
    """(programs of the passes over the input, programs of the candidate passes): a
    persistent grid of a few programs per SM; a tiny one under the interpreter."""
    if device.type != "cuda":
        return 3, 2
    sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    return 8 * sms, 64


def _chunks(n: int, tile: int, programs: int) -> tuple[int, int]:
    """(chunk length, number of chunks): contiguous chunks of whole tiles (of `tile`, a
    multiple of every tile used on them), one per program."""
    chunk = _cdiv(_cdiv(n, programs), tile) * tile
    return chunk, _cdiv(n, chunk)


def _check_k(k, n: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise ValueError(f"k={k!r} is not allowed: k must be an integer in [1, {n}] (the "
                         "number of elements)")
    return k


# -- top-k -----------------------------------------------------------------------------------
def topk_select(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, int32 indices) of the k largest magnitudes of `x` (flattened); see the module
    docstring for ties and order."""
    flat = _check_input(x)
    n = flat.numel()
    k = _check_k(k, n)
    dev = flat.device
    htile, tile = _tiles()
    progs, qprogs = _programs(dev)
    chunk, nchunks = _chunks(n, htile, progs)
    nb1, nb = K.NB1.value, K.NB.value
    small = torch.empty(8 + 3 * nb + nchunks * (nb1 + 2) + qprogs * (nb + 1), dtype=_I32,
                        device=dev)
    state, lhist, chist, above, cand, bhist, babove = small.split(
        [8, 3 * nb, nchunks * nb1, nchunks, nchunks, qprogs * nb, qprogs])
    cbuf = torch.empty(2 * n, dtype=_I32, device=dev)  # candidate keys, then their indices
    ckey, cidx = cbuf[:n], cbuf[n:]
    vals = torch.empty(k, dtype=flat.dtype, device=dev)
    idx = torch.empty(k, dtype=_I32, device=dev)
    rows = 64
    _launch(K._topk_hist_kernel, (nchunks,), flat, chist, n, chunk, TILE=htile, num_warps=4)
    _launch(K._topk_chunk_counts_kernel, (_cdiv(nchunks, rows),), chist, state, lhist, above,
            cand, nchunks, k, ROWS=rows, num_warps=4)
    _launch(K._topk_split_kernel, (nchunks,), flat, vals, idx, ckey, cidx, state, above, cand,
            n, chunk, TILE=tile, PB=max(2, _p2(nchunks)), num_warps=4)
    for level in range(4):
        _launch(K._cand_hist_kernel, (qprogs,), ckey, state, lhist, bhist, babove,
                LEVEL=level, TILE=htile, num_warps=8)
    # the same TILE as level 3: the blocks of its per-block histograms
    _launch(K._cand_write_kernel, (qprogs,), flat, ckey, cidx, vals, idx, state, lhist, bhist,
            babove, TILE=htile, QB=max(2, _p2(qprogs)), num_warps=8)
    return vals, idx


# -- threshold -------------------------------------------------------------------------------
def threshold_select(x: torch.Tensor, threshold, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, int32 indices) of `Threshold`'s k-slot payload of `x` (flattened) for the
    float32 magnitude `threshold` (not NaN; a 0-d tensor stays on the device, no sync)."""
    flat = _check_input(x)
    n = flat.numel()
    k = _check_k(k, n)
    dev = flat.device
    thr = torch.as_tensor(threshold, dtype=torch.float32, device=dev).reshape(1)
    tile = _tiles()[1]
    chunk, nchunks = _chunks(n, tile, _programs(dev)[0])
    cnt = torch.empty(2 * nchunks, dtype=_I32, device=dev)
    vals = torch.empty(k, dtype=flat.dtype, device=dev)
    idx = torch.empty(k, dtype=_I32, device=dev)
    _launch(K._thr_count_kernel, (nchunks,), flat, thr, cnt, n, chunk, nchunks, TILE=tile,
            num_warps=4)
    _launch(K._thr_write_kernel, (nchunks,), flat, thr, cnt, vals, idx, n, k, chunk, nchunks,
            TILE=tile, PB=max(2, _p2(nchunks)), num_warps=4)
    return vals, idx
