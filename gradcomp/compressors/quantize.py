"""Quantizers: `qsgd`, `int8`, `int4`, `terngrad`, `natural`. All are gathered ("allgather") and
averaged after decoding (the default `aggregate`).

Common conventions: work is done in float32 (float64 for float64 tensors); scales, norms, minima
and maxima travel as float32; sub-byte codes are bit-packed with `bitpack.pack`. Block-wise
methods cut the flat tensor into consecutive blocks of `block_size` values (the last one may be
shorter); one block's scale never depends on another block's values. Stochastic rounding draws
only from the compressor's own generator and is unbiased: E[decompress(compress(x))] == x
(up to float32 rounding of the scales on the wire). The encode and decode math is
`gradcomp.kernels.quantize`: its torch `reference` (CPU tensors, float64) beside the Triton
kernels (CUDA tensors), which the compressors below choose between.
"""
from __future__ import annotations

from typing import ClassVar

import torch

from .. import kernels
from ..checks import check_bool, check_choice, check_int
from ..kernels.packing import reference as bitpack
from ..kernels.quantize import reference
from .base import Compressor, Payload
from .memory import FusedErrorFeedback
from .registry import register


# -- helpers -------------------------------------------------------------------------------
def _kernel_seed(c: Compressor, flat: torch.Tensor):
    """A seed for the Triton kernels' Philox draws, taken from the compressor's generator (so
    they follow its seed, rank and state as the torch path's draws do), kept on the device;
    0 (no draw) for a compressor that rounds to nearest."""
    if not getattr(c, "stochastic", True):
        return 0
    return torch.randint(0, 2**62, (1,), generator=c._generator(flat.device), device=flat.device,
                         dtype=torch.int64)


# -- QSGD ----------------------------------------------------------------------------------
@register
class QSGD(FusedErrorFeedback, Compressor):
    """QSGD (Alistarh et al., "QSGD: Communication-Efficient SGD via Gradient Quantization and
    Encoding", NeurIPS 2017), per block of `block_size` values.

    Each value becomes ``sign(x) * l / levels * norm`` with ``norm`` the block's L2 norm and
    ``l`` in [0, levels] the stochastic (unbiased) or nearest rounding of ``|x| / norm * levels``.
    Wire: codes of ``1 + ceil(log2(levels + 1))`` bits (sign bit, set for negative values, then
    the level), bit-packed, and one float32 norm per block.
    The norm is computed as ``max|x| * ||x / max|x|||``, so it neither overflows nor underflows
    for finite float32 input. A zero block stays zero. A NaN or Inf in a block makes its norm
    NaN/Inf and the whole block decodes NaN/Inf; other blocks are untouched.
    """

    name = "qsgd"
    aggregation = "allgather"

    def __init__(self, levels: int = 15, stochastic: bool = True, block_size: int = 512,
                 seed: int = 0):
        self.levels = check_int(levels, "levels", 1, 127)
        self.stochastic = check_bool(stochastic, "stochastic")
        self.block_size = check_int(block_size, "block_size", 1)
        self.seed = check_int(seed, "seed", 0)
        self.bits = reference.qsgd_bits(self.levels)

    def options(self):
        return {"levels": self.levels, "stochastic": self.stochastic,
                "block_size": self.block_size, "seed": self.seed}

    def wire_nbytes(self, numel, dtype=torch.float32):
        return (bitpack.packed_nbytes(numel, self.bits)
                + 4 * reference.nblocks(numel, self.block_size))

    def _compress_ef(self, flat, residual):
        return kernels.qsgd_encode_ef(flat, residual, self.levels, self.block_size,
                                      self.stochastic, _kernel_seed(self, flat))

    def _compress(self, flat, key):
        if kernels.supports(flat):  # CUDA: the fused Triton kernel
            return list(kernels.qsgd_encode(flat, self.levels, self.block_size, self.stochastic,
                                            _kernel_seed(self, flat))), {}
        gen = self._generator(flat.device) if self.stochastic else None
        return list(reference.qsgd_encode(flat, self.levels, self.block_size, self.stochastic,
                                          gen)), {}

    def _decompress(self, payload: Payload):
        n = payload.numel
        packed, norm = payload.tensors
        decode = (kernels.qsgd_decode if kernels.supports_decode(packed, payload.dtype, n)
                  else reference.qsgd_decode)
        return decode(packed, norm, n, self.levels, self.block_size, payload.dtype)

    def aggregate_rows(self, rows, offsets, mine, out):
        if not _rows_fusable(rows, mine, out):
            return None
        return kernels.qsgd_decode_mean(rows, offsets, mine.numel, self.levels, self.block_size,
                                        out)


