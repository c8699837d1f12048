"""Triton kernels of exact top-k and threshold selection (see `gradcomp.kernels.sparse.launcher`).

Keys: the float32 bit pattern of |x| as int32 (exact for float16/bfloat16 converted to
float32), NaN and +-Inf mapped to the key of +Inf. Non-negative floats order like their bit
patterns, so selecting by magnitude is selecting by integer key.

Top-k is a radix select that reads the input twice:
1. `topk_hist_kernel`: each chunk's 64-bin histogram of `_bin1` (bin 0: zero; bins 2..62:
   one octave each, 2**-39 .. 2**22; bins 1 and 63 catch the rest, NaN and Inf in 63), added
   atomically to the global histogram and stored as suffix counts (keys in bins >= b), bin
   major, so that a chunk's prefix of any bin's counts is one contiguous load.
2. `topk_split_kernel`: every program chooses the bin b1 of the k-th largest key from the
   global histogram; keys above b1 go straight to the output (slots in index order); keys
   in b1 ("candidates") are compacted in index order into a scratch buffer, or, when b1 is
   the zero bin, the first ones go straight to the output. Program 0 writes `state`.
3. `cand_hist_kernel` x 4: radix select over the candidates' keys, digits = key bits 30-23
   (the exponent: known already unless b1 is 1 or 63), 22-15, 14-7, 6-0, each level's
   histogram added atomically; the last level also stores per-block suffix counts.
4. `cand_write_kernel`: the k-th largest key T; candidates > T and the first ones == T (by
   position) go to the output after the keys above b1.
Kernels recompute earlier choices from the histograms in memory, so no host sync and no
torch op but the zeroing of the atomic histograms sits between the launches. The passes over the input use the ballot-based
`tl.histogram` (its cost per element grows with the bins, hence 64 there) and 2-D tiles of
rows of 4 consecutive elements (the scan then runs within threads and the scattered stores
need no layout conversion).

Threshold selection counts (`thr_count_kernel`) and writes (`thr_write_kernel`): two reads.
"""
import triton
import triton.language as tl

from ..launch import interpreting

NB1 = tl.constexpr(64)  # first-level bins
NB = tl.constexpr(256)  # bins of a candidate level
E_BASE = tl.constexpr(86)  # bin = exponent - E_BASE for bins 2..62 (2**-39 .. 2**22)
W = tl.constexpr(4)  # elements per row of a 2-D tile


def _device(fn):
    """@triton.jit for a device helper, except under the interpreter: there it stays a plain
    function run inside the interpreted kernel (the interpreter re-patches triton.language on
    every call of a jit function, ~5 ms, which would dominate the tests)."""
    return fn if interpreting() else triton.jit(fn)


@_device
def _key(x):
    """int32 key of |x|: the float32 bits, NaN and +-Inf -> the bits of +Inf. bfloat16 is
    widened by a shift, which is exact (Triton 3.6's interpreter converts bfloat16
    subnormals to float32 wrongly)."""
    if x.dtype == tl.bfloat16:
        b = (x.to(tl.int16, bitcast=True).to(tl.int32) << 16) & 0x7FFFFFFF
    else:
        b = x.to(tl.float32).to(tl.int32, bitcast=True) & 0x7FFFFFFF
    return tl.minimum(b, 0x7F800000)


@_device
def _bin1(key):
    """First-level bin, monotone in the key: 0 for zero, else exponent - E_BASE clamped to
    [1, 63] (bins 2..62: the octaves of [2**-39, 2**22); 1: smaller; 63: larger, Inf, NaN)."""
    b = tl.minimum(tl.maximum((key >> 23) - E_BASE, 1), NB1 - 1)
    return tl.where(key > 0, b, 0)


@_device
def _choose(h, need):
    """For a histogram `h` of keys (bins ordered like keys) and 1 <= need <= sum(h): the bin b
    holding the need-th largest key, and the count of keys in higher bins."""
    suffix = tl.cumsum(h, 0, reverse=True)  # keys in bins >= b: non-increasing
    sel = suffix >= need  # bins 0 .. b
    return tl.sum(sel.to(tl.int32), 0) - 1, tl.sum(tl.where(sel, 0, h), 0)


