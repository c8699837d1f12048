"""The Triton kernels. Imported only on demand (by `gradcomp.kernels.ops`), so that importing
gradcomp never needs Triton. Set TRITON_INTERPRET=1 *before* this module is first imported to
run the kernels on CPU tensors with Triton's interpreter (the tests do).

Shared conventions
------------------
* Every kernel works on a contiguous flat tensor of `n` elements with int32 index arithmetic
  (the wrappers fall back to torch for tensors whose bit count does not fit in int32).
* Encoders read a tile of shape (ROWS, G, 8): 8 consecutive elements form one *group*, whose
  `BITS`-bit codes make exactly `BITS` bytes of the MSB-first bit stream of `bitpack.pack`.
  A group is packed in registers (`_store_packed`), so codes never go through memory unpacked.
  - "rows" kernels (`*_rows_kernel`): one tile row is one quantization block (block_size a
    multiple of 8, padded to the power of two 8 * G); the block's statistic (absmax, min/max,
    norm, mean |x|...) is reduced in registers and the codes written in the same pass: one read
    of the input, one write of codes and scales.
  - "elem" kernels (`*_elem_kernel`): a tile row is 8 * G consecutive elements; the block
    statistic of every element is gathered from a small array computed beforehand (by
    `_partial_kernel` + a tiny torch reduction), so any block size works, including the whole
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

# Method ids (constexpr METHOD) of the quantizer kernels.
ABSMAX, MINMAX, QSGD, TERN = 0, 1, 2, 3
# Method ids of the sign kernels.
SIGN, EFSIGN, ONEBIT = 0, 1, 2
# Statistics of `_partial_kernel` (constexpr MODE) and of the sign elem kernel (STATS).
P_NONE, P_ABSMAX, P_MINMAX, P_ABSSUM, P_ONEBIT, P_SUMSQ = -1, 0, 1, 2, 3, 4
NPART = 4  # float32 slots per partial


# -- helpers ---------------------------------------------------------------------------------
@triton.jit
def _rint(r):
    """Round half to even (torch.round), exact for |r| < 2**22."""
    f = tl.floor(r)
    d = r - f
    h = f * 0.5
    odd = tl.floor(h) != h
    up = (d > 0.5) | ((d == 0.5) & odd)
    return f + up.to(tl.float32)


@triton.jit
def _round(r, u, STOCH: tl.constexpr):
    """Nearest (half to even), or stochastic: floor(r) + (u < frac(r)), unbiased."""
    if STOCH:
        f = tl.floor(r)
        out = f + (u < (r - f)).to(tl.float32)
    else:
        out = _rint(r)
    return out


@triton.jit
def _nan_to_zero(r):
    return tl.where(r != r, 0.0, r)


@triton.jit
def _divisor(d):
    """d where d > 0, else 1 (zero and NaN scales divide safely)."""
    return tl.where(d > 0, d, 1.0)


@triton.jit
def _div_scalar(a, C: tl.constexpr, INV: tl.constexpr, RECIP: tl.constexpr):
    """a / C as the torch reference computes `tensor / python_number` on this device."""
    if RECIP:
        out = a * INV
    else:
        out = tl.math.div_rn(a, tl.full(a.shape, C, tl.float32))
    return out


@triton.jit
def _tile(pid, n, BS: tl.constexpr, ROWS: tl.constexpr, G: tl.constexpr):
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
def _uniform(seed_ptr, r, e, BS: tl.constexpr, ROWS: tl.constexpr, G: tl.constexpr):
    """Uniform [0, 1) floats for a (ROWS, G, 8) tile whose element indices are
    e = r * BS + 8 g + j. Philox gives 4 numbers per call, so where rows start at multiples of 4
    the 4 elements 4c .. 4c+3 share the call with counter c (4x less work than `tl.rand` per
    element); otherwise one call per element (counter e)."""
    seed = tl.load(seed_ptr)
    if BS % 4 == 0:
        g = tl.arange(0, G)
        k = tl.arange(0, 2)
        ctr = r[:, None, None] * (BS // 4) + g[None, :, None] * 2 + k[None, None, :]
        a0, a1, a2, a3 = tl.randint4x(seed, ctr)
        u = tl.reshape(tl.join(tl.join(a0, a1), tl.join(a2, a3)), (ROWS, G, 8))
        out = tl.uint_to_uniform_float(u)
    else:
        out = tl.rand(seed, e)
    return out


@triton.jit
def _store_packed(out_ptr, codes, grp, gvalid, nbytes, BITS: tl.constexpr, BP2: tl.constexpr):
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
def _load_codes(packed_ptr, e, mask, nbytes, BITS: tl.constexpr):
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
def _to_out(v, out_ptr, MANUAL_BF16: tl.constexpr):
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
def _load_corrected(x_ptr, res_ptr, e, mask, RES: tl.constexpr, MANUAL_BF16: tl.constexpr):
    """(corrected, x) as float32 at `e`: with RES, corrected = x + residual and x = corrected
    rounded to x's dtype (what the compressor is given); else both are x."""
    x = tl.load(x_ptr + e, mask=mask, other=0.0).to(tl.float32)
    if RES:
        c = x + tl.load(res_ptr + e, mask=mask, other=0.0)
        x = _to_out(c, x_ptr, MANUAL_BF16).to(tl.float32)
    else:
        c = x
    return c, x


