"""Kernels of the quantizers: int8/int4 (absmax, minmax), QSGD and TernGrad (one METHOD
constexpr), and natural compression (wrapped by `gradcomp.kernels.quantize.launcher`)."""
from __future__ import annotations

import triton
import triton.language as tl

from ..tiles import (device, load_codes, load_corrected, row_sum, store_packed, store_residual,
                     tile, to_out)

# Method ids (constexpr METHOD) of the quantizer kernels.
ABSMAX, MINMAX, QSGD, TERN = 0, 1, 2, 3


@device
def _rint(r):
    """Round half to even (torch.round), exact for |r| < 2**22."""
    f = tl.floor(r)
    d = r - f
    h = f * 0.5
    odd = tl.floor(h) != h
    up = (d > 0.5) | ((d == 0.5) & odd)
    return f + up.to(tl.float32)


@device
def _round(r, u, STOCH: tl.constexpr):
    """Nearest (half to even), or stochastic: floor(r) + (u < frac(r)), unbiased."""
    if STOCH:
        f = tl.floor(r)
        out = f + (u < (r - f)).to(tl.float32)
    else:
        out = _rint(r)
    return out


@device
def _nan_to_zero(r):
    return tl.where(r != r, 0.0, r)


@device
def _divisor(d):
    """d where d > 0, else 1 (zero and NaN scales divide safely)."""
    return tl.where(d > 0, d, 1.0)


@device
def _div_scalar(a, C: tl.constexpr, INV: tl.constexpr, RECIP: tl.constexpr):
    """a / C as the torch reference computes `tensor / python_number` on this device."""
    if RECIP:
        out = a * INV
    else:
        out = tl.math.div_rn(a, tl.full(a.shape, C, tl.float32))
    return out


@device
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


@device
def _row_max_nan(a, mask):
    """max over axes 1 and 2 of a (ROWS, G, 8) tile (masked entries ignored), NaN if any."""
    m = tl.max(tl.max(tl.where(mask, a, float("-inf")), axis=2), axis=1)
    bad = tl.max(tl.max((mask & (a != a)).to(tl.int32), axis=2), axis=1)
    return tl.where(bad > 0, float("nan"), m)


@device
def _row_min_nan(a, mask):
    m = tl.min(tl.min(tl.where(mask, a, float("inf")), axis=2), axis=1)
    bad = tl.max(tl.max((mask & (a != a)).to(tl.int32), axis=2), axis=1)
    return tl.where(bad > 0, float("nan"), m)


# -- quantizers: codes from the wire statistics --------------------------------------------
@device
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


@device
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
def quant_rows_kernel(x_ptr, packed_ptr, stats_ptr, seed_ptr, n, nblocks, nbytes,
                      METHOD: tl.constexpr, BS: tl.constexpr, ROWS: tl.constexpr,
                      G: tl.constexpr, BITS: tl.constexpr, BP2: tl.constexpr,
                      LEVELS: tl.constexpr, INV: tl.constexpr, RECIP: tl.constexpr,
                      STOCH: tl.constexpr, res_ptr=None, newres_ptr=None,
                      RES: tl.constexpr = False, EF: tl.constexpr = False,
                      MANUAL_BF16: tl.constexpr = False):
    """Fused block quantizer: ROWS blocks of BS values per program; statistics, codes and the
    packed stream (and error feedback's new residual) in one pass."""
    pid = tl.program_id(0)
    r, e, mask, grp, gvalid = tile(pid, n, BS, ROWS, G)
    c, x = load_corrected(x_ptr, res_ptr, e, mask, RES, MANUAL_BF16)
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
        st0 = tl.sqrt_rn(row_sum(s * s)) * unit
        tl.store(stats_ptr + r, st0, mask=rmask)
    else:
        st0 = _row_max_nan(tl.abs(x), mask)
        tl.store(stats_ptr + r, st0, mask=rmask)
    st0 = st0[:, None, None]
    code = _quant_codes(x, st0, st1, u, METHOD, BITS, LEVELS, INV, RECIP, STOCH)
    _store_codes(packed_ptr, code, e, mask, grp, gvalid, nbytes, BITS, BP2)
    if EF:
        dec = _quant_value(code, st0, st1, METHOD, BITS, LEVELS, INV, RECIP)
        store_residual(newres_ptr, x_ptr, c, dec, e, mask, MANUAL_BF16)


@device
def _store_codes(packed_ptr, code, e, mask, grp, gvalid, nbytes, BITS: tl.constexpr,
                 BP2: tl.constexpr):
    """Write quantizer codes: one byte each for 8 bits, else packed (padding codes are 0)."""
    code = tl.where(mask, code, 0)
    if BITS == 8:
        tl.store(packed_ptr + e, code.to(tl.uint8), mask=mask)
    else:
        store_packed(packed_ptr, code, grp, gvalid, nbytes, BITS, BP2)


