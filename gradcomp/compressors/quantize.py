"""Quantizers: `qsgd`, `int8`, `int4`, `terngrad`, `natural`. All are gathered ("allgather") and
averaged after decoding (the default `aggregate`).

Common conventions: work is done in float32 (float64 for float64 tensors); scales, norms, minima
and maxima travel as float32; sub-byte codes are bit-packed with `bitpack.pack`. Block-wise
methods cut the flat tensor into consecutive blocks of `block_size` values (the last one may be
shorter); one block's scale never depends on another block's values. Stochastic rounding draws
only from the compressor's own generator and is unbiased: E[decompress(compress(x))] == x
(up to float32 rounding of the scales on the wire).
"""
from __future__ import annotations

from typing import ClassVar

import torch

from .. import kernels
from ..kernels.packing import reference as bitpack
from ..checks import check_bool, check_choice, check_int
from .base import Compressor, Payload, work_dtype
from .memory import FusedErrorFeedback
from .registry import register

_F32 = torch.float32
_U8 = torch.uint8


# -- helpers -------------------------------------------------------------------------------
def _nblocks(numel: int, block_size: int) -> int:
    return -(-numel // block_size)


def _blocks(flat: torch.Tensor, block_size: int, edge: bool = False) -> torch.Tensor:
    """`flat` as a (blocks, block_size) matrix, the last block padded with zeros (with copies of
    the last value if `edge`, which keeps a partial block's min and max its own)."""
    nb = _nblocks(flat.numel(), block_size)
    pad = nb * block_size - flat.numel()
    if pad:
        filler = flat[-1:].expand(pad) if edge else flat.new_zeros(pad)
        flat = torch.cat([flat, filler])
    return flat.view(nb, block_size)


def _unblock(mat: torch.Tensor, numel: int) -> torch.Tensor:
    return mat.reshape(-1)[:numel]


def _divisor(d: torch.Tensor) -> torch.Tensor:
    """`d` where it is > 0, else 1 (zero and NaN blocks divide safely; their decode is set by the
    scale itself)."""
    return torch.where(d > 0, d, torch.ones_like(d))


def _round_(r: torch.Tensor, stochastic: bool, gen: torch.Generator | None) -> torch.Tensor:
    """Round to nearest, or stochastically: up with probability frac(r), so E[result] == r.
    Overwrites `r` (the callers' own scratch: one allocation less per pass on a CPU)."""
    if not stochastic:
        return r.round_()
    lo = torch.floor(r)
    u = torch.rand(r.shape, generator=gen, device=r.device, dtype=r.dtype)
    return lo.add_(u.lt_(r.sub_(lo)))  # lo + (u < r - lo), the comparison as 0.0 / 1.0


def _absmax(x: torch.Tensor) -> torch.Tensor:
    """max |x| of each row, from its min and max (exactly amax(|x|), NaN propagating, without
    an |x| temporary)."""
    lo, hi = torch.aminmax(x, dim=1)
    return torch.maximum(lo.abs_(), hi.abs_())


def _kernel_seed(c: Compressor, flat: torch.Tensor):
    """A seed for the Triton kernels' Philox draws, taken from the compressor's generator (so
    they follow its seed, rank and state as the torch path's draws do), kept on the device;
    0 (no draw) for a compressor that rounds to nearest."""
    if not getattr(c, "stochastic", True):
        return 0
    return torch.randint(0, 2**62, (1,), generator=c._generator(flat.device), device=flat.device,
                         dtype=torch.int64)


def _pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    return codes if bits == 8 else bitpack.pack(codes, bits)


def _unpack(packed: torch.Tensor, count: int, bits: int) -> torch.Tensor:
    return packed[:count] if bits == 8 else bitpack.unpack(packed, count, bits)


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
        self.bits = 1 + self.levels.bit_length()  # == 1 + ceil(log2(levels + 1))

    def options(self):
        return {"levels": self.levels, "stochastic": self.stochastic,
                "block_size": self.block_size, "seed": self.seed}

    def wire_nbytes(self, numel, dtype=torch.float32):
        return bitpack.packed_nbytes(numel, self.bits) + 4 * _nblocks(numel, self.block_size)

    def _compress_ef(self, flat, residual):
        return kernels.qsgd_encode_ef(flat, residual, self.levels, self.block_size,
                                      self.stochastic, _kernel_seed(self, flat))

    def _compress(self, flat, key):
        if kernels.supports(flat):  # CUDA: the fused Triton kernel
            return list(kernels.qsgd_encode(flat, self.levels, self.block_size, self.stochastic,
                                            _kernel_seed(self, flat))), {}
        n, work = flat.numel(), work_dtype(flat.dtype)
        x = _blocks(flat.to(work), self.block_size)
        mag = x.abs()
        amax = mag.amax(dim=1)  # NaN / Inf propagate
        unit = torch.where((amax > 0) & torch.isfinite(amax), amax, torch.ones_like(amax))
        norm = torch.linalg.vector_norm(x / unit[:, None], dim=1) * unit
        norm32 = norm.to(_F32)
        r = mag.div_(_divisor(norm32.to(work))[:, None]).mul_(self.levels)
        r = r.nan_to_num_(nan=0.0).clamp_(0, self.levels)
        gen = self._generator(flat.device) if self.stochastic else None
        level = _round_(r, self.stochastic, gen)
        negative = torch.lt(x, 0).logical_and_(level > 0)
        codes = level.to(_U8).bitwise_or_(negative.view(_U8) << (self.bits - 1))
        return [_pack(_unblock(codes, n), self.bits), norm32], {}

    def _decompress(self, payload: Payload):
        n, work = payload.numel, work_dtype(payload.dtype)
        packed, norm = payload.tensors
        if kernels.supports_decode(packed, payload.dtype, n):
            return kernels.qsgd_decode(packed, norm, n, self.levels, self.block_size,
                                       payload.dtype)
        codes = _blocks(_unpack(packed, n, self.bits), self.block_size)
        level = (codes & ((1 << (self.bits - 1)) - 1)).to(work)
        mag = level.mul_((norm.to(work) / self.levels)[:, None])
        out = torch.where((codes >> (self.bits - 1)).view(torch.bool), -mag, mag)
        return _unblock(out, n)

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

    @property
    def qmax(self) -> int:
        return (1 << (self.bits - 1)) - 1

    @property
    def top(self) -> int:
        return (1 << self.bits) - 1

    def options(self):
        return {"block_size": self.block_size, "scheme": self.scheme,
                "stochastic": self.stochastic, "seed": self.seed}

    def wire_nbytes(self, numel, dtype=torch.float32):
        per_block = 8 if self.scheme == "minmax" else 4
        return (bitpack.packed_nbytes(numel, self.bits)
                + per_block * _nblocks(numel, self.block_size))

    def _step(self, lo32: torch.Tensor, hi32: torch.Tensor, work: torch.dtype) -> torch.Tensor:
        # (hi - lo) / top without overflowing for ranges up to 2 * float32 max.
        lo, hi = lo32.to(work), hi32.to(work)
        return (0.5 * hi - 0.5 * lo) / (0.5 * self.top)

    def _compress_ef(self, flat, residual):
        return kernels.int_encode_ef(flat, residual, self.bits, self.block_size, self.scheme,
                                     self.stochastic, _kernel_seed(self, flat))

    def _compress(self, flat, key):
        if kernels.supports(flat):  # CUDA: the fused Triton kernel
            return list(kernels.int_encode(flat, self.bits, self.block_size, self.scheme,
                                           self.stochastic, _kernel_seed(self, flat))), {}
        n, work = flat.numel(), work_dtype(flat.dtype)
        x = _blocks(flat.to(work), self.block_size, edge=self.scheme == "minmax")
        gen = self._generator(flat.device) if self.stochastic else None
        if self.scheme == "absmax":
            scale32 = (_absmax(x) / self.qmax).to(_F32)
            r = x / _divisor(scale32.to(work))[:, None]
            r = r.nan_to_num_(nan=0.0).clamp_(-self.qmax, self.qmax)
            codes = _round_(r, self.stochastic, gen).add_(self.qmax).to(_U8)
            scales = scale32
        else:
            lo, hi = torch.aminmax(x, dim=1)
            lo32, hi32 = lo.to(_F32), hi.to(_F32)
            step = self._step(lo32, hi32, work)
            r = torch.sub(x, lo32.to(work)[:, None]).div_(_divisor(step)[:, None])
            r = r.nan_to_num_(nan=0.0).clamp_(0, self.top)
            codes = _round_(r, self.stochastic, gen).to(_U8)
            scales = torch.cat([lo32, hi32])
        return [_pack(_unblock(codes, n), self.bits), scales], {}

    def _decompress(self, payload: Payload):
        n, work = payload.numel, work_dtype(payload.dtype)
        packed, scales = payload.tensors
        if kernels.supports_decode(packed, payload.dtype, n):
            return kernels.int_decode(packed, scales, n, self.bits, self.block_size, self.scheme,
                                      payload.dtype)
        q = _blocks(_unpack(packed, n, self.bits), self.block_size).to(work)
        if self.scheme == "absmax":
            out = q.sub_(self.qmax).mul_(scales.to(work)[:, None])
        else:
            lo32, hi32 = scales.view(2, -1)
            out = q.mul_(self._step(lo32, hi32, work)[:, None]).add_(lo32.to(work)[:, None])
        return _unblock(out, n)

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

    def _bs(self, numel: int) -> int:
        return self.block_size or max(numel, 1)

    def wire_nbytes(self, numel, dtype=torch.float32):
        return bitpack.packed_nbytes(numel, self.bits) + 4 * _nblocks(numel, self._bs(numel))

    def _compress_ef(self, flat, residual):
        return kernels.terngrad_encode_ef(flat, residual, self.block_size,
                                          _kernel_seed(self, flat))

    def _compress(self, flat, key):
        if kernels.supports(flat):  # CUDA: the Triton kernels
            seed = _kernel_seed(self, flat)
            return list(kernels.terngrad_encode(flat, self.block_size, seed)), {}
        n, work = flat.numel(), work_dtype(flat.dtype)
        x = _blocks(flat.to(work), self._bs(n))
        mag = x.abs()
        s32 = mag.amax(dim=1).to(_F32)
        p = mag.div_(_divisor(s32.to(work))[:, None])
        p = p.nan_to_num_(nan=0.0).clamp_(0, 1)
        u = torch.rand(x.shape, generator=self._generator(flat.device), device=x.device,
                       dtype=work)
        keep = torch.lt(u, p).view(_U8)
        negative = torch.lt(x, 0).view(_U8).bitwise_and_(keep)
        codes = (keep + 1).sub_(negative << 1)  # -1 -> 0, 0 -> 1, +1 -> 2
        return [bitpack.pack(_unblock(codes, n), self.bits), s32], {}

    def _decompress(self, payload: Payload):
        n, work = payload.numel, work_dtype(payload.dtype)
        packed, s = payload.tensors
        if kernels.supports_decode(packed, payload.dtype, n):
            return kernels.terngrad_decode(packed, s, n, self.block_size, payload.dtype)
        t = _blocks(bitpack.unpack(packed, n, self.bits), self._bs(n)).to(work).sub_(1)
        return _unblock(t.mul_(s.to(work)[:, None]), n)

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
        work = work_dtype(flat.dtype)
        x = flat.to(work)
        mag = x.abs()
        mant, ex = torch.frexp(mag)  # mag = mant * 2**ex, mant in [0.5, 1)
        small = mag < 2.0 ** -126
        over = torch.isinf(mag).logical_or_(ex >= 255 - 126)  # Inf, or 2**e beyond float32
        p_up = torch.where(small, mag * 2.0 ** 126, mant.mul_(2).sub_(1))
        exp = ex.add_(126).masked_fill_(small, 0)  # biased exponent of 2**e
        u = torch.rand(x.shape, generator=self._generator(flat.device), device=x.device,
                       dtype=work)
        cap = 127 + 15 if flat.dtype == torch.float16 else 254
        exp = exp.add_(torch.lt(u, p_up)).clamp_(max=cap).masked_fill_(over, 255)
        nan = torch.isnan(x)
        exp = exp.masked_fill_(nan, 0)
        sign = torch.signbit(x).logical_and_(exp > 0).logical_or_(nan)
        return [bitpack.pack(sign.view(_U8), 1), exp.to(_U8)], {}

    def _decompress(self, payload: Payload):
        n, work = payload.numel, work_dtype(payload.dtype)
        packed, exp = payload.tensors
        if kernels.supports_decode(packed, payload.dtype, n):
            return kernels.natural_decode(packed, exp, n, payload.dtype)
        sign = bitpack.unpack(packed, n, 1).view(torch.bool)
        mag = (exp.to(torch.int32) << 23).view(_F32)  # exactly 2**(E - 127), 0, or Inf
        out = torch.where(sign, -mag, mag)
        out = out.masked_fill_(sign.logical_and(exp == 0), float("nan"))
        return out.to(work)