@triton.jit
def _store_residual(newres_ptr, x_ptr, c, dec, e, mask, MANUAL_BF16: tl.constexpr):
    """newres[e] = c - (dec rounded to x's dtype), non-finite results set to 0."""
    r = c - _to_out(dec, x_ptr, MANUAL_BF16).to(tl.float32)
    tl.store(newres_ptr + e, tl.where(tl.abs(r) < float("inf"), r, 0.0), mask=mask)


@triton.jit
def _row_max_nan(a, mask):
    """max over axes 1 and 2 of a (ROWS, G, 8) tile (masked entries ignored), NaN if any."""
    m = tl.max(tl.max(tl.where(mask, a, float("-inf")), axis=2), axis=1)
    bad = tl.max(tl.max((mask & (a != a)).to(tl.int32), axis=2), axis=1)
    return tl.where(bad > 0, float("nan"), m)


@triton.jit
def _row_min_nan(a, mask):
    m = tl.min(tl.min(tl.where(mask, a, float("inf")), axis=2), axis=1)
    bad = tl.max(tl.max((mask & (a != a)).to(tl.int32), axis=2), axis=1)
    return tl.where(bad > 0, float("nan"), m)


@triton.jit
def _row_sum(a):
    return tl.sum(tl.sum(a, axis=2), axis=1)


# -- quantizers: codes from the wire statistics --------------------------------------------
@triton.jit
def _quant_codes(x, st0, st1, u, METHOD: tl.constexpr, BITS: tl.constexpr,
                 LEVELS: tl.constexpr, INV: tl.constexpr, RECIP: tl.constexpr,
                 STOCH: tl.constexpr):
    """Codes (int32) of float32 values x given their block's wire statistics, as in
    gradcomp.compressors.quantize:
    ABSMAX st0 = scale, LEVELS = qmax; MINMAX st0 = lo, st1 = hi, LEVELS = top, INV = 1 / (top/2);
    QSGD st0 = norm, LEVELS = levels; TERN st0 = max|x| (always stochastic)."""
    if METHOD == 0:  # absmax
        r = tl.math.div_rn(x, _divisor(st0))
        r = tl.minimum(tl.maximum(_nan_to_zero(r), -LEVELS * 1.0), LEVELS * 1.0)
        code = (_round(r, u, STOCH) + LEVELS).to(tl.int32)
    elif METHOD == 1:  # minmax
        step = _div_scalar(0.5 * st1 - 0.5 * st0, 0.5 * LEVELS, INV, RECIP)
        r = tl.math.div_rn(x - st0, _divisor(step))
        r = tl.minimum(tl.maximum(_nan_to_zero(r), 0.0), LEVELS * 1.0)
        code = _round(r, u, STOCH).to(tl.int32)
    elif METHOD == 2:  # qsgd
        r = tl.math.div_rn(tl.abs(x), _divisor(st0)) * (LEVELS * 1.0)
        r = tl.minimum(tl.maximum(_nan_to_zero(r), 0.0), LEVELS * 1.0)
        level = _round(r, u, STOCH)
        neg = (x < 0) & (level > 0)
        code = level.to(tl.int32) | (neg.to(tl.int32) << (BITS - 1))
    else:  # terngrad
        p = tl.math.div_rn(tl.abs(x), _divisor(st0))
        p = tl.minimum(tl.maximum(_nan_to_zero(p), 0.0), 1.0)
        keep = (u < p).to(tl.int32)
        code = 1 + keep - 2 * (keep & (x < 0).to(tl.int32))
    return code


