"""Partial block statistics: the first pass of the quantizer and sign encoders' two-pass paths
(`gradcomp.kernels.quantize`, `gradcomp.kernels.sign`), reduced in torch by the callers: the
`@triton.jit` kernel and its launcher `partials` (imports Triton: loaded only by those
launchers)."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import cdiv, elems, launch, p2, res_args, warps
from .tiles import load_corrected

__all__ = ["partials"]

# Statistics of `partial_kernel` (constexpr MODE) and of the sign elem kernel (STATS).
P_NONE, P_ABSMAX, P_MINMAX, P_ABSSUM, P_ONEBIT, P_SUMSQ = -1, 0, 1, 2, 3, 4
NPART = 4  # float32 slots per partial


@triton.jit
def partial_kernel(x_ptr, part_ptr, aux_ptr, n, BS, nblocks, CPB,
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
    _, x = load_corrected(x_ptr, res_ptr, e, mask, RES, MANUAL_BF16)
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


def partials(x: torch.Tensor, mode: int, length: int, nblocks: int,
             aux: torch.Tensor | None = None, res: torch.Tensor | None = None) -> torch.Tensor:
    """(nblocks, chunks per block, 4) float32 statistics `mode` (a `P_*`) of blocks of
    `length` values (of x corrected by the residual `res`, if given)."""
    n = x.numel()
    chunk_max = elems()
    if length <= chunk_max:
        cpb, chunk = 1, max(2, p2(length))
        rows = max(1, chunk_max // chunk)
    else:
        cpb, chunk, rows = cdiv(length, chunk_max), chunk_max, 1
    part = torch.empty(nblocks * cpb * NPART, dtype=torch.float32, device=x.device)
    grid = (cdiv(nblocks, rows) * cpb,)
    launch(partial_kernel, grid, x, part, part if aux is None else aux, n, length, nblocks,
           cpb, MODE=mode, ROWS=rows, CHUNK=chunk, num_warps=warps(rows * chunk),
           **res_args(x, res))
    return part.view(nblocks, cpb, NPART)
