"""Sparsification: send a few elements of the gradient and their positions.

* `topk`: the k largest magnitudes (values + int32 indices, all-gathered).
* `randomk`: k positions drawn from a seed shared by all ranks, so only the values travel and
  payloads are all-reducible.
* `threshold`: every element above a magnitude threshold estimated from a random sample (DGC);
  the payload size depends on the data.

Counts use ``k = ceil(ratio * n)`` (at least 1 for a non-empty tensor); the product is taken
with a relative tolerance of 1e-9 so that float rounding (``0.07 * 100 == 7.000000000000001``)
does not add an element.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from .. import kernels
from ..kernels.randomk import reference as randomk
from ..kernels.sparse import reference
from ..kernels.sparse.reference import index_dtype, magnitudes
from ..checks import check_int, check_ratio
from .base import Compressor, Payload, work_dtype
from .registry import register

def _count(ratio: float, n: int) -> int:
    """ceil(ratio * n), at least 1 and at most n for n > 0; 0 for n == 0."""
    if n <= 0:
        return 0
    x = ratio * n
    return min(n, max(1, math.ceil(x * (1.0 - 1e-9))))


def _scatter_mean(payloads: list[Payload], ordered: bool | None = None,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over workers of sparse (values, indices) payloads, as a dense tensor (summed in
    `out` where given: a flat tensor of the payloads' numel in float32/float64).

    Accumulates in float32 (float64 for float64 gradients). Every rank must get bit-identical
    results, so the order of the additions must not depend on the hardware: on CPU, or with at
    most two payloads (``0 + a + b == 0 + b + a``), one `index_add_` over the concatenated
    payloads; otherwise (atomics on accelerators) one `index_add_` per payload, in payload order
    (indices within one payload are distinct, so each add is order-free). `ordered` forces
    one of the two ways (for tests).
    """
    if not payloads:
        raise ValueError("aggregate needs at least one payload")
    first = payloads[0]
    buf = (torch.zeros(first.numel, dtype=work_dtype(first.dtype), device=first.device)
           if out is None else out.zero_())
    if first.numel:
        if ordered is None:
            ordered = buf.device.type != "cpu" and len(payloads) > 2
        if not ordered:
            values = torch.cat([p.tensors[0] for p in payloads]).to(buf.dtype)
            indices = check_indices(torch.cat([p.tensors[1] for p in payloads]), first.numel)
            buf.index_add_(0, indices, values)
        else:
            for p in payloads:
                buf.index_add_(0, check_indices(p.tensors[1], first.numel),
                               p.tensors[0].to(buf.dtype))
        buf.div_(len(payloads))
    return buf if out is not None else buf.to(first.dtype).reshape(first.shape)


def check_indices(indices: torch.Tensor, numel: int) -> torch.Tensor:
    """`indices`, once checked to lie in 0..numel-1 (a received payload that does not is
    not a gradient payload of this bucket: its bytes came from another exchange)."""
    if indices.numel():
        low, high = torch.aminmax(indices)
        ok = (low >= 0) & (high < numel)
        if indices.is_cuda:
            torch._assert_async(ok, "gradcomp: a received payload's indices are out of range")
        elif not bool(ok):
            raise RuntimeError(f"a received sparse payload's indices span {int(low)}.."
                               f"{int(high)}, outside the bucket's 0..{numel - 1}: it is not "
                               "a gradient payload of this bucket (did every rank call the "
                               "same collectives?)")
    return indices


def _subtract_at(corrected: torch.Tensor, positions: torch.Tensor,
                 decoded: torch.Tensor) -> torch.Tensor:
    """`Compressor.left_over` of a payload that decodes to `decoded` at the distinct
    `positions` and to zeros elsewhere, in `corrected`'s own buffer (x - 0 is x, bit for bit):
    error feedback then allocates no dense decoded tensor and no dense difference."""
    flat = corrected.view(-1)
    flat[positions] = flat[positions] - decoded
    return corrected