@triton.jit
def _quant_value(c, st0, st1, METHOD: tl.constexpr, BITS: tl.constexpr, LEVELS: tl.constexpr,
                 INV: tl.constexpr, RECIP: tl.constexpr):
    """The decoded float32 value of codes c (int32) given their block's wire statistics (as
    `_quant_codes` takes them)."""
    if METHOD == 0:  # (q - qmax) * scale
        out = (c.to(tl.float32) - LEVELS) * st0
    elif METHOD == 1:  # lo + q * step
        step = _div_scalar(0.5 * st1 - 0.5 * st0, 0.5 * LEVELS, INV, RECIP)
        out = st0 + c.to(tl.float32) * step
    elif METHOD == 2:  # +-level * (norm / levels)
        level = (c & ((1 << (BITS - 1)) - 1)).to(tl.float32)
        mag = level * _div_scalar(st0, LEVELS, INV, RECIP)
        out = tl.where((c >> (BITS - 1)) != 0, -mag, mag)
    else:  # (code - 1) * s
        out = (c.to(tl.float32) - 1.0) * st0
    return out


@triton.jit
def _quant_rows_kernel(x_ptr, packed_ptr, stats_ptr, seed_ptr, n, nblocks, nbytes,
                       METHOD: tl.constexpr, BS: tl.constexpr, ROWS: tl.constexpr,
                       G: tl.constexpr, BITS: tl.constexpr, BP2: tl.constexpr,
                       LEVELS: tl.constexpr, INV: tl.constexpr, RECIP: tl.constexpr,
                       STOCH: tl.constexpr, res_ptr=None, newres_ptr=None,
                       RES: tl.constexpr = False, EF: tl.constexpr = False,
                       MANUAL_BF16: tl.constexpr = False):
    """Fused block quantizer: ROWS blocks of BS values per program; statistics, codes and the
    packed stream (and error feedback's new residual) in one pass."""
    pid = tl.program_id(0)
    r, e, mask, grp, gvalid = _tile(pid, n, BS, ROWS, G)
    c, x = _load_corrected(x_ptr, res_ptr, e, mask, RES, MANUAL_BF16)
    rmask = r < nblocks
    if STOCH:
        u = _uniform(seed_ptr, r, e, BS, ROWS, G)
    else:
        u = 0.0
    st1 = 0.0
    if METHOD == 0:
        st0 = _div_scalar(_row_max_nan(tl.abs(x), mask), LEVELS, INV, RECIP)
        tl.store(stats_ptr + r, st0, mask=rmask)
    elif METHOD == 1:
        st0 = _row_min_nan(x, mask)
        st1 = _row_max_nan(x, mask)
        tl.store(stats_ptr + r, st0, mask=rmask)
        tl.store(stats_ptr + nblocks + r, st1, mask=rmask)
        st1 = st1[:, None, None]
    elif METHOD == 2:
        amax = _row_max_nan(tl.abs(x), mask)
        unit = tl.where((amax > 0) & (amax < float("inf")), amax, 1.0)
        s = tl.math.div_rn(x, unit[:, None, None])
        st0 = tl.sqrt_rn(_row_sum(s * s)) * unit
        tl.store(stats_ptr + r, st0, mask=rmask)
    else:
        st0 = _row_max_nan(tl.abs(x), mask)
        tl.store(stats_ptr + r, st0, mask=rmask)
    st0 = st0[:, None, None]
    code = _quant_codes(x, st0, st1, u, METHOD, BITS, LEVELS, INV, RECIP, STOCH)
    _store_codes(packed_ptr, code, e, mask, grp, gvalid, nbytes, BITS, BP2)
    if EF:
        dec = _quant_value(code, st0, st1, METHOD, BITS, LEVELS, INV, RECIP)
        _store_residual(newres_ptr, x_ptr, c, dec, e, mask, MANUAL_BF16)


@triton.jit
def _store_codes(packed_ptr, code, e, mask, grp, gvalid, nbytes, BITS: tl.constexpr,
                 BP2: tl.constexpr):
    """Write quantizer codes: one byte each for 8 bits, else packed (padding codes are 0)."""
    code = tl.where(mask, code, 0)
    if BITS == 8:
        tl.store(packed_ptr + e, code.to(tl.uint8), mask=mask)
    else:
        _store_packed(packed_ptr, code, grp, gvalid, nbytes, BITS, BP2)


