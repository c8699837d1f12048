"""The quantizers' torch reference: encode and decode of int8/int4 (absmax, minmax), QSGD,
TernGrad and natural compression, as the compressors run them on CPU tensors and float64 and as
the Triton kernels (`launcher`) must reproduce them (see `gradcomp.compressors.quantize` for
the methods, their wire formats and their non-finite behaviour).

Work is done in float32 (float64 for float64 tensors); scales, norms, minima and maxima are
float32; sub-byte codes are bit-packed MSB first (`gradcomp.kernels.packing.reference`).
Block-wise methods cut the flat tensor into consecutive blocks of `block_size` values (the last
one may be shorter); one block's scale never depends on another block's values. Stochastic
rounding draws only from the generator `gen` it is given. Decoders return the work dtype.
"""
from __future__ import annotations

import torch

from ..blocks import work_dtype
from ..packing import reference as bitpack

_F32 = torch.float32
_U8 = torch.uint8


# -- helpers -------------------------------------------------------------------------------
def nblocks(numel: int, block_size: int) -> int:
    """Number of blocks of `block_size` values (the last one may be shorter)."""
    return -(-numel // block_size)


def _blocks(flat: torch.Tensor, block_size: int, edge: bool = False) -> torch.Tensor:
    """`flat` as a (blocks, block_size) matrix, the last block padded with zeros (with copies of
    the last value if `edge`, which keeps a partial block's min and max its own)."""
    nb = nblocks(flat.numel(), block_size)
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


def _pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    return codes if bits == 8 else bitpack.pack(codes, bits)


def _unpack(packed: torch.Tensor, count: int, bits: int) -> torch.Tensor:
    return packed[:count] if bits == 8 else bitpack.unpack(packed, count, bits)


# -- QSGD ----------------------------------------------------------------------------------
def qsgd_bits(levels: int) -> int:
    """Bits of a QSGD code: the sign bit, then the level: 1 + ceil(log2(levels + 1))."""
    return 1 + levels.bit_length()


def qsgd_encode(flat: torch.Tensor, levels: int, block_size: int, stochastic: bool,
                gen: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed codes, float32 norm per block) of `flat`."""
    n, work, bits = flat.numel(), work_dtype(flat.dtype), qsgd_bits(levels)
    x = _blocks(flat.to(work), block_size)
    mag = x.abs()
    amax = mag.amax(dim=1)  # NaN / Inf propagate
    unit = torch.where((amax > 0) & torch.isfinite(amax), amax, torch.ones_like(amax))
    norm = torch.linalg.vector_norm(x / unit[:, None], dim=1) * unit
    norm32 = norm.to(_F32)
    r = mag.div_(_divisor(norm32.to(work))[:, None]).mul_(levels)
    r = r.nan_to_num_(nan=0.0).clamp_(0, levels)
    level = _round_(r, stochastic, gen)
    negative = torch.lt(x, 0).logical_and_(level > 0)
    codes = level.to(_U8).bitwise_or_(negative.view(_U8) << (bits - 1))
    return _pack(_unblock(codes, n), bits), norm32


def qsgd_decode(packed: torch.Tensor, norm: torch.Tensor, n: int, levels: int, block_size: int,
                dtype: torch.dtype) -> torch.Tensor:
    work, bits = work_dtype(dtype), qsgd_bits(levels)
    codes = _blocks(_unpack(packed, n, bits), block_size)
    level = (codes & ((1 << (bits - 1)) - 1)).to(work)
    mag = level.mul_((norm.to(work) / levels)[:, None])
    out = torch.where((codes >> (bits - 1)).view(torch.bool), -mag, mag)
    return _unblock(out, n)


# -- int8 / int4 ---------------------------------------------------------------------------
def _step(lo32: torch.Tensor, hi32: torch.Tensor, top: int, work: torch.dtype) -> torch.Tensor:
    # (hi - lo) / top without overflowing for ranges up to 2 * float32 max.
    lo, hi = lo32.to(work), hi32.to(work)
    return (0.5 * hi - 0.5 * lo) / (0.5 * top)


def int_encode(flat: torch.Tensor, bits: int, block_size: int, scheme: str, stochastic: bool,
               gen: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed codes, scales) of `flat`: one float32 scale per block (absmax), or the float32
    minima of all blocks followed by their maxima (minmax)."""
    n, work = flat.numel(), work_dtype(flat.dtype)
    qmax, top = (1 << (bits - 1)) - 1, (1 << bits) - 1
    x = _blocks(flat.to(work), block_size, edge=scheme == "minmax")
    if scheme == "absmax":
        scale32 = (_absmax(x) / qmax).to(_F32)
        r = x / _divisor(scale32.to(work))[:, None]
        r = r.nan_to_num_(nan=0.0).clamp_(-qmax, qmax)
        codes = _round_(r, stochastic, gen).add_(qmax).to(_U8)
        scales = scale32
    else:
        lo, hi = torch.aminmax(x, dim=1)
        lo32, hi32 = lo.to(_F32), hi.to(_F32)
        step = _step(lo32, hi32, top, work)
        r = torch.sub(x, lo32.to(work)[:, None]).div_(_divisor(step)[:, None])
        r = r.nan_to_num_(nan=0.0).clamp_(0, top)
        codes = _round_(r, stochastic, gen).to(_U8)
        scales = torch.cat([lo32, hi32])
    return _pack(_unblock(codes, n), bits), scales


def int_decode(packed: torch.Tensor, scales: torch.Tensor, n: int, bits: int, block_size: int,
               scheme: str, dtype: torch.dtype) -> torch.Tensor:
    work = work_dtype(dtype)
    q = _blocks(_unpack(packed, n, bits), block_size).to(work)
    if scheme == "absmax":
        out = q.sub_((1 << (bits - 1)) - 1).mul_(scales.to(work)[:, None])
    else:
        lo32, hi32 = scales.view(2, -1)
        out = q.mul_(_step(lo32, hi32, (1 << bits) - 1, work)[:, None]).add_(
            lo32.to(work)[:, None])
    return _unblock(out, n)


# -- TernGrad ------------------------------------------------------------------------------
def terngrad_block(numel: int, block_size: int) -> int:
    """TernGrad's block length: `block_size`, or the whole tensor for 0."""
    return block_size or max(numel, 1)


def terngrad_encode(flat: torch.Tensor, block_size: int,
                    gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed 2-bit codes (0: -1, 1: 0, 2: +1), float32 scale per block) of `flat`."""
    n, work = flat.numel(), work_dtype(flat.dtype)
    x = _blocks(flat.to(work), terngrad_block(n, block_size))
    mag = x.abs()
    s32 = mag.amax(dim=1).to(_F32)
    p = mag.div_(_divisor(s32.to(work))[:, None])
    p = p.nan_to_num_(nan=0.0).clamp_(0, 1)
    u = torch.rand(x.shape, generator=gen, device=x.device, dtype=work)
    keep = torch.lt(u, p).view(_U8)
    negative = torch.lt(x, 0).view(_U8).bitwise_and_(keep)
    codes = (keep + 1).sub_(negative << 1)  # -1 -> 0, 0 -> 1, +1 -> 2
    return bitpack.pack(_unblock(codes, n), 2), s32


def terngrad_decode(packed: torch.Tensor, s: torch.Tensor, n: int, block_size: int,
                    dtype: torch.dtype) -> torch.Tensor:
    work = work_dtype(dtype)
    t = _blocks(bitpack.unpack(packed, n, 2), terngrad_block(n, block_size)).to(work).sub_(1)
    return _unblock(t.mul_(s.to(work)[:, None]), n)


# -- natural compression -------------------------------------------------------------------
def natural_encode(flat: torch.Tensor,
                   gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed sign bits, uint8 float32 biased exponent per value) of `flat`."""
    work = work_dtype(flat.dtype)
    x = flat.to(work)
    mag = x.abs()
    mant, ex = torch.frexp(mag)  # mag = mant * 2**ex, mant in [0.5, 1)
    small = mag < 2.0 ** -126
    over = torch.isinf(mag).logical_or_(ex >= 255 - 126)  # Inf, or 2**e beyond float32
    p_up = torch.where(small, mag * 2.0 ** 126, mant.mul_(2).sub_(1))
    exp = ex.add_(126).masked_fill_(small, 0)  # biased exponent of 2**e
    u = torch.rand(x.shape, generator=gen, device=x.device, dtype=work)
    cap = 127 + 15 if flat.dtype == torch.float16 else 254
    exp = exp.add_(torch.lt(u, p_up)).clamp_(max=cap).masked_fill_(over, 255)
    nan = torch.isnan(x)
    exp = exp.masked_fill_(nan, 0)
    sign = torch.signbit(x).logical_and_(exp > 0).logical_or_(nan)
    return bitpack.pack(sign.view(_U8), 1), exp.to(_U8)


def natural_decode(packed: torch.Tensor, exp: torch.Tensor, n: int,
                   dtype: torch.dtype) -> torch.Tensor:
    work = work_dtype(dtype)
    sign = bitpack.unpack(packed, n, 1).view(torch.bool)
    mag = (exp.to(torch.int32) << 23).view(_F32)  # exactly 2**(E - 127), 0, or Inf
    out = torch.where(sign, -mag, mag)
    out = out.masked_fill_(sign.logical_and(exp == 0), float("nan"))
    return out.to(work)