def _rows_fusable(rows, mine, out) -> bool:
    """Whether `aggregate_rows` takes the one-launch kernel: float32 payloads that the kernels
    decode (CUDA), averaged into a contiguous float32 `out`."""
    return (mine.dtype == torch.float32 and out.dtype == torch.float32 and out.is_contiguous()
            and kernels.supports_decode(rows, mine.dtype, mine.numel))


# -- int8 / int4 ---------------------------------------------------------------------------
class _BlockInt(FusedErrorFeedback, Compressor):
    """Block-wise uniform quantization to `bits`-bit integers.

    scheme "absmax": symmetric, scale = max|x| / qmax (qmax = 2**(bits-1) - 1), codes
    q in [-qmax, qmax] sent offset-binary (q + qmax) as unsigned `bits`-bit codes; decodes
    ``q * scale``. Wire: codes + one float32 scale per block.
    scheme "minmax": step = (max - min) / (2**bits - 1), codes q in [0, 2**bits - 1]; decodes
    ``min + q * step``. Wire: codes + float32 minima of all blocks followed by their maxima.
    Rounding is to nearest (error <= step / 2) or, with stochastic=True, unbiased stochastic.
    A zero (or constant) block decodes exactly. A NaN or Inf in a block makes its scale
    (or min/max) non-finite and the whole block decodes NaN/Inf; other blocks are untouched.
    Values beyond float32's range (float64 input) or a block range above float32's largest value
    overflow to Inf.
    """

    aggregation = "allgather"
    bits: ClassVar[int] = 8

    def __init__(self, block_size: int = 256, scheme: str = "absmax", stochastic: bool = False,
                 seed: int = 0):
        self.block_size = check_int(block_size, "block_size", 1)
        self.scheme = check_choice(scheme, "scheme", ("absmax", "minmax"))
        self.stochastic = check_bool(stochastic, "stochastic")
        self.seed = check_int(seed, "seed", 0)

    def options(self):
        return {"block_size": self.block_size, "scheme": self.scheme,
                "stochastic": self.stochastic, "seed": self.seed}

    def wire_nbytes(self, numel, dtype=torch.float32):
        per_block = 8 if self.scheme == "minmax" else 4
        return (bitpack.packed_nbytes(numel, self.bits)
                + per_block * reference.nblocks(numel, self.block_size))

    def _compress_ef(self, flat, residual):
        return kernels.int_encode_ef(flat, residual, self.bits, self.block_size, self.scheme,
                                     self.stochastic, _kernel_seed(self, flat))

    def _compress(self, flat, key):
        if kernels.supports(flat):  # CUDA: the fused Triton kernel
            return list(kernels.int_encode(flat, self.bits, self.block_size, self.scheme,
                                           self.stochastic, _kernel_seed(self, flat))), {}
        gen = self._generator(flat.device) if self.stochastic else None
        return list(reference.int_encode(flat, self.bits, self.block_size, self.scheme,
                                         self.stochastic, gen)), {}

    def _decompress(self, payload: Payload):
        n = payload.numel
        packed, scales = payload.tensors
        decode = (kernels.int_decode if kernels.supports_decode(packed, payload.dtype, n)
                  else reference.int_decode)
        return decode(packed, scales, n, self.bits, self.block_size, self.scheme, payload.dtype)

    def aggregate_rows(self, rows, offsets, mine, out):
        if not _rows_fusable(rows, mine, out):
            return None
        return kernels.int_decode_mean(rows, offsets, mine.numel, self.bits, self.block_size,
                                       self.scheme, out)


@register
class Int8(_BlockInt):
    """8-bit block-wise quantization (absmax: codes -127..127; minmax: 0..255), one byte per
    value. See `_BlockInt` for the schemes, wire format and non-finite behaviour."""

    name = "int8"
    bits = 8


@register
class Int4(_BlockInt):
    """4-bit block-wise quantization (absmax: codes -7..7; minmax: 0..15), two values per byte.
    See `_BlockInt` for the schemes, wire format and non-finite behaviour."""

    name = "int4"
    bits = 4