@triton.jit
def _quant_elem_kernel(x_ptr, packed_ptr, stats_ptr, seed_ptr, n, nblocks, nbytes,
                       METHOD: tl.constexpr, BS: tl.constexpr, ROWS: tl.constexpr,
                       G: tl.constexpr, BITS: tl.constexpr, BP2: tl.constexpr,
                       LEVELS: tl.constexpr, INV: tl.constexpr, RECIP: tl.constexpr,
                       STOCH: tl.constexpr, res_ptr=None, newres_ptr=None,
                       RES: tl.constexpr = False, EF: tl.constexpr = False,
                       MANUAL_BF16: tl.constexpr = False):
    """Quantizer codes (and error feedback's new residual) for any block size BS (0: one
    block), statistics given in stats_ptr."""
    pid = tl.program_id(0)
    r, e, mask, grp, gvalid = _tile(pid, n, 8 * G, ROWS, G)
    c, x = _load_corrected(x_ptr, res_ptr, e, mask, RES, MANUAL_BF16)
    if BS == 0:  # one block: scalar statistics
        st0 = tl.load(stats_ptr)
        st1 = tl.load(stats_ptr + nblocks) if METHOD == 1 else 0.0
    else:
        blk = e // BS
        st0 = tl.load(stats_ptr + blk, mask=mask, other=1.0)
        if METHOD == 1:
            st1 = tl.load(stats_ptr + nblocks + blk, mask=mask, other=1.0)
        else:
            st1 = 0.0
    if STOCH:
        u = _uniform(seed_ptr, r, e, 8 * G, ROWS, G)
    else:
        u = 0.0
    code = _quant_codes(x, st0, st1, u, METHOD, BITS, LEVELS, INV, RECIP, STOCH)
    _store_codes(packed_ptr, code, e, mask, grp, gvalid, nbytes, BITS, BP2)
    if EF:
        dec = _quant_value(code, st0, st1, METHOD, BITS, LEVELS, INV, RECIP)
        _store_residual(newres_ptr, x_ptr, c, dec, e, mask, MANUAL_BF16)


@triton.jit
def _quant_decode_kernel(packed_ptr, stats_ptr, out_ptr, n, nblocks, nbytes,
                         METHOD: tl.constexpr, BS: tl.constexpr, BLOCK: tl.constexpr,
                         BITS: tl.constexpr, LEVELS: tl.constexpr, INV: tl.constexpr,
                         RECIP: tl.constexpr, MANUAL_BF16: tl.constexpr):
    pid = tl.program_id(0)
    e = pid * BLOCK + tl.arange(0, BLOCK)
    mask = e < n
    c = _load_codes(packed_ptr, e, mask, nbytes, BITS)
    if BS == 0:  # one block: scalar statistics
        st0 = tl.load(stats_ptr)
        st1 = tl.load(stats_ptr + nblocks) if METHOD == 1 else 0.0
    else:
        blk = e // BS
        st0 = tl.load(stats_ptr + blk, mask=mask, other=0.0)
        if METHOD == 1:
            st1 = tl.load(stats_ptr + nblocks + blk, mask=mask, other=0.0)
        else:
            st1 = 0.0
    out = _quant_value(c, st0, st1, METHOD, BITS, LEVELS, INV, RECIP)
    tl.store(out_ptr + e, _to_out(out, out_ptr, MANUAL_BF16), mask=mask)


