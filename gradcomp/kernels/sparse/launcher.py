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
  element. Seven launches and one memset (the atomic histograms).
* `threshold_select(x, threshold, k)`: `Threshold`'s compaction for a given float32
  threshold (a 0-d tensor or a number): non-finite elements first, then elements with
  |x| >= threshold, both in index order, capped at k slots; unfilled slots hold value 0 at
  index 0. Bit for bit the torch reference's wire tensors. Reads the input twice.

Inputs as in `gradcomp.kernels.quantize`: float32/float16/bfloat16 CUDA tensors (or CPU tensors
under TRITON_INTERPRET=1) of 1 to MAX_NUMEL elements, compared by the float32 bit pattern of
|x| (exact: float16 and bfloat16 convert to float32 exactly).
"""
from __future__ import annotations

import functools

import torch

from ..launch import cdiv, check_input, interpreting, launch, p2
from . import jit as K

__all__ = ["topk_select", "threshold_select"]

_I32 = torch.int32


# -- launch configuration --------------------------------------------------------------------
#: Tunables (benchmarks/tune_sparse.py sweeps them): elements per loop step and warps of the
#: histogram pass ("hist"), of the split / threshold passes ("split") and of the candidate
#: passes ("cand"); programs per SM of the passes over the input ("progs_per_sm", a
#: persistent grid of contiguous chunks) and of the candidate passes ("cand_progs_per_sm").
#: "hist" and "split" are powers of two (chunks are whole tiles of both). Chosen on an H100
#: (benchmarks/results/h100-2026-11-23/tune/): top-k of 25.6M fp32 in 181 us of GPU time,
#: against 242 us with the first guess.
GPU_TILES = {"hist": 8192, "hist_warps": 8, "split": 1024, "split_warps": 4,
             "progs_per_sm": 16, "cand": 4096, "cand_warps": 8, "cand_progs_per_sm": 2}
#: The interpreter pays per step and per program, but tests want several steps, chunks and
#: candidate blocks on small inputs.
INTERPRETER_TILES = {"hist": 1024, "hist_warps": 4, "split": 1024, "split_warps": 4,
                     "progs": 3, "cand": 1024, "cand_warps": 4, "cand_progs": 2}


#: The compaction passes pack two in-tile counts into 16 bits each.
_MAX_TILE = 1 << 15


def _tiles() -> dict:
    t = INTERPRETER_TILES if interpreting() else GPU_TILES
    if not (t["split"] < _MAX_TILE and t["cand"] < _MAX_TILE):
        raise ValueError(f"tiles {t!r} are not allowed: 'split' and 'cand' must be below "
                         f"{_MAX_TILE} (counts are packed in 16 bits)")
    return t


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _programs(device: torch.device, t: dict) -> tuple[int, int]:
    """(programs of the passes over the input, programs of the candidate passes)."""
    if interpreting():
        return t["progs"], t["cand_progs"]
    sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    return max(1, int(t["progs_per_sm"] * sms)), max(1, int(t["cand_progs_per_sm"] * sms))


def _chunks(n: int, tile: int, programs: int) -> tuple[int, int]:
    """(chunk length, number of chunks): contiguous chunks of whole tiles (of `tile`, a
    multiple of every tile used on them), one per program."""
    chunk = cdiv(cdiv(n, programs), tile) * tile
    return chunk, cdiv(n, chunk)


def _check_k(k, n: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise ValueError(f"k={k!r} is not allowed: k must be an integer in [1, {n}] (the "
                         "number of elements)")
    return k


# -- top-k -----------------------------------------------------------------------------------
def topk_select(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, int32 indices) of the k largest magnitudes of `x` (flattened); see the module
    docstring for ties and order."""
    flat = check_input(x)
    n = flat.numel()
    k = _check_k(k, n)
    dev = flat.device
    t = _tiles()
    progs, qprogs = _programs(dev, t)
    chunk, nchunks = _chunks(n, max(t["hist"], t["split"]), progs)
    nb1, nb = K.NB1.value, K.NB.value
    # zeroed: the atomic histograms (state is written by the split pass; ccum and bcum are
    # written whole before they are read)
    small = torch.zeros(8 + 4 * nb + nb1 + nb1 * nchunks + (nb + 1) * qprogs, dtype=_I32,
                        device=dev)
    state, lhist, ghist, ccum, bcum = small.split(
        [8, 4 * nb, nb1, nb1 * nchunks, (nb + 1) * qprogs])
    cbuf = torch.empty(2 * n, dtype=_I32, device=dev)  # candidate keys, then their indices
    ckey, cidx = cbuf[:n], cbuf[n:]
    vals = torch.empty(k, dtype=flat.dtype, device=dev)
    idx = torch.empty(k, dtype=_I32, device=dev)
    launch(K.topk_hist_kernel, (nchunks,), flat, ghist, ccum, n, chunk, nchunks,
           TILE=t["hist"], num_warps=t["hist_warps"])
    launch(K.topk_split_kernel, (nchunks,), flat, vals, idx, ckey, cidx, state, lhist, ghist,
           ccum, n, k, chunk, nchunks, TILE=t["split"], PB=max(2, p2(nchunks)),
           num_warps=t["split_warps"])
    for level in range(4):  # the write kernel's blocks are level 3's: same grid and TILE
        launch(K.cand_hist_kernel, (qprogs,), ckey, state, lhist, bcum, LEVEL=level,
               TILE=t["cand"], num_warps=t["cand_warps"])
    launch(K.cand_write_kernel, (qprogs,), flat, ckey, cidx, vals, idx, state, lhist, bcum,
           TILE=t["cand"], QB=max(2, p2(qprogs)), num_warps=t["cand_warps"])
    return vals, idx


# -- threshold -------------------------------------------------------------------------------
def threshold_select(x: torch.Tensor, threshold, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, int32 indices) of `Threshold`'s k-slot payload of `x` (flattened) for the
    float32 magnitude `threshold` (not NaN; a 0-d tensor stays on the device, no sync)."""
    flat = check_input(x)
    n = flat.numel()
    k = _check_k(k, n)
    dev = flat.device
    thr = torch.as_tensor(threshold, dtype=torch.float32, device=dev).reshape(1)
    t = _tiles()
    tile = t["split"]
    chunk, nchunks = _chunks(n, tile, _programs(dev, t)[0])
    cnt = torch.empty(2 * nchunks, dtype=_I32, device=dev)
    vals = torch.empty(k, dtype=flat.dtype, device=dev)
    idx = torch.empty(k, dtype=_I32, device=dev)
    launch(K.thr_count_kernel, (nchunks,), flat, thr, cnt, n, chunk, nchunks, TILE=tile,
           num_warps=t["split_warps"])
    launch(K.thr_write_kernel, (nchunks,), flat, thr, cnt, vals, idx, n, k, chunk, nchunks,
           TILE=tile, PB=max(2, p2(nchunks)), num_warps=t["split_warps"])
    return vals, idx