class _SparseGather(Compressor):
    """Shared by `topk` and `threshold`: wire = (values in the gradient's dtype, indices)."""

    aggregation = "allgather"

    def _decompress(self, payload: Payload) -> torch.Tensor:
        values, indices = payload.tensors
        out = torch.zeros(payload.numel, dtype=values.dtype, device=values.device)
        return out.index_add_(0, check_indices(indices, payload.numel), values)  # padding: 0s

    def aggregate(self, payloads: list[Payload]) -> torch.Tensor:
        return _scatter_mean(payloads)

    def aggregate_into(self, payloads: list[Payload], out: torch.Tensor) -> torch.Tensor:
        if out.dtype != work_dtype(out.dtype) or not out.is_contiguous():
            return super().aggregate_into(payloads, out)
        return _scatter_mean(payloads, out=out)


@register
class TopK(_SparseGather):
    """Top-k sparsification (Aji & Heafield, EMNLP 2017; Stich et al., NeurIPS 2018): keep the
    ``k = ceil(ratio * n)`` largest magnitudes.

    Wire: k values in the gradient's dtype + k int32 indices (int64 for n >= 2**31).
    Non-finite input: NaN and +-Inf count as infinitely large, so they are always selected and
    arrive at their own positions (if there are more than k of them, k of them travel).
    CUDA tensors use `gradcomp.kernels.topk_select` (an exact radix select without host syncs),
    CPU tensors `topk_positions` of `gradcomp.kernels.sparse.reference` (a sampled threshold
    and an exact refinement, indices in index order; its magnitudes' and comparison's buffers,
    5 bytes per value (9 for float64), kept per key between calls, not pickled); both break
    ties at the k-th magnitude by position (the first ones win), so they select the same set.
    Other devices use torch.topk, whose choice among ties is its own: the decoded tensors
    agree wherever the k-th magnitude is not tied across the cut.
    """

    name = "topk"

    def __init__(self, ratio: float = 0.01):
        self.ratio = check_ratio(ratio)

    def options(self) -> dict[str, Any]:
        return {"ratio": self.ratio}

    def _compress(self, flat, key):
        n = flat.numel()
        k = _count(self.ratio, n)
        if kernels.supports_selection(flat):
            return list(kernels.topk_select(flat, k)), {}
        scratch = self.__dict__.setdefault("_scratch", {}).setdefault(key, {})
        return list(reference.topk_select(flat, k, scratch)), {}

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_scratch"}

    def left_over(self, corrected, payload):
        values, indices = payload.tensors  # distinct; decoded as 0 + value (-0.0 as +0.0)
        return _subtract_at(corrected, indices, values + 0)

    def wire_nbytes(self, numel, dtype=torch.float32):
        return _count(self.ratio, numel) * (dtype.itemsize + index_dtype(numel).itemsize)


@register
class RandomK(Compressor):
    """Random-k sparsification (Stich et al., "Sparsified SGD with Memory", NeurIPS 2018): keep
    ``k = ceil(ratio * n)`` distinct positions, ``pi(0), ..., pi(k - 1)`` for a keyed
    pseudo-random permutation ``pi`` of [0, n): a 4-round balanced Feistel network (Luby &
    Rackoff, SIAM J. Comput. 1988) over the smallest even number of bits covering n, brought
    into [0, n) by cycle walking (Black & Rogaway, CT-RSA 2002); see
    `gradcomp.kernels.randomk.reference`. The permutation is pseudo-random (a statistical
    one, not a cryptographic one): positions pass inclusion- and pair-frequency tests for uniform
    k-subsets. Cost O(k) for the positions (about 4**m / n < 4 network evaluations each), plus
    one read of the tensor for the finiteness check and the gather of k values.

    The 4 round keys of a call come from the compressor's CPU generator, seeded by the shared
    `seed` (one draw per `compress` call, so every rank must compress the same tensors in the
    same order); the positions depend only on (seed, call number, n, ratio), not on the device:
    CUDA tensors use the Triton kernels (`gradcomp.kernels.randomk_encode`: positions computed
    inside the finiteness pass, keys passed as scalars, then the gather; two launches, no host
    sync; decode `randomk_scatter`: a fill and one scatter launch), everything else the torch
    reference, with the same result bit for bit. Only the k values travel (in the gradient's
    dtype) and payloads are summed by all-reduce; the positions stay, in the order
    j = 0..k-1 (not sorted), in ``payload.meta["indices"]`` (int64). Values are not rescaled
    by n/k: this is the biased contraction form, meant to be used with error feedback.
    Non-finite input: if any element is NaN or +-Inf, every transmitted value is NaN.
    """

    name = "randomk"
    aggregation = "allreduce"
    shared_randomness = True

    def __init__(self, ratio: float = 0.01, seed: int = 0):
        self.ratio = check_ratio(ratio)
        self.seed = check_int(seed, "seed", 0)

    def options(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "seed": self.seed}

    def _compress(self, flat, key):
        n = flat.numel()
        k = _count(self.ratio, n)
        keys = randomk.draw_keys(self._generator(torch.device("cpu")))
        encode = kernels.randomk_encode if kernels.supports(flat) else randomk.randomk_encode
        values, indices = encode(flat, k, keys)
        return [values], {"indices": indices}

    def _decompress(self, payload: Payload) -> torch.Tensor:
        (values,) = payload.tensors
        scatter = (kernels.randomk_scatter
                   if kernels.supports_decode(values, values.dtype, payload.numel)
                   else randomk.randomk_scatter)
        return scatter(values, payload.meta["indices"], payload.numel)

    def left_over(self, corrected, payload):
        return _subtract_at(corrected, payload.meta["indices"], payload.tensors[0])

    def wire_nbytes(self, numel, dtype=torch.float32):
        return _count(self.ratio, numel) * dtype.itemsize