# -- partial statistics (for the elem kernels) ----------------------------------------------
@triton.jit
def _partial_kernel(x_ptr, part_ptr, aux_ptr, n, BS, nblocks, CPB,
                    MODE: tl.constexpr, ROWS: tl.constexpr, CHUNK: tl.constexpr,
                    res_ptr=None, RES: tl.constexpr = False, MANUAL_BF16: tl.constexpr = False):
    """Statistics of chunk c of blocks rb*ROWS .. rb*ROWS+ROWS-1 (pid = rb * CPB + c) written to
    part[(block * CPB + c) * 4 + k]. MODE: absmax (NaN if any NaN), minmax, sum|x|, onebit
    (sum of x >= 0, sum of the rest, count of x >= 0), sum((x / aux[block])**2). With RES, of
    x corrected by the residual."""
    pid = tl.program_id(0)
    rb = pid // CPB
    c = pid % CPB
    r = rb * ROWS + tl.arange(0, ROWS)
    i = c * CHUNK + tl.arange(0, CHUNK)
    e = r[:, None] * BS + i[None, :]
    mask = (r < nblocks)[:, None] & (i < BS)[None, :] & (e < n)
    _, x = _load_corrected(x_ptr, res_ptr, e, mask, RES, MANUAL_BF16)
    out = (r * CPB + c) * 4
    rmask = r < nblocks
    bad = tl.max((mask & (x != x)).to(tl.int32), axis=1) > 0
    if MODE == 0:
        m = tl.max(tl.where(mask, tl.abs(x), float("-inf")), axis=1)
        tl.store(part_ptr + out, tl.where(bad, float("nan"), m), mask=rmask)
    elif MODE == 1:
        lo = tl.min(tl.where(mask, x, float("inf")), axis=1)
        hi = tl.max(tl.where(mask, x, float("-inf")), axis=1)
        tl.store(part_ptr + out, tl.where(bad, float("nan"), lo), mask=rmask)
        tl.store(part_ptr + out + 1, tl.where(bad, float("nan"), hi), mask=rmask)
    elif MODE == 2:
        tl.store(part_ptr + out, tl.sum(tl.abs(x), axis=1), mask=rmask)
    elif MODE == 3:
        pos = mask & (x >= 0)
        tl.store(part_ptr + out, tl.sum(tl.where(pos, x, 0.0), axis=1), mask=rmask)
        tl.store(part_ptr + out + 1, tl.sum(tl.where(pos, 0.0, x), axis=1), mask=rmask)
        tl.store(part_ptr + out + 2, tl.sum(pos.to(tl.int32), axis=1).to(tl.float32),
                 mask=rmask)
    else:
        unit = tl.load(aux_ptr + r, mask=rmask, other=1.0)
        s = tl.math.div_rn(x, unit[:, None])
        tl.store(part_ptr + out, tl.sum(s * s, axis=1), mask=rmask)


# -- sign compressors ------------------------------------------------------------------------
@triton.jit
def _sign_rows_kernel(x_ptr, packed_ptr, stats_ptr, n, nblocks, nbytes,
                      METHOD: tl.constexpr, BS: tl.constexpr, ROWS: tl.constexpr,
                      G: tl.constexpr, res_ptr=None, newres_ptr=None, RES: tl.constexpr = False,
                      EF: tl.constexpr = False, MANUAL_BF16: tl.constexpr = False):
    """Fused efsignsgd (mean |x|) / onebit (means of the two sign groups) per block of BS (and
    error feedback's new residual)."""
    pid = tl.program_id(0)
    r, e, mask, grp, gvalid = _tile(pid, n, BS, ROWS, G)
    c, x = _load_corrected(x_ptr, res_ptr, e, mask, RES, MANUAL_BF16)
    bit = mask & (x >= 0)
    rmask = r < nblocks
    count = tl.minimum(n - r * BS, BS)
    if METHOD == 1:
        s = tl.math.div_rn(_row_sum(tl.abs(x)), tl.maximum(count, 1).to(tl.float32))
        tl.store(stats_ptr + r, s, mask=rmask)
        pos = s[:, None, None]
        neg = -pos
    else:
        ps = _row_sum(tl.where(bit, x, 0.0))
        ns = _row_sum(tl.where(bit, 0.0, x))
        pc = tl.sum(tl.sum(bit.to(tl.int32), axis=2), axis=1)
        nc = count - pc
        pos = tl.math.div_rn(ps, tl.maximum(pc, 1).to(tl.float32))
        neg = tl.math.div_rn(ns, tl.maximum(nc, 1).to(tl.float32))
        tl.store(stats_ptr + 2 * r, pos, mask=rmask)
        tl.store(stats_ptr + 2 * r + 1, neg, mask=rmask)
        pos = pos[:, None, None]
        neg = neg[:, None, None]
    _store_packed(packed_ptr, bit.to(tl.int32), grp, gvalid, nbytes, 1, 2)
    if EF:
        _store_residual(newres_ptr, x_ptr, c, tl.where(bit, pos, neg), e, mask, MANUAL_BF16)


