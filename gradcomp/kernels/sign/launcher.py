"""The sign compressors' kernels: `sign_encode(x, method, block_size)` and `sign_decode` for
signsgd, efsignsgd and onebit (and one pair of wrappers per method), each returning exactly
the wire tensors of `compressor(method)`; `sign_encode_ef` fuses error feedback. Exactness,
inputs and error feedback as in `gradcomp.kernels.quantize` (efsignsgd's and onebit's means
are sums: they agree to float32 rounding).
"""
from __future__ import annotations

import math

import torch

from ..blocks import block_counts, layout
from ..launch import (bf16_fix, cdiv, check_block_size, dec_block, ef_args, ef_inputs, elem_cfg,
                     fused_block_size, launch, res_args, rows_cfg)
from ..stats import NPART, P_ABSMAX, P_ABSSUM, P_NONE, P_ONEBIT, partials
from . import jit as K

__all__ = [
    "sign_encode", "sign_decode", "sign_encode_ef", "signsgd_encode", "signsgd_decode",
    "efsignsgd_encode", "efsignsgd_decode", "onebit_encode", "onebit_decode",
]

_F32 = torch.float32
_U8 = torch.uint8

_SIGN_METHODS = {"signsgd": K.SIGN, "efsignsgd": K.EFSIGN, "onebit": K.ONEBIT}


def _sign_method(method: str) -> int:
    if method not in _SIGN_METHODS:
        raise ValueError(f"method={method!r} is not allowed: choose one of "
                         f"{', '.join(map(repr, _SIGN_METHODS))}")
    return _SIGN_METHODS[method]


def _onebit_means(pos_sum, neg_sum, pos_count, counts):
    """The reference's float32 finishing of onebit's per-block statistics."""
    neg_count = counts - pos_count
    means = torch.stack([pos_sum / pos_count.clamp_min(1), neg_sum / neg_count.clamp_min(1)],
                        dim=1)
    return means.reshape(-1)


def sign_encode(x: torch.Tensor, method: str, block_size: int = 0):
    """Sign bits (x >= 0, packed MSB first) and statistics as `compressor(method)`:
    signsgd: one float32 flag (1.0, or NaN if any value is non-finite); efsignsgd: mean |x| per
    block; onebit: (mean of x >= 0, mean of the rest) per block, interleaved. block_size 0 is
    the whole tensor (signsgd ignores block_size)."""
    return _sign_encode(x, method, block_size)


def sign_encode_ef(x: torch.Tensor, residual: torch.Tensor | None, method: str,
                   block_size: int = 0):
    """`sign_encode` with error feedback fused: (packed bits, statistics, new residual). The
    two-pass path (whole tensor, or block sizes the fused kernel does not take) computes the
    statistics first and the residual (and bits) in a second pass over x and the residual."""
    return _sign_encode(x, method, block_size, True, residual)


def _sign_encode(x, method, block_size, ef=False, residual=None):
    m = _sign_method(method)
    block_size = 0 if m == K.SIGN else check_block_size(block_size, allow_zero=True)
    flat, res, newres = ef_inputs(x, residual, ef)
    n = flat.numel()
    nbytes = (n + 7) // 8
    packed = torch.empty(nbytes, dtype=_U8, device=flat.device)
    nblocks, length = layout(n, block_size)
    if block_size and fused_block_size(block_size, 1):
        stats = torch.empty(nblocks * (2 if m == K.ONEBIT else 1), dtype=_F32,
                            device=flat.device)
        rows, g, warps = rows_cfg(block_size)
        launch(K.sign_rows_kernel, (cdiv(nblocks, rows),), flat, packed, stats, n, nblocks,
               nbytes, METHOD=m, BS=block_size, ROWS=rows, G=g, num_warps=warps,
               **ef_args(flat, res, newres))
        return (packed, stats, newres) if ef else (packed, stats)
    rows, g, warps = elem_cfg()
    nprog = cdiv(n, rows * g * 8)
    whole = block_size == 0 or nblocks == 1
    mode = {K.SIGN: P_ABSMAX, K.EFSIGN: P_ABSSUM, K.ONEBIT: P_ONEBIT}[m]
    if whole or not ef:  # bits (and the whole tensor's partial statistics)
        part = torch.empty(nprog * NPART, dtype=_F32, device=flat.device)
        launch(K.sign_elem_kernel, (nprog,), flat, packed, part, n, nbytes,
               STATS=mode if whole else P_NONE, ROWS=rows, G=g, num_warps=warps,
               **res_args(flat, res))
    # (1, programs, 4) for the whole tensor, else (blocks, chunks, 4) from a second pass.
    part = part.view(1, nprog, NPART) if whole else partials(flat, mode, length, nblocks,
                                                             res=res)
    stats = _sign_stats(m, part, n, nblocks, length)
    if ef:  # the residual given the statistics (and the bits where not yet written)
        launch(K.sign_ef_kernel, (nprog,), flat, stats, packed, newres, n, nbytes, METHOD=m,
               BS=block_size, BITS_OUT=not whole, ROWS=rows, G=g, num_warps=warps,
               **dict(res_args(flat, res), MANUAL_BF16=bf16_fix(flat.dtype)))
        return packed, stats, newres
    return packed, stats


def _sign_stats(m, part, n, nblocks, length):
    """The wire statistics of sign method `m` from (blocks, chunks, 4) partial statistics."""
    if m == K.SIGN:
        amax = part[..., 0].amax()
        return torch.where(torch.isfinite(amax), 1.0, math.nan).to(_F32).reshape(1)
    counts = block_counts(n, nblocks, length, _F32, part.device)
    if m == K.EFSIGN:
        return part[..., 0].sum(dim=1) / counts.clamp_min(1)
    pos_count = part[..., 2].to(torch.int64).sum(dim=1).to(_F32)
    return _onebit_means(part[..., 0].sum(dim=1), part[..., 1].sum(dim=1), pos_count, counts)


def sign_decode(packed, stats, numel, method: str, block_size: int = 0, dtype=_F32):
    """Inverse of `sign_encode`: signsgd +-flag, efsignsgd +-scale, onebit the group means."""
    m = _sign_method(method)
    block_size = 0 if m == K.SIGN else check_block_size(block_size, allow_zero=True)
    out = torch.empty(numel, dtype=dtype, device=packed.device)
    if numel:
        block = dec_block()
        launch(K.sign_decode_kernel, (cdiv(numel, block),), packed.contiguous(),
               stats.to(_F32).contiguous(), out, numel, packed.numel(), METHOD=m,
               BS=block_size, BLOCK=block, MANUAL_BF16=bf16_fix(dtype), num_warps=4)
    return out


def signsgd_encode(x):
    return sign_encode(x, "signsgd")


def signsgd_decode(packed, flag, numel, dtype=_F32):
    return sign_decode(packed, flag, numel, "signsgd", 0, dtype)


def efsignsgd_encode(x, block_size=0):
    return sign_encode(x, "efsignsgd", block_size)


def efsignsgd_decode(packed, scales, numel, block_size=0, dtype=_F32):
    return sign_decode(packed, scales, numel, "efsignsgd", block_size, dtype)


def onebit_encode(x, block_size=0):
    return sign_encode(x, "onebit", block_size)


def onebit_decode(packed, means, numel, block_size=0, dtype=_F32):
    return sign_decode(packed, means, numel, "onebit", block_size, dtype)
