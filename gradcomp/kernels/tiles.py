"""`@triton.jit` helpers shared by the quantizer, sign, statistics and packing kernels: tiles of
8-element groups, MSB-first bit packing, output rounding, and error feedback's corrected input
and new residual. Imported only by the families' `jit` modules (so importing gradcomp never
needs Triton); set TRITON_INTERPRET=1 *before* they are first imported to run the kernels on
CPU tensors with Triton's interpreter (the tests do).

Conventions of the quantizer, sign, statistics and packing kernels
-------------------------------------------------------------------
* Every kernel works on a contiguous flat tensor of `n` elements with int32 index arithmetic
  (the wrappers fall back to torch for tensors whose bit count does not fit in int32).
* Encoders read a tile of shape (ROWS, G, 8): 8 consecutive elements form one *group*, whose
  `BITS`-bit codes make exactly `BITS` bytes of the MSB-first bit stream of `bitpack.pack`.
  A group is packed in registers (`store_packed`), so codes never go through memory unpacked.
  - "rows" kernels (`*_rows_kernel`): one tile row is one quantization block (block_size a
    multiple of 8, padded to the power of two 8 * G); the block's statistic (absmax, min/max,
    norm, mean |x|...) is reduced in registers and the codes written in the same pass: one read
    of the input, one write of codes and scales.
  - "elem" kernels (`*_elem_kernel`): a tile row is 8 * G consecutive elements; the block
    statistic of every element is gathered from a small array computed beforehand (by
    `partial_kernel` + a tiny torch reduction), so any block size works, including the whole
    tensor (BS == 0).
* Decoders (`*_decode_kernel`) are element-wise over a 1-D tile: each element gathers the one or
  two bytes holding its code and its block's statistic, and writes the output dtype directly.
* Arithmetic mirrors the torch reference operation by operation, in float32, with IEEE-rounded
  division (`div_rn`) and square root (`sqrt_rn`); launch with enable_fp_fusion=False so that no
  multiply-add is contracted into an FMA. Where the torch reference divides a tensor by a Python
  number, torch's CUDA kernels multiply by the float32 reciprocal instead; RECIP=True mirrors
  that (set for CUDA tensors), RECIP=False divides (CPU). So round-to-nearest results equal the
  torch reference on the same device bit for bit.
* Error feedback (trailing arguments, off by default): with RES the encoders and statistics
  passes read a float32 residual beside x and work on corrected = float32(x) + residual rounded
  to x's dtype, as `ErrorFeedback` hands `corrected.to(dtype)` to the compressor; with EF the
  encoders also write the new residual corrected - decoded (the decoder's value rounded to x's
  dtype, NaN/+-Inf set to 0) from registers. EF without RES is the first step (corrected = x).
"""
from __future__ import annotations

import triton
import triton.language as tl


def device(fn):
    """`@triton.jit` for a device function (one that kernels call). Under Triton's interpreter
    it is the function as the interpreter rewrites a jit function, called directly: the
    interpreter's own call of a jit function first patches triton.language again (milliseconds
    a call, most of the interpreted tests' time), which the launch of the calling kernel has
    already done."""
    jitted = triton.jit(fn)
    rewrite = getattr(jitted, "rewrite", None)  # only the interpreter's functions have it
    return jitted if rewrite is None else rewrite()


@device
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


@device
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


@device
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


@device
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


@device
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


@device
def store_residual(newres_ptr, x_ptr, c, dec, e, mask, MANUAL_BF16: tl.constexpr):
    """newres[e] = c - (dec rounded to x's dtype), non-finite results set to 0."""
    r = c - to_out(dec, x_ptr, MANUAL_BF16).to(tl.float32)
    tl.store(newres_ptr + e, tl.where(tl.abs(r) < float("inf"), r, 0.0), mask=mask)


@device
def row_sum(a):
    return tl.sum(tl.sum(a, axis=2), axis=1)