# -- TernGrad ------------------------------------------------------------------------------
@register
class TernGrad(FusedErrorFeedback, Compressor):
    """TernGrad (Wen et al., "TernGrad: Ternary Gradients to Reduce Communication in Distributed
    Deep Learning", NeurIPS 2017), without the paper's optional gradient clipping.

    Each value becomes ``s * sign(x) * b`` with ``s = max|x|`` of its block (of the whole tensor
    when block_size=0) and ``b ~ Bernoulli(|x| / s)``: unbiased. Wire: 2-bit codes
    (0: -1, 1: 0, 2: +1), bit-packed, and one float32 scale per block. A zero block stays zero.
    A NaN or Inf in a block makes its scale NaN/Inf and the whole block (the whole tensor with
    block_size=0) decodes NaN/Inf.
    """

    name = "terngrad"
    aggregation = "allgather"
    bits = 2

    def __init__(self, block_size: int = 0, seed: int = 0):
        self.block_size = check_int(block_size, "block_size", 0)
        self.seed = check_int(seed, "seed", 0)

    def options(self):
        return {"block_size": self.block_size, "seed": self.seed}

    def wire_nbytes(self, numel, dtype=torch.float32):
        return (bitpack.packed_nbytes(numel, self.bits)
                + 4 * reference.nblocks(numel, reference.terngrad_block(numel, self.block_size)))

    def _compress_ef(self, flat, residual):
        return kernels.terngrad_encode_ef(flat, residual, self.block_size,
                                          _kernel_seed(self, flat))

    def _compress(self, flat, key):
        if kernels.supports(flat):  # CUDA: the Triton kernels
            seed = _kernel_seed(self, flat)
            return list(kernels.terngrad_encode(flat, self.block_size, seed)), {}
        gen = self._generator(flat.device)
        return list(reference.terngrad_encode(flat, self.block_size, gen)), {}

    def _decompress(self, payload: Payload):
        n = payload.numel
        packed, s = payload.tensors
        decode = (kernels.terngrad_decode if kernels.supports_decode(packed, payload.dtype, n)
                  else reference.terngrad_decode)
        return decode(packed, s, n, self.block_size, payload.dtype)

    def aggregate_rows(self, rows, offsets, mine, out):
        if not _rows_fusable(rows, mine, out):
            return None
        return kernels.terngrad_decode_mean(rows, offsets, mine.numel, self.block_size, out)


# -- natural compression -------------------------------------------------------------------
@register
class Natural(FusedErrorFeedback, Compressor):
    """Natural compression (Horvath et al., "Natural Compression for Distributed Deep
    Learning", 2019): each value is rounded stochastically to one of its two neighbouring powers
    of two, unbiased: for 2**e <= |x| < 2**(e+1), up with probability (|x| - 2**e) / 2**e.

    Wire (9 bits per value): the sign bits, bit-packed, and one uint8 per value holding the
    float32 biased exponent E of the result (value = +-2**(E - 127)).
    Codes: E = 0 with sign 0 is zero (so -0.0 decodes as +0.0); E = 0 with sign 1 is NaN;
    E = 255 is Inf with its sign. So zero stays zero, NaN stays NaN and +-Inf stays +-Inf, at
    the same positions.
    Below float32's normal range (|x| < 2**-126: float32/bfloat16 subnormals, tiny float64
    values) the value rounds stochastically between 0 and 2**-126, P(up) = |x| / 2**-126,
    which keeps it unbiased.
    Capping: finite stays finite. Values in the largest binade of the dtype (float32,
    bfloat16, float64: [2**127, 2**128); float16: [2**15, 65504]) always round down to 2**127
    (2**15), since the next power of two is not finite: the only biased case (relative error
    < 1/2). float64 values >= 2**128 cannot be expressed on the wire and become +-Inf, as a
    cast to float32 does.
    """

    name = "natural"
    aggregation = "allgather"

    def __init__(self, seed: int = 0):
        self.seed = check_int(seed, "seed", 0)

    def options(self):
        return {"seed": self.seed}

    def wire_nbytes(self, numel, dtype=torch.float32):
        return bitpack.packed_nbytes(numel, 1) + numel

    def _compress_ef(self, flat, residual):
        return kernels.natural_encode_ef(flat, residual, _kernel_seed(self, flat))

    def _compress(self, flat, key):
        if kernels.supports(flat):  # CUDA: the Triton kernel
            seed = _kernel_seed(self, flat)
            return list(kernels.natural_encode(flat, seed)), {}
        return list(reference.natural_encode(flat, self._generator(flat.device))), {}

    def _decompress(self, payload: Payload):
        n = payload.numel
        packed, exp = payload.tensors
        decode = (kernels.natural_decode if kernels.supports_decode(packed, payload.dtype, n)
                  else reference.natural_decode)
        return decode(packed, exp, n, payload.dtype)