@triton.jit
def quant_elem_kernel(x_ptr, packed_ptr, stats_ptr, seed_ptr, n, nblocks, nbytes,
                      METHOD: tl.constexpr, BS: tl.constexpr, ROWS: tl.constexpr,
                      G: tl.constexpr, BITS: tl.constexpr, BP2: tl.constexpr,
                      LEVELS: tl.constexpr, INV: tl.constexpr, RECIP: tl.constexpr,
                      STOCH: tl.constexpr, res_ptr=None, newres_ptr=None,
                      RES: tl.constexpr = False, EF: tl.constexpr = False,
                      MANUAL_BF16: tl.constexpr = False):
    """Quantizer codes (and error feedback's new residual) for any block size BS (0: one
    block), statistics given in stats_ptr."""
    pid = tl.program_id(0)
    r, e, mask, grp, gvalid = tile(pid, n, 8 * G, ROWS, G)
    c, x = load_corrected(x_ptr, res_ptr, e, mask, RES, MANUAL_BF16)
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
        store_residual(newres_ptr, x_ptr, c, dec, e, mask, MANUAL_BF16)


@device
def _decoded(packed_ptr, stats_ptr, e, mask, nblocks, nbytes, METHOD: tl.constexpr,
             BS: tl.constexpr, BITS: tl.constexpr, LEVELS: tl.constexpr, INV: tl.constexpr,
             RECIP: tl.constexpr):
    """The float32 values of elements `e` of one payload (codes, then block statistics)."""
    c = load_codes(packed_ptr, e, mask, nbytes, BITS)
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
    return _quant_value(c, st0, st1, METHOD, BITS, LEVELS, INV, RECIP)


@triton.jit
def quant_decode_kernel(packed_ptr, stats_ptr, out_ptr, n, nblocks, nbytes,
                        METHOD: tl.constexpr, BS: tl.constexpr, BLOCK: tl.constexpr,
                        BITS: tl.constexpr, LEVELS: tl.constexpr, INV: tl.constexpr,
                        RECIP: tl.constexpr, MANUAL_BF16: tl.constexpr):
    pid = tl.program_id(0)
    e = pid * BLOCK + tl.arange(0, BLOCK)
    mask = e < n
    out = _decoded(packed_ptr, stats_ptr, e, mask, nblocks, nbytes, METHOD, BS, BITS, LEVELS,
                   INV, RECIP)
    tl.store(out_ptr + e, to_out(out, out_ptr, MANUAL_BF16), mask=mask)


@triton.jit
def quant_decode_mean_kernel(packed_ptr, stats_ptr, out_ptr, n, nblocks, nbytes, packed_stride,
                             stats_stride, W: tl.constexpr, METHOD: tl.constexpr,
                             BS: tl.constexpr, BLOCK: tl.constexpr, BITS: tl.constexpr,
                             LEVELS: tl.constexpr, INV: tl.constexpr, RECIP: tl.constexpr,
                             W_INV: tl.constexpr):
    """The float32 mean of W payloads (payload w: codes at packed_ptr + w * packed_stride,
    statistics at stats_ptr + w * stats_stride): summed in payload order starting from payload
    0's values, then divided by W, as `Compressor.aggregate` does with torch ops."""
    pid = tl.program_id(0)
    e = pid * BLOCK + tl.arange(0, BLOCK)
    mask = e < n
    acc = _decoded(packed_ptr, stats_ptr, e, mask, nblocks, nbytes, METHOD, BS, BITS, LEVELS,
                   INV, RECIP)
    for w in range(1, W):
        row = tl.full([1], w, tl.int64)
        acc += _decoded(packed_ptr + row * packed_stride, stats_ptr + row * stats_stride, e,
                        mask, nblocks, nbytes, METHOD, BS, BITS, LEVELS, INV, RECIP)
    tl.store(out_ptr + e, _div_scalar(acc, W, W_INV, RECIP), mask=mask)


# -- natural compression ---------------------------------------------------------------------
@device
def _natural_value(sign, ex):
    """+-2**(ex - 127) (ex = 0: zero, or NaN with the sign set; ex = 255: +-Inf)."""
    mag = (ex << 23).to(tl.float32, bitcast=True)
    out = tl.where(sign, -mag, mag)
    return tl.where(sign & (ex == 0), float("nan"), out)


@triton.jit
def natural_encode_kernel(x_ptr, packed_ptr, exp_ptr, seed_ptr, n, nbytes,
                          CAP: tl.constexpr, ROWS: tl.constexpr, G: tl.constexpr,
                          res_ptr=None, newres_ptr=None, RES: tl.constexpr = False,
                          EF: tl.constexpr = False, MANUAL_BF16: tl.constexpr = False):
    pid = tl.program_id(0)
    r, e, mask, grp, gvalid = tile(pid, n, 8 * G, ROWS, G)
    c, x = load_corrected(x_ptr, res_ptr, e, mask, RES, MANUAL_BF16)
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
    store_packed(packed_ptr, tl.where(mask, sign.to(tl.int32), 0), grp, gvalid, nbytes, 1, 2)
    if EF:
        store_residual(newres_ptr, x_ptr, c, _natural_value(sign, ex), e, mask, MANUAL_BF16)


@triton.jit
def natural_decode_kernel(packed_ptr, exp_ptr, out_ptr, n, nbytes, BLOCK: tl.constexpr,
                          MANUAL_BF16: tl.constexpr):
    pid = tl.program_id(0)
    e = pid * BLOCK + tl.arange(0, BLOCK)
    mask = e < n
    sign = load_codes(packed_ptr, e, mask, nbytes, 1) != 0
    ex = tl.load(exp_ptr + e, mask=mask, other=0).to(tl.int32)
    out = _natural_value(sign, ex)
    tl.store(out_ptr + e, to_out(out, out_ptr, MANUAL_BF16), mask=mask)
