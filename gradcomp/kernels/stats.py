"""Partial block statistics: the first pass of the quantizer and sign encoders' two-pass paths
(`gradcomp.kernels.quantize`, `gradcomp.kernels.sign`), reduced in torch by the callers."""
from __future__ import annotations

import torch

from .jit import stats as K
from .launch import cdiv, elems, launch, p2, res_args, warps

__all__ = ["partials"]


def partials(x: torch.Tensor, mode: int, length: int, nblocks: int,
             aux: torch.Tensor | None = None, res: torch.Tensor | None = None) -> torch.Tensor:
    """(nblocks, chunks per block, 4) float32 statistics `mode` (a `jit.stats.P_*`) of blocks of
    `length` values (of x corrected by the residual `res`, if given)."""
    n = x.numel()
    chunk_max = elems()
    if length <= chunk_max:
        cpb, chunk = 1, max(2, p2(length))
        rows = max(1, chunk_max // chunk)
    else:
        cpb, chunk, rows = cdiv(length, chunk_max), chunk_max, 1
    part = torch.empty(nblocks * cpb * K.NPART, dtype=torch.float32, device=x.device)
    grid = (cdiv(nblocks, rows) * cpb,)
    launch(K.partial_kernel, grid, x, part, part if aux is None else aux, n, length, nblocks,
           cpb, MODE=mode, ROWS=rows, CHUNK=chunk, num_warps=warps(rows * chunk),
           **res_args(x, res))
    return part.view(nblocks, cpb, K.NPART)
