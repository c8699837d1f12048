"""`@triton.jit` helpers shared by the quantizer, sign, statistics and packing kernels (see
`gradcomp.kernels.jit` for the conventions): tiles of 8-element groups, MSB-first bit
packing, output rounding, and error feedback's corrected input and new residual."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def tile(pid, n, BS: tl.constexpr, ROWS: tl.constexpr, G: tl.constexpr):
    """Indices of a (ROWS, G, 8) tile whose rows start every BS elements (BS <= 8 * G, BS a
    multiple of 8). Returns (row ids, element index, mask, stream group index, group valid)."""
    r = pid * ROWS + tl.arange(0, ROWS)
    g = tl.arange(0, G)
    j = tl.arange(0, 8)
    col = g[None, :, None] * 8 + j[None, None, :]
    e = r[:, None, None] * BS + col
    mask = (col < BS) & (e < n)
    grp = r[:, None] * (BS // 8) + g[None, :]
    gvalid = (g[None, :] * 8 < BS) & (grp * 8 < n)
    return r, e, mask, grp, gvalid


@triton.jit
def store_packed(out_ptr, codes, grp, gvalid, nbytes, BITS: tl.constexpr, BP2: tl.constexpr):
    """Pack the (R, G, 8) int32 codes (each < 2**BITS, 0 beyond the tensor) MSB first into
    BITS bytes per group of 8 and store group `grp` at byte grp * BITS."""
    j = tl.arange(0, 8)
    if BITS <= 4:
        sh = ((7 - j) * BITS).to(tl.uint32)
        v = tl.sum(codes.to(tl.uint32) << sh[None, None, :], axis=2)
    else:
        sh = ((7 - j) * BITS).to(tl.uint64)
        v = tl.sum(codes.to(tl.uint64) << sh[None, None, :], axis=2)
    k = tl.arange(0, BP2)
    bsh = tl.where(k < BITS, (BITS - 1 - k) * 8, 0).to(v.dtype)
    byts = (v[:, :, None] >> bsh[None, None, :]) & 0xFF
    off = grp[:, :, None] * BITS + k[None, None, :]
    m = gvalid[:, :, None] & (k < BITS)[None, None, :] & (off < nbytes)
    tl.store(out_ptr + off, byts.to(tl.uint8), mask=m)


@triton.jit
def load_codes(packed_ptr, e, mask, nbytes, BITS: tl.constexpr):
    """The BITS-bit codes of elements `e` from an MSB-first bit stream (int32)."""
    if BITS == 8:
        c = tl.load(packed_ptr + e, mask=mask, other=0).to(tl.int32)
    else:
        bit = e * BITS
        byte = bit >> 3
        sh = bit & 7
        b0 = tl.load(packed_ptr + byte, mask=mask, other=0).to(tl.int32)
        if 8 % BITS == 0:
            c = (b0 >> (8 - BITS - sh)) & ((1 << BITS) - 1)
        else:
            b1 = tl.load(packed_ptr + byte + 1, mask=mask & (byte + 1 < nbytes),
                         other=0).to(tl.int32)
            c = (((b0 << 8) | b1) >> (16 - BITS - sh)) & ((1 << BITS) - 1)
    return c


@triton.jit
def to_out(v, out_ptr, MANUAL_BF16: tl.constexpr):
    """float32 -> the output dtype, rounding to nearest even. MANUAL_BF16 does the bfloat16
    rounding with integer ops: Triton's interpreter rounds float32 -> bfloat16 ties away."""
    if MANUAL_BF16:
        b = v.to(tl.uint32, bitcast=True)
        r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        r = tl.where(v != v, 0x7FC0, r)
        res = r.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        res = v.to(out_ptr.dtype.element_ty)
    return res


@triton.jit
def load_corrected(x_ptr, res_ptr, e, mask, RES: tl.constexpr, MANUAL_BF16: tl.constexpr):
    """(corrected, x) as float32 at `e`: with RES, corrected = x + residual and x = corrected
    rounded to x's dtype (what the compressor is given); else both are x."""
    x = tl.load(x_ptr + e, mask=mask, other=0.0).to(tl.float32)
    if RES:
        c = x + tl.load(res_ptr + e, mask=mask, other=0.0)
        x = to_out(c, x_ptr, MANUAL_BF16).to(tl.float32)
    else:
        c = x
    return c, x


@triton.jit
def store_residual(newres_ptr, x_ptr, c, dec, e, mask, MANUAL_BF16: tl.constexpr):
    """newres[e] = c - (dec rounded to x's dtype), non-finite results set to 0."""
    r = c - to_out(dec, x_ptr, MANUAL_BF16).to(tl.float32)
    tl.store(newres_ptr + e, tl.where(tl.abs(r) < float("inf"), r, 0.0), mask=mask)


@triton.jit
def row_sum(a):
    return tl.sum(tl.sum(a, axis=2), axis=1)