@triton.jit
def _sign_elem_kernel(x_ptr, packed_ptr, part_ptr, n, nbytes,
                      STATS: tl.constexpr, ROWS: tl.constexpr, G: tl.constexpr,
                      res_ptr=None, RES: tl.constexpr = False, MANUAL_BF16: tl.constexpr = False):
    """Sign bits (x >= 0) of any tensor, plus per-program partial statistics of the whole
    tensor (STATS: none, absmax with NaN, sum|x|, onebit) at part[pid * 4 + k]. With RES, of x
    corrected by the residual."""
    pid = tl.program_id(0)
    r, e, mask, grp, gvalid = _tile(pid, n, 8 * G, ROWS, G)
    _, x = _load_corrected(x_ptr, res_ptr, e, mask, RES, MANUAL_BF16)
    bit = mask & (x >= 0)
    _store_packed(packed_ptr, bit.to(tl.int32), grp, gvalid, nbytes, 1, 2)
    if STATS == 0:
        m = tl.max(tl.max(tl.max(tl.where(mask, tl.abs(x), float("-inf")), axis=2), axis=1))
        bad = tl.max(tl.max(tl.max((mask & (x != x)).to(tl.int32), axis=2), axis=1))
        tl.store(part_ptr + pid * 4, tl.where(bad > 0, float("nan"), m))
    elif STATS == 2:
        tl.store(part_ptr + pid * 4, tl.sum(_row_sum(tl.abs(x))))
    elif STATS == 3:
        tl.store(part_ptr + pid * 4, tl.sum(_row_sum(tl.where(bit, x, 0.0))))
        tl.store(part_ptr + pid * 4 + 1, tl.sum(_row_sum(tl.where(bit, 0.0, x))))
        pc = tl.sum(tl.sum(tl.sum(bit.to(tl.int32), axis=2), axis=1))
        tl.store(part_ptr + pid * 4 + 2, pc.to(tl.float32))


@triton.jit
def _sign_value(bit, stats_ptr, e, mask, METHOD: tl.constexpr, BS: tl.constexpr):
    """The decoded float32 value of sign bits at `e`: signsgd +-flag; efsignsgd +-scale[block];
    onebit means[2 block + (bit == 0)]."""
    if BS == 0:  # one block: scalar statistics
        if METHOD == 2:
            out = tl.where(bit, tl.load(stats_ptr), tl.load(stats_ptr + 1))
        else:
            s = tl.load(stats_ptr)
            out = tl.where(bit, s, -s)
    else:
        blk = e // BS
        if METHOD == 2:
            out = tl.load(stats_ptr + 2 * blk + tl.where(bit, 0, 1), mask=mask, other=0.0)
        else:
            s = tl.load(stats_ptr + blk, mask=mask, other=0.0)
            out = tl.where(bit, s, -s)
    return out


@triton.jit
def _sign_ef_kernel(x_ptr, stats_ptr, packed_ptr, newres_ptr, n, nbytes,
                    METHOD: tl.constexpr, BS: tl.constexpr, BITS_OUT: tl.constexpr,
                    ROWS: tl.constexpr, G: tl.constexpr, MANUAL_BF16: tl.constexpr,
                    res_ptr=None, RES: tl.constexpr = False):
    """Error feedback of the two-pass sign path, statistics given: the new residual (and, with
    BITS_OUT, the sign bits)."""
    pid = tl.program_id(0)
    r, e, mask, grp, gvalid = _tile(pid, n, 8 * G, ROWS, G)
    c, x = _load_corrected(x_ptr, res_ptr, e, mask, RES, MANUAL_BF16)
    bit = mask & (x >= 0)
    if BITS_OUT:
        _store_packed(packed_ptr, bit.to(tl.int32), grp, gvalid, nbytes, 1, 2)
    dec = _sign_value(bit, stats_ptr, e, mask, METHOD, BS)
    _store_residual(newres_ptr, x_ptr, c, dec, e, mask, MANUAL_BF16)


