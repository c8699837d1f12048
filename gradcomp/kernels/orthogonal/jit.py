"""Triton kernel of `gradcomp.kernels.orthogonal.launcher`: orthonormal columns for a batch of
tall-skinny float32 matrices, one program per matrix (imported only on demand; see
`gradcomp.kernels.tiles` for TRITON_INTERPRET).

A matrix is n x r, row-major at `base` (element (i, j) at base + i * r + j). A program holds
row tiles of shape (CHUNK, RP), RP >= r a power of two (columns past r are masked). When n <=
CHUNK the whole matrix stays in registers (one load, one store); otherwise every column step
loops over row chunks in memory. All sums are float32; division and square root are IEEE
(`div_rn`, `sqrt_rn`).

Two modes, chosen per matrix as the torch reference chooses (r <= 2: Gram-Schmidt, else QR):
* Gram-Schmidt (r <= 2): torch's `_orthogonalize_gram_schmidt` step for step: column i /=
  (norm + eps), then each later column -= (its dot with column i) * column i. A zero column
  with eps = 0 gives NaN, a NaN/Inf spreads to the later columns, as in torch.
* QR-like (r > 2): modified Gram-Schmidt with one re-orthogonalisation of each column against
  the earlier ones ("twice is enough": Giraud, Langou and Rozloznik, Comput. Math. Appl. 2005),
  so the columns are orthonormal to float32 rounding even for rank-deficient input, as
  Householder QR's are; eps is not used (QR ignores it). A column that is exactly zero after
  projection (a zero matrix, a repeated column) is replaced by the unit vector e_k of the row k
  where the earlier columns are smallest (sum of squares), projected out twice and normalised:
  a finite orthonormal completion, as QR gives one (QR's own choice of it may differ).
  NaN/Inf in a column spreads to it and the later columns.
With FIX, a matrix holding any NaN/Inf is first replaced by the first r columns of the identity
(PowerSGD's warm-start recovery).
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..tiles import device


@device
def _col(t, cols, i):
    """Column i of a (rows, RP) tile (exactly: one value per row is kept)."""
    return tl.sum(tl.where(cols[None, :] == i, t, 0.0), axis=1)


@device
def _nonfinite(t, mask):
    """How many entries of t under mask are NaN or +-Inf."""
    return tl.sum(tl.sum(tl.where(mask & ((t != t) | (tl.abs(t) == float("inf"))), 1, 0),
                         axis=1), axis=0)


@device
def _zero():
    """A 0-d int32 zero: the start of a loop over a runtime bound (Triton's interpreter cannot
    iterate `range` over a run-time bound, a while loop works in both)."""
    return tl.full((), 0, tl.int32)


@device
def _unit(v, d):
    """v / d, IEEE-rounded, for a scalar d."""
    return tl.math.div_rn(v, tl.zeros_like(v) + d)


# -- the whole matrix in registers -----------------------------------------------------------
@device
def _tile_project(a, c, cols, i):
    """c minus its projection on the columns j < i of the tile a (all dots, then one update)."""
    prev = cols[None, :] < i
    s = tl.sum(tl.where(prev, a * c[:, None], 0.0), axis=0)
    return c - tl.sum(tl.where(prev, a * s[None, :], 0.0), axis=1)


@device
def _tile_complete(a, rows, cols, i, n):
    """An unnormalised completion of column i: e_k (k the row where the columns j < i are
    smallest) with the columns j < i projected out twice."""
    lev = tl.sum(tl.where(cols[None, :] < i, a * a, 0.0), axis=1)
    lev = tl.where(rows < n, lev, float("inf"))
    k = tl.argmin(lev, axis=0)
    c = tl.where(rows == k, 1.0, 0.0)
    c = _tile_project(a, c, cols, i)
    return _tile_project(a, c, cols, i)


@device
def _tile_orthogonalize(base, n, r, eps, FIX: tl.constexpr, CHUNK: tl.constexpr,
                        RP: tl.constexpr):
    rows = tl.arange(0, CHUNK)
    cols = tl.arange(0, RP)
    mask = (rows[:, None] < n) & (cols[None, :] < r)
    ptrs = base + rows[:, None] * r + cols[None, :]
    a = tl.load(ptrs, mask=mask, other=0.0)
    if FIX:
        if _nonfinite(a, mask) > 0:
            a = tl.where(mask & (rows[:, None] == cols[None, :]), 1.0, 0.0)
    qr = r > 2
    i = _zero()
    while i < r:
        sel = cols[None, :] == i
        later = (cols[None, :] > i) & (cols[None, :] < r)
        c = tl.sum(tl.where(sel, a, 0.0), axis=1)
        if qr:
            c = _tile_project(a, c, cols, i)
            nrm2 = tl.sum(c * c, axis=0)
            if nrm2 == 0.0:
                c = _tile_complete(a, rows, cols, i, n)
                nrm2 = tl.sum(c * c, axis=0)
            d = tl.math.sqrt_rn(nrm2)
        else:
            d = tl.math.sqrt_rn(tl.sum(c * c, axis=0)) + eps
        q = _unit(c, d)
        a = tl.where(sel, q[:, None], a)
        g = tl.sum(tl.where(later, a * q[:, None], 0.0), axis=0)
        a = tl.where(later, a - g[None, :] * q[:, None], a)
        i += 1
    tl.store(ptrs, a, mask=mask)


# -- row chunks in memory --------------------------------------------------------------------
@device
def _chunk_complete(base, n, r, i, rows0, cols, CHUNK: tl.constexpr, RP: tl.constexpr):
    """`_tile_complete` over row chunks: writes column i, returns its dots with the columns
    j >= i (entry i: its squared norm)."""
    cmask = cols[None, :] < r
    prev = cols[None, :] < i
    sel = cols[None, :] == i
    best = tl.full((), float("inf"), tl.float32)
    k = _zero()
    start = _zero()
    while start < n:
        rows = start + rows0
        mask = (rows[:, None] < n) & cmask
        t = tl.load(base + rows[:, None] * r + cols[None, :], mask=mask, other=0.0)
        lev = tl.where(rows < n, tl.sum(tl.where(prev, t * t, 0.0), axis=1), float("inf"))
        m = tl.min(lev, axis=0)
        am = tl.argmin(lev, axis=0).to(tl.int32) + start
        take = m < best
        best = tl.where(take, m, best)
        k = tl.where(take, am, k)
        start += CHUNK
    s = tl.load(base + k * r + cols, mask=cols < i, other=0.0)  # dots of e_k: row k
    s2 = tl.zeros([RP], dtype=tl.float32)
    start = _zero()
    while start < n:
        rows = start + rows0
        mask = (rows[:, None] < n) & cmask
        ptrs = base + rows[:, None] * r + cols[None, :]
        t = tl.load(ptrs, mask=mask, other=0.0)
        c = tl.where(rows == k, 1.0, 0.0) - tl.sum(tl.where(prev, t * s[None, :], 0.0), axis=1)
        t = tl.where(sel, c[:, None], t)
        tl.store(ptrs, t, mask=mask & sel)
        s2 += tl.sum(tl.where(prev, t * c[:, None], 0.0), axis=0)
        start += CHUNK
    g = tl.zeros([RP], dtype=tl.float32)
    start = _zero()
    while start < n:
        rows = start + rows0
        mask = (rows[:, None] < n) & cmask
        ptrs = base + rows[:, None] * r + cols[None, :]
        t = tl.load(ptrs, mask=mask, other=0.0)
        c = _col(t, cols, i) - tl.sum(tl.where(prev, t * s2[None, :], 0.0), axis=1)
        t = tl.where(sel, c[:, None], t)
        tl.store(ptrs, t, mask=mask & sel)
        g += tl.sum(tl.where((cols[None, :] >= i) & cmask, t * c[:, None], 0.0), axis=0)
        start += CHUNK
    return g


@device
def _chunk_orthogonalize(base, n, r, eps, FIX: tl.constexpr, CHUNK: tl.constexpr,
                         RP: tl.constexpr):
    """The same steps as `_tile_orthogonalize`, two passes over the rows per column: (QR mode)
    re-orthogonalise column i and take its dots with the later columns, then normalise it,
    update the later columns and take the next column's dots (Gram-Schmidt: its Gram row; QR:
    its dots with the finished columns). Dots with column i are (c_i . c_k) / d here, not
    (c_i / d) . c_k: equal up to rounding."""
    rows0 = tl.arange(0, CHUNK)
    cols = tl.arange(0, RP)
    cmask = cols[None, :] < r
    if FIX:
        bad = _zero()
        start = _zero()
        while start < n:
            rows = start + rows0
            mask = (rows[:, None] < n) & cmask
            t = tl.load(base + rows[:, None] * r + cols[None, :], mask=mask, other=0.0)
            bad += _nonfinite(t, mask)
            start += CHUNK
        if bad > 0:
            start = _zero()
            while start < n:
                rows = start + rows0
                mask = (rows[:, None] < n) & cmask
                tl.store(base + rows[:, None] * r + cols[None, :],
                         tl.where(rows[:, None] == cols[None, :], 1.0, 0.0), mask=mask)
                start += CHUNK
    qr = r > 2
    acc = tl.zeros([RP], dtype=tl.float32)
    if not qr:  # Gram row of column 0
        start = _zero()
        while start < n:
            rows = start + rows0
            mask = (rows[:, None] < n) & cmask
            t = tl.load(base + rows[:, None] * r + cols[None, :], mask=mask, other=0.0)
            acc += tl.sum(tl.where(cmask, t * _col(t, cols, 0)[:, None], 0.0), axis=0)
            start += CHUNK
    i = _zero()
    while i < r:
        sel = cols[None, :] == i
        later = (cols[None, :] > i) & cmask
        if qr:  # acc: dots of column i with columns j < i
            g = tl.zeros([RP], dtype=tl.float32)
            start = _zero()
            while start < n:
                rows = start + rows0
                mask = (rows[:, None] < n) & cmask
                ptrs = base + rows[:, None] * r + cols[None, :]
                t = tl.load(ptrs, mask=mask, other=0.0)
                c = _col(t, cols, i) - tl.sum(tl.where(cols[None, :] < i, t * acc[None, :], 0.0),
                                              axis=1)
                t = tl.where(sel, c[:, None], t)
                tl.store(ptrs, t, mask=mask & sel)
                g += tl.sum(tl.where((cols[None, :] >= i) & cmask, t * c[:, None], 0.0), axis=0)
                start += CHUNK
            nrm2 = tl.sum(tl.where(cols == i, g, 0.0), axis=0)
            if nrm2 == 0.0:
                g = _chunk_complete(base, n, r, i, rows0, cols, CHUNK, RP)
                nrm2 = tl.sum(tl.where(cols == i, g, 0.0), axis=0)
            d = tl.math.sqrt_rn(nrm2)
        else:  # acc: dots of column i with columns j >= i
            g = acc
            d = tl.math.sqrt_rn(tl.sum(tl.where(cols == i, g, 0.0), axis=0)) + eps
        coef = tl.where(cols > i, _unit(g, d), 0.0)
        acc = tl.zeros([RP], dtype=tl.float32)
        start = _zero()
        while start < n:
            rows = start + rows0
            mask = (rows[:, None] < n) & cmask
            ptrs = base + rows[:, None] * r + cols[None, :]
            t = tl.load(ptrs, mask=mask, other=0.0)
            q = _unit(_col(t, cols, i), d)
            t = tl.where(sel, q[:, None], t)
            t = tl.where(later, t - coef[None, :] * q[:, None], t)
            tl.store(ptrs, t, mask=mask & (cols[None, :] >= i))
            nxt = _col(t, cols, i + 1)
            if qr:
                acc += tl.sum(tl.where(cols[None, :] <= i, t * nxt[:, None], 0.0), axis=0)
            else:
                acc += tl.sum(tl.where(later, t * nxt[:, None], 0.0), axis=0)
            start += CHUNK
        i += 1


@triton.jit
def orthogonalize_kernel(x_ptr, table_ptr, n_all, r_all, eps, UNIFORM: tl.constexpr,
                         FIX: tl.constexpr, CHUNK: tl.constexpr, RP: tl.constexpr):
    """Program p orthonormalises matrix p: with UNIFORM, the p-th n_all x r_all matrix of a
    contiguous batch; else the matrix at element offset table[p, 0] with table[p, 1] rows and
    table[p, 2] columns (int64 table)."""
    pid = tl.program_id(0)
    if UNIFORM:
        n = n_all
        r = r_all
        base = x_ptr + pid.to(tl.int64) * n_all * r_all
    else:
        base = x_ptr + tl.load(table_ptr + 3 * pid)
        n = tl.load(table_ptr + 3 * pid + 1).to(tl.int32)
        r = tl.load(table_ptr + 3 * pid + 2).to(tl.int32)
    if n <= CHUNK:
        _tile_orthogonalize(base, n, r, eps, FIX, CHUNK, RP)
    else:
        _chunk_orthogonalize(base, n, r, eps, FIX, CHUNK, RP)
