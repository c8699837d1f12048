"""Sign-based (1 bit per value) compressors: `signsgd`, `efsignsgd`, `onebit`. All-gathered.

Common to all three: the bit of a value is ``x >= 0``, so 0 and -0.0 (which compares equal to
0) are sent as "non-negative" and NaN as "negative". Bits are packed 8 to a byte with
`bitpack.pack`; scales travel as float32. Values are computed in float32 for float16/bfloat16
input and in float64 for float64 input. The encode and decode math is `gradcomp.kernels.sign`:
its torch `reference` (CPU tensors, float64) beside the Triton kernels (CUDA tensors).
"""
from __future__ import annotations

import torch

from .. import kernels
from ..checks import check_int
from ..kernels.blocks import layout
from ..kernels.packing.reference import packed_nbytes, unpack
from ..kernels.sign import reference
from .base import Compressor, Payload, work_dtype
from .memory import FusedErrorFeedback
from .registry import register


@register
class SignSGD(FusedErrorFeedback, Compressor):
    """signSGD with majority vote (Bernstein et al., "signSGD: Compressed Optimisation for
    Non-Convex Problems", ICML 2018; "signSGD with Majority Vote is Communication Efficient and
    Fault Tolerant", ICLR 2019).

    Wire: the sign bits (1 = non-negative, so 0 and -0.0 are sent as +1) packed 8 per byte,
    plus one float32 flag that is 1.0 when the input is all finite and NaN otherwise.
    `decompress` gives +-1 times the flag. `aggregate` is the majority vote
    ``sign(sum of the workers' signs)`` (a tie gives 0) times the product of the flags.
    The result has unit magnitude: the learning rate carries the scale, as in the paper.
    Non-finite input: any NaN/Inf on a worker makes every decoded (and aggregated) value NaN.
    """

    name = "signsgd"
    aggregation = "allgather"

    def __init__(self):
        pass

    def _compress_ef(self, flat, residual):
        return kernels.sign_encode_ef(flat, residual, "signsgd")

    def _compress(self, flat, key):
        if kernels.supports(flat):  # CUDA: the Triton kernel
            return list(kernels.sign_encode(flat, "signsgd")), {}
        return list(reference.signsgd_encode(flat)), {}

    def _decompress(self, payload):
        if kernels.supports_decode(payload.tensors[0], payload.dtype, payload.numel):
            return kernels.sign_decode(*payload.tensors, payload.numel, "signsgd", 0,
                                       payload.dtype)
        return reference.signsgd_decode(*payload.tensors, payload.numel, payload.dtype)

    def aggregate(self, payloads: list[Payload]) -> torch.Tensor:
        first = payloads[0]
        work = work_dtype(first.dtype)
        ones = torch.zeros(first.numel, dtype=torch.int32, device=first.device)
        for p in payloads:
            ones += unpack(p.tensors[0], p.numel, 1)
        votes = torch.sign(2 * ones - len(payloads)).to(work)  # +1, 0 (tie) or -1
        flag = torch.cat([p.tensors[1] for p in payloads]).to(work).prod()
        return (votes * flag).to(first.dtype).reshape(first.shape)

    def wire_nbytes(self, numel, dtype=torch.float32):
        return packed_nbytes(numel, 1) + 4


class _Blocked(FusedErrorFeedback, Compressor):
    aggregation = "allgather"
    scales_per_block = 1

    def __init__(self, block_size: int = 0):
        self.block_size = check_int(block_size, "block_size", 0)

    def options(self):
        return {"block_size": self.block_size}

    def wire_nbytes(self, numel, dtype=torch.float32):
        nblocks, _ = layout(numel, self.block_size)
        return packed_nbytes(numel, 1) + 4 * self.scales_per_block * nblocks

    def _compress_ef(self, flat, residual):
        return kernels.sign_encode_ef(flat, residual, self.name, self.block_size)

    def _kernel_compress(self, flat):
        """The Triton kernels' payload tensors for a CUDA tensor, else None."""
        if kernels.supports(flat):
            return list(kernels.sign_encode(flat, self.name, self.block_size))
        return None

    def _kernel_decompress(self, payload):
        if kernels.supports_decode(payload.tensors[0], payload.dtype, payload.numel):
            return kernels.sign_decode(*payload.tensors, payload.numel, self.name,
                                       self.block_size, payload.dtype)
        return None


@register
class EFSignSGD(_Blocked):
    """Scaled sign of EF-SignSGD (Karimireddy et al., "Error Feedback Fixes SignSGD and other
    Gradient Compression Schemes", ICML 2019): ``sign(x) * ||x||_1 / n``.

    Error feedback is what makes it converge: use it with ``error_feedback=True``.
    Option `block_size`: 0 (default) = one scale for the whole tensor, > 0 = one scale per
    block of that many values (the last block may be shorter; its scale is over its own values).
    Wire: sign bits (1 = non-negative; 0 and -0.0 decode to +scale) packed 8 per byte, then
    one float32 scale (mean |x|) per block. An empty tensor with block_size 0 sends scale 0.
    Non-finite input: a NaN/Inf makes its block's scale NaN/Inf, so the whole block decodes
    non-finite.
    """

    name = "efsignsgd"

    def _compress(self, flat, key):
        if (wire := self._kernel_compress(flat)) is not None:  # CUDA: Triton kernels
            return wire, {}
        return list(reference.efsignsgd_encode(flat, self.block_size)), {}

    def _decompress(self, payload):
        if (out := self._kernel_decompress(payload)) is not None:
            return out
        return reference.efsignsgd_decode(*payload.tensors, payload.numel, self.block_size,
                                          payload.dtype)


@register
class OneBit(_Blocked):
    """1-bit SGD (Seide et al., "1-Bit Stochastic Gradient Descent and its Application to
    Data-Parallel Distributed Training of Speech DNNs", Interspeech 2014), without its
    built-in error feedback (add ``error_feedback=True``, as the paper does).

    Bit = ``x >= 0`` (0 and -0.0 count as non-negative); a 1 bit decodes to the mean of the
    block's non-negative values, a 0 bit to the mean of its negative values (an empty group's
    mean is 0). Option `block_size`: 0 (default) = one pair of means for the whole tensor,
    > 0 = one pair per block of that many values.
    Wire: packed sign bits, then float32 means interleaved (non-negative, negative) per block.
    Non-finite input: NaN falls in the negative group and makes that group's mean NaN; +Inf
    (-Inf) makes the non-negative (negative) mean +Inf (-Inf, or NaN beside a NaN), so the
    non-finite value's position and the rest of its group in its block decode non-finite.
    """

    name = "onebit"
    scales_per_block = 2

    def _compress(self, flat, key):
        if (wire := self._kernel_compress(flat)) is not None:  # CUDA: Triton kernels
            return wire, {}
        return list(reference.onebit_encode(flat, self.block_size)), {}

    def _decompress(self, payload):
        if (out := self._kernel_decompress(payload)) is not None:
            return out
        return reference.onebit_decode(*payload.tensors, payload.numel, self.block_size,
                                       payload.dtype)