@register
class Threshold(_SparseGather):
    """Threshold sparsification with a sampled threshold, as in Deep Gradient Compression (Lin
    et al., ICLR 2018): from a random sample of ``s = ceil(sample_ratio * n)`` magnitudes (at
    least 1, at most n; drawn with replacement from this rank's own generator, the whole tensor
    when s == n), take the ``ceil(ratio * s)``-th largest as the threshold and keep every element
    whose magnitude is >= it, without sorting the whole tensor.

    The payload has a fixed capacity of ``k = ceil(ratio * n)`` slots, so that every rank sends
    the same size and one all-gather suffices: if fewer elements pass, the rest of the slots
    carry zero values (at index 0, harmless to the additive decode); if more pass, the first k
    in index order travel and the others are left to error feedback.

    Wire: k values in the gradient's dtype + k int32 indices (int64 for n >= 2**31).
    Non-finite input: NaN and +-Inf take the first slots, so they always arrive at their own
    positions (k of them if there are more than k).
    CUDA tensors: the threshold from torch as below, the compaction by
    `gradcomp.kernels.threshold_select` (the same wire tensors bit for bit, no host sync).
    CPU tensors: one compaction of the passing positions, non-finite ones moved to the front
    (the same wire tensors bit for bit, with host syncs).
    """

    name = "threshold"

    def __init__(self, ratio: float = 0.01, sample_ratio: float = 0.01, seed: int = 0):
        self.ratio = check_ratio(ratio)
        self.sample_ratio = check_ratio(sample_ratio, "sample_ratio")
        self.seed = check_int(seed, "seed", 0)

    def options(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "sample_ratio": self.sample_ratio, "seed": self.seed}

    def estimate_threshold(self, flat: torch.Tensor):
        """The magnitude threshold for the non-empty 1-D tensor `flat`, as a 0-d tensor (draws
        from the generator exactly as `compress` does)."""
        n = flat.numel()
        s = _count(self.sample_ratio, n)
        if s < n:
            g = self._generator(flat.device)
            pick = torch.randint(0, n, (s,), generator=g, device=flat.device)
            sample = magnitudes(flat[pick])
        else:
            sample = magnitudes(flat)
        m = _count(self.ratio, s)
        # The m-th largest (= kthvalue(s - m + 1), ~30x slower on a GPU than topk). Not the
        # top-k kernel: on the H100 it saved 28 us of GPU time but added 240 us of launches.
        return torch.topk(sample, m, sorted=False).values.min()

    def _compress(self, flat, key):
        n = flat.numel()
        if n == 0:
            return [flat.clone(), torch.empty(0, dtype=torch.int32, device=flat.device)], {}
        k = _count(self.ratio, n)
        select = (kernels.threshold_select if kernels.supports_selection(flat)
                  else reference.threshold_select)
        return list(select(flat, self.estimate_threshold(flat), k)), {}

    def wire_nbytes(self, numel, dtype=torch.float32):
        return _count(self.ratio, numel) * (dtype.itemsize + index_dtype(numel).itemsize)