@_device
def _cand_prefix(lhist_ptr, need, LEVELS: tl.constexpr):
    """Digits chosen by the first LEVELS candidate levels (as one number) and the count of
    keys still needed among the candidates matching them."""
    bins = tl.arange(0, NB)
    prefix = 0
    for lev in tl.static_range(LEVELS):
        d, gt = _choose(tl.load(lhist_ptr + lev * NB + bins), need)
        prefix = prefix * NB + d
        need = need - gt
    return prefix, need


@_device
def _block(m, TILE: tl.constexpr):
    """[start, end) of this program's contiguous block of m items (whole tiles)."""
    per = tl.cdiv(tl.cdiv(m, tl.num_programs(0)), TILE) * TILE
    start = tl.program_id(0) * per
    return start, tl.minimum(start + per, m)


@_device
def _rows(s, TILE: tl.constexpr):
    """Element indices of a (TILE / W, W) tile starting at s, row-major."""
    return s + tl.arange(0, TILE // W)[:, None] * W + tl.arange(0, W)[None, :]


@_device
def _ranks2(a, b):
    """Exclusive prefix counts (row-major order) and totals of two boolean (R, W) tiles
    (R * W < 2**15): one sum and scan within rows, one scan over rows."""
    both = a.to(tl.int32) + (b.to(tl.int32) << 16)
    rows = tl.sum(both, 1)
    excl = (tl.cumsum(rows, 0) - rows)[:, None] + tl.cumsum(both, 1) - both
    total = tl.sum(rows, 0)
    return excl & 0xFFFF, excl >> 16, total & 0xFFFF, total >> 16


# -- top-k: first level over the whole input ---------------------------------------------------
@triton.jit
def topk_hist_kernel(x_ptr, ghist_ptr, ccum_ptr, n, CHUNK, nchunks, TILE: tl.constexpr):
    """Chunk p's histogram of _bin1: added to ghist (zeroed beforehand); its suffix counts
    -> ccum[b, p] (keys of chunk p in bins >= b)."""
    p = tl.program_id(0)
    s = p * CHUNK
    end = tl.minimum(s + CHUNK, n)
    h = tl.zeros([NB1], dtype=tl.int32)
    while s < end:
        i = s + tl.arange(0, TILE)
        m = i < end
        h += tl.histogram(_bin1(_key(tl.load(x_ptr + i, mask=m, other=0.0))), NB1, mask=m)
        s += TILE
    bins = tl.arange(0, NB1)
    tl.atomic_add(ghist_ptr + bins, h, sem="relaxed")
    tl.store(ccum_ptr + bins * nchunks + p, tl.cumsum(h, 0, reverse=True))


@triton.jit
def topk_split_kernel(x_ptr, vals_ptr, idx_ptr, ckey_ptr, cidx_ptr, state_ptr, lhist_ptr,
                      ghist_ptr, ccum_ptr, n, k, CHUNK, nchunks, TILE: tl.constexpr,
                      PB: tl.constexpr):
    """Chunk p: keys above b1 -> output slots (index order); keys in b1 -> the candidate
    buffer (index order), or straight to the output if b1 is the zero bin. Program 0 writes
    state = [b1, keys above b1, keys of b1 needed, candidates buffered (0 when b1 is the zero
    bin), candidates whose exponent is unknown (b1 in {1, 63}) or 0] and, when the exponent
    is known, its count into level 0 of the (zeroed) candidate histograms lhist."""
    p = tl.program_id(0)
    bins = tl.arange(0, NB1)
    h = tl.load(ghist_ptr + bins)
    b1, gt1 = _choose(h, k)
    need1 = k - gt1
    direct_ok = b1 == 0
    c = tl.arange(0, PB)
    cm = c < p
    incl = tl.sum(tl.load(ccum_ptr + b1 * nchunks + c, mask=cm, other=0), 0)
    a0 = tl.sum(tl.load(ccum_ptr + (b1 + 1) * nchunks + c, mask=cm & (b1 + 1 < NB1), other=0), 0)
    c0 = incl - a0
    if p == 0:
        ncand = tl.sum(tl.where(bins == b1, h, 0), 0)
        clamped = (b1 == 1) | (b1 == NB1 - 1)
        j = tl.arange(0, 8)
        st = tl.where(j == 0, b1, tl.where(j == 1, gt1, tl.where(j == 2, need1, 0)))
        st = tl.where(j == 3, tl.where(b1 > 0, ncand, 0), st)
        st = tl.where(j == 4, tl.where(clamped, ncand, 0), st)
        tl.store(state_ptr + j, st, mask=j < 5)
        tl.store(lhist_ptr + b1 + E_BASE, ncand, mask=(b1 > 1) & (b1 < NB1 - 1))
    s = p * CHUNK
    end = tl.minimum(s + CHUNK, n)
    while s < end:
        i = _rows(s, TILE)
        m = i < end
        xv = tl.load(x_ptr + i, mask=m, other=0.0)
        key = _key(xv)
        b = _bin1(key)
        above = m & (b > b1)
        cand = m & (b == b1)
        ea, ec, na, nc = _ranks2(above, cand)
        rank = c0 + ec
        # a tile-uniform branch: most tiles hold no key above b1 (the stores and their
        # address arithmetic are skipped, not just masked). The same branch around the
        # candidate stores breaks Triton 3.6's layout pass for 16-bit inputs.
        if (na > 0) | (direct_ok & (nc > 0)):
            out = above | (cand & (rank < need1) & direct_ok)
            slot = tl.where(above, a0 + ea, gt1 + rank)
            tl.store(vals_ptr + slot, xv, mask=out)
            tl.store(idx_ptr + slot, i, mask=out)
        buffered = cand & (b1 > 0)
        tl.store(ckey_ptr + rank, key, mask=buffered)
        tl.store(cidx_ptr + rank, i, mask=buffered)
        a0 += na
        c0 += nc
        s += TILE


# -- top-k: radix select over the candidates -------------------------------------------------
@triton.jit
def cand_hist_kernel(ckey_ptr, state_ptr, lhist_ptr, bcum_ptr, LEVEL: tl.constexpr,
                     TILE: tl.constexpr):
    """Candidate level LEVEL (0..3: key bits 30-23, 22-15, 14-7, 6-0) over the candidates
    whose higher digits match the earlier choices, added to lhist[LEVEL] (level 0 only when
    the exponent is unknown). Level 3 also stores, for its block q, bcum[b, q] = the keys
    whose higher digits are above the choices plus the matching ones with digit >= b
    (b = 0..NB; row NB: the former alone)."""
    prefix, need = _cand_prefix(lhist_ptr, tl.load(state_ptr + 2), LEVEL)
    shift = 23 - 8 * LEVEL
    s, end = _block(tl.load(state_ptr + (4 if LEVEL == 0 else 3)), TILE)
    h = tl.zeros([NB], dtype=tl.int32)
    above = 0
    while s < end:
        j = s + tl.arange(0, TILE)
        jm = j < end
        key = tl.load(ckey_ptr + j, mask=jm, other=0)
        if LEVEL == 3:
            high = key >> 7
            h += tl.histogram(key & 127, NB, mask=jm & (high == prefix))
            above += tl.sum((jm & (high > prefix)).to(tl.int32), 0)
        else:
            h += tl.histogram((key >> shift) & (NB - 1), NB,
                              mask=jm & ((key >> (shift + 8)) == prefix))
        s += TILE
    bins = tl.arange(0, NB)
    tl.atomic_add(lhist_ptr + LEVEL * NB + bins, h, sem="relaxed")
    if LEVEL == 3:
        q = tl.program_id(0)
        nq = tl.num_programs(0)
        tl.store(bcum_ptr + bins * nq + q, tl.cumsum(h, 0, reverse=True) + above)
        tl.store(bcum_ptr + NB * nq + q, above)


@triton.jit
def cand_write_kernel(x_ptr, ckey_ptr, cidx_ptr, vals_ptr, idx_ptr, state_ptr, lhist_ptr,
                      bcum_ptr, TILE: tl.constexpr, QB: tl.constexpr):
    """The k-th largest key T; candidates > T and the first ones == T (by position) -> the
    output slots after the keys above b1, in index order."""
    gt1 = tl.load(state_ptr + 1)
    prefix, need = _cand_prefix(lhist_ptr, tl.load(state_ptr + 2), 3)
    d, gt = _choose(tl.load(lhist_ptr + 3 * NB + tl.arange(0, NB)), need)
    need = need - gt
    thr = (prefix << 7) | d
    q = tl.program_id(0)
    nq = tl.num_programs(0)
    rows = tl.arange(0, QB)
    rm = rows < q
    d = tl.maximum(d, 0)  # -1 only when there are no candidates (nothing to write)
    g0 = tl.sum(tl.load(bcum_ptr + (d + 1) * nq + rows, mask=rm, other=0), 0)
    e0 = tl.sum(tl.load(bcum_ptr + d * nq + rows, mask=rm, other=0), 0) - g0
    s, end = _block(tl.load(state_ptr + 3), TILE)
    while s < end:
        j = _rows(s, TILE)
        jm = j < end
        key = tl.load(ckey_ptr + j, mask=jm, other=0)
        gt_ = jm & (key > thr)
        eq_ = jm & (key == thr)
        eg, ee, ng, ne = _ranks2(gt_, eq_)
        eb = e0 + ee
        take = gt_ | (eq_ & (eb < need))
        slot = gt1 + g0 + eg + tl.minimum(eb, need)
        i = tl.load(cidx_ptr + j, mask=take, other=0)
        tl.store(vals_ptr + slot, tl.load(x_ptr + i, mask=take), mask=take)
        tl.store(idx_ptr + slot, i, mask=take)
        g0 += ng
        e0 += ne
        s += TILE


# -- threshold -------------------------------------------------------------------------------
@_device
def _thr_classes(x_ptr, tkey, i, m):
    """(values, non-finite mask, passing finite mask) of elements i."""
    xv = tl.load(x_ptr + i, mask=m, other=0.0)
    key = _key(xv)
    nonfinite = m & (key == 0x7F800000)
    passing = m & (key >= tkey) & (key < 0x7F800000)
    return xv, nonfinite, passing


@triton.jit
def thr_count_kernel(x_ptr, thr_ptr, cnt_ptr, n, CHUNK, nchunks, TILE: tl.constexpr):
    """Chunk p: non-finite count -> cnt[p], passing finite count -> cnt[nchunks + p]."""
    p = tl.program_id(0)
    tkey = tl.load(thr_ptr).to(tl.int32, bitcast=True)
    s = p * CHUNK
    end = tl.minimum(s + CHUNK, n)
    nf = 0
    pf = 0
    while s < end:
        i = s + tl.arange(0, TILE)
        xv, nonfinite, passing = _thr_classes(x_ptr, tkey, i, i < end)
        both = tl.sum(nonfinite.to(tl.int32) + (passing.to(tl.int32) << 16), 0)  # < 2**15 each
        nf += both & 0xFFFF
        pf += both >> 16
        s += TILE
    tl.store(cnt_ptr + p, nf)
    tl.store(cnt_ptr + nchunks + p, pf)


@triton.jit
def thr_write_kernel(x_ptr, thr_ptr, cnt_ptr, vals_ptr, idx_ptr, n, k, CHUNK, nchunks,
                     TILE: tl.constexpr, PB: tl.constexpr):
    """Chunk p: non-finite elements -> slots from 0, passing finite ones -> slots after all
    non-finite ones, both in index order, slots >= k dropped; this program's share of the
    unfilled slots -> value 0 at index 0."""
    p = tl.program_id(0)
    tkey = tl.load(thr_ptr).to(tl.int32, bitcast=True)
    c = tl.arange(0, PB)
    cm = c < nchunks
    nf_all = tl.load(cnt_ptr + c, mask=cm, other=0)
    pf_all = tl.load(cnt_ptr + nchunks + c, mask=cm, other=0)
    total_nf = tl.sum(nf_all, 0)
    filled = tl.minimum(total_nf + tl.sum(pf_all, 0), k)
    nf0 = tl.sum(tl.where(c < p, nf_all, 0), 0)
    pf0 = total_nf + tl.sum(tl.where(c < p, pf_all, 0), 0)
    s = p * CHUNK
    end = tl.minimum(s + CHUNK, n)
    while s < end:
        i = _rows(s, TILE)
        xv, nonfinite, passing = _thr_classes(x_ptr, tkey, i, i < end)
        enf, epf, nnf, npf = _ranks2(nonfinite, passing)
        slot = tl.where(nonfinite, nf0 + enf, pf0 + epf)
        keep = (nonfinite | passing) & (slot < k)
        tl.store(vals_ptr + slot, xv, mask=keep)
        tl.store(idx_ptr + slot, i, mask=keep)
        nf0 += nnf
        pf0 += npf
        s += TILE
    s = filled + p * TILE
    while s < k:
        j = s + tl.arange(0, TILE)
        tl.store(vals_ptr + j, tl.zeros([TILE], dtype=vals_ptr.dtype.element_ty), mask=j < k)
        tl.store(idx_ptr + j, tl.zeros([TILE], dtype=tl.int32), mask=j < k)
        s += nchunks * TILE
