"""Kernels of the sign compressors signsgd, efsignsgd and onebit (wrapped by
`gradcomp.kernels.sign`)."""
from __future__ import annotations

import triton
import triton.language as tl

from ..tiles import (device, load_codes, load_corrected, row_sum, store_packed, store_residual,
                     tile, to_out)

# Method ids of the sign kernels.
SIGN, EFSIGN, ONEBIT = 0, 1, 2


@triton.jit
def sign_rows_kernel(x_ptr, packed_ptr, stats_ptr, n, nblocks, nbytes,
                     METHOD: tl.constexpr, BS: tl.constexpr, ROWS: tl.constexpr,
                     G: tl.constexpr, res_ptr=None, newres_ptr=None, RES: tl.constexpr = False,
                     EF: tl.constexpr = False, MANUAL_BF16: tl.constexpr = False):
    """Fused efsignsgd (mean |x|) / onebit (means of the two sign groups) per block of BS (and
    error feedback's new residual)."""
    pid = tl.program_id(0)
    r, e, mask, grp, gvalid = tile(pid, n, BS, ROWS, G)
    c, x = load_corrected(x_ptr, res_ptr, e, mask, RES, MANUAL_BF16)
    bit = mask & (x >= 0)
    rmask = r < nblocks
    count = tl.minimum(n - r * BS, BS)
    if METHOD == 1:
        s = tl.math.div_rn(row_sum(tl.abs(x)), tl.maximum(count, 1).to(tl.float32))
        tl.store(stats_ptr + r, s, mask=rmask)
        pos = s[:, None, None]
        neg = -pos
    else:
        ps = row_sum(tl.where(bit, x, 0.0))
        ns = row_sum(tl.where(bit, 0.0, x))
        pc = tl.sum(tl.sum(bit.to(tl.int32), axis=2), axis=1)
        nc = count - pc
        pos = tl.math.div_rn(ps, tl.maximum(pc, 1).to(tl.float32))
        neg = tl.math.div_rn(ns, tl.maximum(nc, 1).to(tl.float32))
        tl.store(stats_ptr + 2 * r, pos, mask=rmask)
        tl.store(stats_ptr + 2 * r + 1, neg, mask=rmask)
        pos = pos[:, None, None]
        neg = neg[:, None, None]
    store_packed(packed_ptr, bit.to(tl.int32), grp, gvalid, nbytes, 1, 2)
    if EF:
        store_residual(newres_ptr, x_ptr, c, tl.where(bit, pos, neg), e, mask, MANUAL_BF16)


@triton.jit
def sign_elem_kernel(x_ptr, packed_ptr, part_ptr, n, nbytes,
                     STATS: tl.constexpr, ROWS: tl.constexpr, G: tl.constexpr,
                     res_ptr=None, RES: tl.constexpr = False, MANUAL_BF16: tl.constexpr = False):
    """Sign bits (x >= 0) of any tensor, plus per-program partial statistics of the whole
    tensor (STATS: none, absmax with NaN, sum|x|, onebit) at part[pid * 4 + k]. With RES, of x
    corrected by the residual."""
    pid = tl.program_id(0)
    r, e, mask, grp, gvalid = tile(pid, n, 8 * G, ROWS, G)
    _, x = load_corrected(x_ptr, res_ptr, e, mask, RES, MANUAL_BF16)
    bit = mask & (x >= 0)
    store_packed(packed_ptr, bit.to(tl.int32), grp, gvalid, nbytes, 1, 2)
    if STATS == 0:
        m = tl.max(tl.max(tl.max(tl.where(mask, tl.abs(x), float("-inf")), axis=2), axis=1))
        bad = tl.max(tl.max(tl.max((mask & (x != x)).to(tl.int32), axis=2), axis=1))
        tl.store(part_ptr + pid * 4, tl.where(bad > 0, float("nan"), m))
    elif STATS == 2:
        tl.store(part_ptr + pid * 4, tl.sum(row_sum(tl.abs(x))))
    elif STATS == 3:
        tl.store(part_ptr + pid * 4, tl.sum(row_sum(tl.where(bit, x, 0.0))))
        tl.store(part_ptr + pid * 4 + 1, tl.sum(row_sum(tl.where(bit, 0.0, x))))
        pc = tl.sum(tl.sum(tl.sum(bit.to(tl.int32), axis=2), axis=1))
        tl.store(part_ptr + pid * 4 + 2, pc.to(tl.float32))


@device
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
def sign_ef_kernel(x_ptr, stats_ptr, packed_ptr, newres_ptr, n, nbytes,
                   METHOD: tl.constexpr, BS: tl.constexpr, BITS_OUT: tl.constexpr,
                   ROWS: tl.constexpr, G: tl.constexpr, MANUAL_BF16: tl.constexpr,
                   res_ptr=None, RES: tl.constexpr = False):
    """Error feedback of the two-pass sign path, statistics given: the new residual (and, with
    BITS_OUT, the sign bits)."""
    pid = tl.program_id(0)
    r, e, mask, grp, gvalid = tile(pid, n, 8 * G, ROWS, G)
    c, x = load_corrected(x_ptr, res_ptr, e, mask, RES, MANUAL_BF16)
    bit = mask & (x >= 0)
    if BITS_OUT:
        store_packed(packed_ptr, bit.to(tl.int32), grp, gvalid, nbytes, 1, 2)
    dec = _sign_value(bit, stats_ptr, e, mask, METHOD, BS)
    store_residual(newres_ptr, x_ptr, c, dec, e, mask, MANUAL_BF16)


@triton.jit
def sign_decode_kernel(packed_ptr, stats_ptr, out_ptr, n, nbytes,
                       METHOD: tl.constexpr, BS: tl.constexpr, BLOCK: tl.constexpr,
                       MANUAL_BF16: tl.constexpr):
    """signsgd: +-flag; efsignsgd: +-scale[block]; onebit: means[2 block + (bit == 0)]."""
    pid = tl.program_id(0)
    e = pid * BLOCK + tl.arange(0, BLOCK)
    mask = e < n
    bit = load_codes(packed_ptr, e, mask, nbytes, 1) != 0
    out = _sign_value(bit, stats_ptr, e, mask, METHOD, BS)
    tl.store(out_ptr + e, to_out(out, out_ptr, MANUAL_BF16), mask=mask)