@triton.jit
def _sign_decode_kernel(packed_ptr, stats_ptr, out_ptr, n, nbytes,
                        METHOD: tl.constexpr, BS: tl.constexpr, BLOCK: tl.constexpr,
                        MANUAL_BF16: tl.constexpr):
    """signsgd: +-flag; efsignsgd: +-scale[block]; onebit: means[2 block + (bit == 0)]."""
    pid = tl.program_id(0)
    e = pid * BLOCK + tl.arange(0, BLOCK)
    mask = e < n
    bit = _load_codes(packed_ptr, e, mask, nbytes, 1) != 0
    out = _sign_value(bit, stats_ptr, e, mask, METHOD, BS)
    tl.store(out_ptr + e, _to_out(out, out_ptr, MANUAL_BF16), mask=mask)


# -- natural compression ---------------------------------------------------------------------
@triton.jit
def _natural_value(sign, ex):
    """+-2**(ex - 127) (ex = 0: zero, or NaN with the sign set; ex = 255: +-Inf)."""
    mag = (ex << 23).to(tl.float32, bitcast=True)
    out = tl.where(sign, -mag, mag)
    return tl.where(sign & (ex == 0), float("nan"), out)


@triton.jit
def _natural_encode_kernel(x_ptr, packed_ptr, exp_ptr, seed_ptr, n, nbytes,
                           CAP: tl.constexpr, ROWS: tl.constexpr, G: tl.constexpr,
                           res_ptr=None, newres_ptr=None, RES: tl.constexpr = False,
                           EF: tl.constexpr = False, MANUAL_BF16: tl.constexpr = False):
    pid = tl.program_id(0)
    r, e, mask, grp, gvalid = _tile(pid, n, 8 * G, ROWS, G)
    c, x = _load_corrected(x_ptr, res_ptr, e, mask, RES, MANUAL_BF16)
    b = x.to(tl.int32, bitcast=True)
    E = (b >> 23) & 0xFF
    small = E == 0  # zero or subnormal: |x| < 2**-126
    mag = tl.abs(x)
    p_up = tl.where(small, tl.where(small, mag, 0.0) * 8.507059173023462e37,  # 2**126, exact
                    (b & 0x7FFFFF).to(tl.float32) * 1.1920928955078125e-07)  # 2**-23
    u = _uniform(seed_ptr, r, e, 8 * G, ROWS, G)
    ex = E + (u < p_up).to(tl.int32)
    ex = tl.minimum(ex, CAP)
    isnan = x != x
    ex = tl.where(E == 255, 255, ex)
    ex = tl.where(isnan, 0, ex)
    sign = ((b < 0) & (ex > 0)) | isnan
    tl.store(exp_ptr + e, ex.to(tl.uint8), mask=mask)
    _store_packed(packed_ptr, tl.where(mask, sign.to(tl.int32), 0), grp, gvalid, nbytes, 1, 2)
    if EF:
        _store_residual(newres_ptr, x_ptr, c, _natural_value(sign, ex), e, mask, MANUAL_BF16)


@triton.jit
def _natural_decode_kernel(packed_ptr, exp_ptr, out_ptr, n, nbytes, BLOCK: tl.constexpr,
                           MANUAL_BF16: tl.constexpr):
    pid = tl.program_id(0)
    e = pid * BLOCK + tl.arange(0, BLOCK)
    mask = e < n
    sign = _load_codes(packed_ptr, e, mask, nbytes, 1) != 0
    ex = tl.load(exp_ptr + e, mask=mask, other=0).to(tl.int32)
    out = _natural_value(sign, ex)
    tl.store(out_ptr + e, _to_out(out, out_ptr, MANUAL_BF16), mask=mask)


# -- generic bit packing ---------------------------------------------------------------------
@triton.jit
def _pack_kernel(codes_ptr, packed_ptr, n, nbytes, BITS: tl.constexpr, BP2: tl.constexpr,
                 ROWS: tl.constexpr, G: tl.constexpr):
    pid = tl.program_id(0)
    r, e, mask, grp, gvalid = _tile(pid, n, 8 * G, ROWS, G)
    c = tl.load(codes_ptr + e, mask=mask, other=0).to(tl.int32) & ((1 << BITS) - 1)
    _store_packed(packed_ptr, c, grp, gvalid, nbytes, BITS, BP2)


@triton.jit
def _unpack_kernel(packed_ptr, codes_ptr, n, nbytes, BITS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    e = pid * BLOCK + tl.arange(0, BLOCK)
    mask = e < n
    c = _load_codes(packed_ptr, e, mask, nbytes, BITS)
    tl.store(codes_ptr + e, c.to(tl.uint8), mask=mask)
