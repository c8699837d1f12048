"""Top-k and threshold selection in torch: the compressors' code on CPU tensors (and on devices
without the kernels) and the reference of the Triton selection kernels (`launcher`, same
signatures and the same wire tensors bit for bit; see `gradcomp.compressors.sparsify` for the
methods and their wire formats).

Magnitudes are computed in float32 (float64 for float64 tensors); NaN and +-Inf count as
+Inf, so non-finite elements are always selected. Indices are int32 (int64 for tensors of
2**31 elements or more).
"""
from __future__ import annotations

import math

import torch

from ..blocks import reused, work_dtype

_INT32_LIMIT = 2**31


def index_dtype(n: int) -> torch.dtype:
    """The dtype of the indices of a tensor of `n` elements on the wire."""
    return torch.int32 if n < _INT32_LIMIT else torch.int64


def magnitudes(flat: torch.Tensor) -> torch.Tensor:
    """|flat| in float32 (float64 stays float64), with NaN and +-Inf mapped to +Inf so that
    non-finite elements are always selected."""
    mags = flat.to(work_dtype(flat.dtype)).abs()
    return torch.nan_to_num(mags, nan=math.inf, posinf=math.inf)


#: Magnitudes the CPU top-k samples (a strided sample) to pick its candidates' threshold.
TOPK_SAMPLE = 1 << 16


def sample_stride(n: int) -> int:
    """The stride of the CPU top-k's sample of n magnitudes: the smallest prime at least
    n // TOPK_SAMPLE (1 for small tensors). A power-of-two stride lines up with the rows of
    a weight gradient and samples the same few columns of every row, whose magnitudes are
    not the tensor's: on the built-in MLP's gradients (1024-wide layers) a stride of 64 gave
    0.85-1.9 k candidates (under k: a second pass, twice the time), a stride of 67 1.1-1.3 k."""
    stride = max(1, n // TOPK_SAMPLE)
    while stride > 1 and any(stride % d == 0 for d in range(2, math.isqrt(stride) + 1)):
        stride += 1
    return stride


def _at_least(mags: torch.Tensor, t: torch.Tensor, mask: torch.Tensor | None = None
              ) -> torch.Tensor:
    """Positions (int64, in index order) of the magnitudes >= t or NaN (one compare, one
    in-place negation and one compaction: NaN counts as +Inf without a pass to replace it);
    `mask`: a bool buffer of the magnitudes' size for the comparison (None: a new one)."""
    return torch.nonzero(torch.lt(mags, t, out=mask).logical_not_()).squeeze(1)


def topk_positions(flat: torch.Tensor, k: int, scratch: dict | None = None) -> torch.Tensor:
    """The positions of the k largest magnitudes of the 1-D `flat` (NaN and +-Inf count as
    +Inf), exactly, ties at the k-th magnitude broken by position (the first ones win, as in
    the kernel `launcher.topk_select`), as int64 in index order; for 0 <= k <= numel.

    A sampled threshold plus an exact refinement, instead of torch.topk over the whole tensor
    (8-10x cheaper on a CPU at 1%): every `sample_stride`-th magnitude (about `TOPK_SAMPLE`)
    gives a threshold t a few standard deviations below the sample's estimate of the k-th
    largest; the candidates (>= t) are compacted in index order (about 1.2k of them for
    random data), and among them the k-th largest v is found by `kthvalue`; the result is every
    candidate > v and the first candidates == v. If fewer than k elements reach t (a sample
    that misjudged the data), t is lowered, down to the whole tensor: the result is exact
    whatever the sample, only the cost depends on it.

    `scratch`: a dict the caller keeps per tensor it selects from, holding the magnitudes'
    and the comparison's buffers between calls (`blocks.reused`), so that a call allocates
    only what is about the size of k.
    """
    n = flat.numel()
    if k == 0:
        return torch.empty(0, dtype=torch.int64, device=flat.device)
    dtype = work_dtype(flat.dtype)
    mags, mask = ((None, None) if scratch is None else
                  (reused(scratch, (n,), dtype, flat.device),
                   reused(scratch, (n,), torch.bool, flat.device)))
    mags = torch.abs(flat.to(dtype), out=mags)  # NaN stays NaN (see `_at_least`)
    stride = sample_stride(n)
    sample = torch.nan_to_num(mags[::stride], nan=math.inf, posinf=math.inf)
    s = sample.numel()
    if stride == 1:
        rank = k  # the sample is the tensor: t is the k-th largest itself
    else:
        expect = k * s / n
        rank = min(s, math.ceil(expect + 4.0 * math.sqrt(expect) + 8))
    while True:
        t = torch.topk(sample, rank, sorted=False).values.min()
        cand = _at_least(mags, t, mask)
        if cand.numel() >= k:
            break
        if rank == s:  # the sample's minimum still leaves fewer than k: every element
            cand = torch.arange(n, device=flat.device)
            break
        rank = min(s, 4 * rank)
    if cand.numel() == k:
        return cand
    cm = torch.nan_to_num_(mags[cand], nan=math.inf, posinf=math.inf)
    v = torch.kthvalue(cm, cm.numel() - k + 1).values  # the k-th largest candidate
    above = cm > v
    tied = cm == v
    take = above | (tied & (torch.cumsum(tied, 0) <= k - int(above.sum())))
    return cand[take]


def topk_select(flat: torch.Tensor, k: int, scratch: dict | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices) of the k largest magnitudes of the 1-D `flat`: `topk_positions` on a
    CPU (the same set as the kernel; `scratch` as there), torch.topk elsewhere (its own choice
    among ties)."""
    if flat.device.type == "cpu":
        indices = topk_positions(flat, k, scratch)
    else:
        indices = torch.topk(magnitudes(flat), k, sorted=False).indices
    return flat[indices], indices.to(index_dtype(flat.numel()))


def threshold_select(flat: torch.Tensor, threshold: torch.Tensor,
                     k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices) of `Threshold`'s k-slot payload of the non-empty 1-D `flat` for the
    magnitude `threshold`: the non-finite elements first, then the others >= threshold, in
    index order; unfilled slots carry value 0 at index 0."""
    if flat.device.type == "cpu":
        return _threshold_select_cpu(flat, threshold, k)
    mags = magnitudes(flat)
    passing = mags >= threshold
    non_finite = mags == math.inf  # NaN and +-Inf: they take the first slots
    slot = torch.arange(k, device=flat.device)
    first = torch.nonzero_static(non_finite, size=k, fill_value=0).squeeze(1)
    rest = torch.nonzero_static(passing & ~non_finite, size=k, fill_value=0).squeeze(1)
    n_first = non_finite.sum()
    indices = torch.where(slot < n_first, first, rest[(slot - n_first).clamp(0, k - 1)])
    filled = slot < passing.sum()
    values = torch.where(filled, flat[indices], torch.zeros((), dtype=flat.dtype,
                                                             device=flat.device))
    return values, indices.to(index_dtype(flat.numel()))


def _threshold_select_cpu(flat: torch.Tensor, threshold: torch.Tensor,
                          k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`threshold_select` on a CPU, the same bit for bit, with host syncs: one compare and one
    compaction of the passing positions (non-finite ones included), then the non-finite ones
    moved to the front, instead of two masks and two compactions over the whole tensor."""
    mags = flat.to(work_dtype(flat.dtype)).abs()  # NaN stays NaN: it passes any threshold
    passing = _at_least(mags, threshold)
    odd = ~torch.isfinite(mags[passing])  # NaN and +-Inf: they take the first slots
    if bool(odd.any()):
        passing = torch.cat([passing[odd], passing[~odd]])
    indices = passing[:k]
    pad = k - indices.numel()
    values = flat[indices]
    if pad:  # unfilled slots: value 0 at index 0
        values = torch.cat([values, values.new_zeros(pad)])
        indices = torch.cat([indices, indices.new_zeros(pad)])
    return values, indices.to(index_dtype(flat.numel()))
