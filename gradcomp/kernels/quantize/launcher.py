"""The quantizers' kernels (int8/int4, QSGD, TernGrad, natural compression): each encoder returns
exactly the wire tensors of the matching compressor in `gradcomp.compressors` (same layout,
same dtypes), and each decoder takes them back. What this docstring says about inputs,
exactness and fused error feedback holds for `gradcomp.kernels.sign` too.

Imported lazily by `gradcomp.kernels` (this module imports Triton). Inputs are float32, float16
or bfloat16 tensors on a CUDA device, or on the CPU when Triton's interpreter is on
(TRITON_INTERPRET=1 before the first import). Use `gradcomp.kernels.supports(x)` to ask.

Exactness (round to nearest): codes, scales and decoded values equal the torch reference run on
the same device bit for bit, except
* where the reference sums (QSGD's norm, efsignsgd's and onebit's means): the summation order
  differs, so those statistics agree to float32 rounding, and QSGD codes may differ by one
  level where a value sits on a rounding boundary;
* the sign of a zero minimum/maximum of a minmax block holding both 0.0 and -0.0 (unspecified;
  torch's CPU and CUDA reductions differ there too), and so that of its decoded zeros.
Stochastic rounding uses Triton's Philox generator (`tl.rand(seed, element index)`): unbiased,
deterministic for a given seed, but not the same draws as torch's generator.

Error feedback fused (`*_encode_ef(x, residual, ...)`): the encoders read the float32
`residual` beside x (None: the first step, corrected = x) and return the wire tensors of the
plain encoder run on ``corrected = (residual + x).to(x.dtype)`` and the new float32 residual
``corrected - decode(wire)`` with NaN/+-Inf set to 0, bit for bit as `ErrorFeedback` computes
them around the plain encoder (same kernels, tiles, reduction order and seed), never storing
the corrected or decoded values. Fused block sizes: one kernel reads gradient + residual and
writes codes + residual (4 passes of memory traffic instead of ~9); the two-pass paths read
gradient + residual once more (statistics first, or for whole-tensor sign methods a second
pass for the residual once the statistics are known).
"""
from __future__ import annotations

import torch

from ..blocks import layout
from ..launch import (SUPPORTED_DTYPES, bf16_fix, cdiv, check_block_size, dec_block, ef_args,
                     ef_inputs, elem_cfg, fused_block_size, inv, launch, p2, rows_cfg)
from ..stats import P_ABSMAX, P_MINMAX, P_SUMSQ, partials
from . import jit as K

__all__ = [
    "int_encode", "int_decode", "int8_encode", "int8_decode", "int4_encode", "int4_decode",
    "qsgd_encode", "qsgd_decode", "terngrad_encode", "terngrad_decode",
    "natural_encode", "natural_decode",
    "int_encode_ef", "qsgd_encode_ef", "terngrad_encode_ef", "natural_encode_ef",
]

_F32 = torch.float32
_U8 = torch.uint8


def _seed(seed, device) -> torch.Tensor:
    if isinstance(seed, torch.Tensor):
        return seed.reshape(-1)[:1].to(device=device, dtype=torch.int64)
    return torch.tensor([int(seed)], dtype=torch.int64, device=device)


def _recip(t: torch.Tensor) -> bool:
    return t.is_cuda


# -- int8 / int4 / qsgd / terngrad -----------------------------------------------------------
def _quant_encode(x, method, bits, block_size, levels, inverse, stochastic, seed, stat_fn,
                  ef=False, residual=None):
    """Shared driver: the fused rows kernel where the layout allows, else statistics by
    `stat_fn(flat, length, nblocks, res)` and the elem kernel. With `ef`, error feedback with
    `residual` (None: the first step), and the new residual returned third."""
    flat, res, newres = ef_inputs(x, residual, ef)
    n = flat.numel()
    nblocks, length = layout(n, block_size)
    nbytes = (n * bits + 7) // 8
    packed = torch.empty(nbytes, dtype=_U8, device=flat.device)
    seed_t = _seed(seed, flat.device) if stochastic else packed  # not read when not STOCH
    common = dict(METHOD=method, BITS=bits, BP2=max(2, p2(bits)), LEVELS=levels, INV=inverse,
                  RECIP=_recip(flat), STOCH=stochastic)
    if block_size and fused_block_size(block_size, bits):
        nstats = 2 * nblocks if method == K.MINMAX else nblocks
        stats = torch.empty(nstats, dtype=_F32, device=flat.device)
        rows, g, warps = rows_cfg(block_size)
        launch(K.quant_rows_kernel, (cdiv(nblocks, rows),), flat, packed, stats, seed_t, n,
               nblocks, nbytes, BS=block_size, ROWS=rows, G=g, num_warps=warps, **common,
               **ef_args(flat, res, newres))
    else:
        stats = stat_fn(flat, length, nblocks, res).to(_F32).contiguous()
        rows, g, warps = elem_cfg()
        launch(K.quant_elem_kernel, (cdiv(n, rows * g * 8),), flat, packed, stats, seed_t, n,
               nblocks, nbytes, BS=block_size, ROWS=rows, G=g, num_warps=warps, **common,
               **ef_args(flat, res, newres))
    return (packed, stats, newres) if ef else (packed, stats)


def _quant_decode(packed, stats, numel, method, bits, block_size, levels, inverse, dtype):
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype {dtype} is not supported by the kernels")
    nblocks, _ = layout(numel, block_size)
    out = torch.empty(numel, dtype=dtype, device=packed.device)
    if numel == 0:
        return out
    block = dec_block()
    launch(K.quant_decode_kernel, (cdiv(numel, block),), packed.contiguous(),
           stats.to(_F32).contiguous(), out, numel, nblocks, packed.numel(), METHOD=method,
           BS=block_size, BLOCK=block, BITS=bits, LEVELS=levels, INV=inverse,
           RECIP=_recip(packed), MANUAL_BF16=bf16_fix(dtype), num_warps=4)
    return out


def _quant_decode_mean(rows, at, numel, method, bits, block_size, levels, inverse, out):
    """The float32 mean of the payloads held one per row of `rows` (uint8; in each row the
    codes start at byte at[0] and the float32 statistics at byte at[1]), written into `out`
    (float32, `numel` values): bit for bit the decode of each, summed in row order and divided
    by the number of rows, in one launch."""
    if (rows.dim() != 2 or rows.stride(1) != 1 or rows.stride(0) % 4 or at[1] % 4
            or rows.storage_offset() % 4):
        raise ValueError("rows must be a 2-D uint8 tensor of 4-byte aligned rows and at[1] a "
                         "multiple of 4")
    if out.dtype != _F32 or not out.is_contiguous() or out.numel() != numel:
        raise ValueError(f"out must be a contiguous float32 tensor of {numel} values")
    if numel == 0:
        return out
    nblocks, _ = layout(numel, block_size)
    stats = rows.view(_F32)
    block = dec_block()
    world = rows.shape[0]
    launch(K.quant_decode_mean_kernel, (cdiv(numel, block),), rows[:, at[0]:],
           stats[:, at[1] // 4:], out, numel, nblocks, (numel * bits + 7) // 8, rows.stride(0),
           stats.stride(0), W=world, METHOD=method, BS=block_size, BLOCK=block, BITS=bits,
           LEVELS=levels, INV=inverse, RECIP=_recip(rows), W_INV=inv(world))
    return out


def _amax(flat, length, nblocks, res=None):
    return partials(flat, P_ABSMAX, length, nblocks, res=res)[..., 0].amax(dim=1)


def int_encode(x: torch.Tensor, bits: int, block_size: int = 256, scheme: str = "absmax",
               stochastic: bool = False, seed=0) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-wise `bits`-bit quantization (8 or 4) of `x`, as `compressor("int8"/"int4")`:
    returns (packed codes, float32 scales). absmax: codes q + qmax, one scale max|x| / qmax per
    block; minmax: codes 0..2**bits-1, scales = minima of all blocks then their maxima."""
    return _int_encode(x, bits, block_size, scheme, stochastic, seed)


def int_encode_ef(x: torch.Tensor, residual: torch.Tensor | None, bits: int,
                  block_size: int = 256, scheme: str = "absmax", stochastic: bool = False,
                  seed=0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`int_encode` with error feedback fused (see the module docstring): (packed codes,
    scales, new float32 residual)."""
    return _int_encode(x, bits, block_size, scheme, stochastic, seed, True, residual)


def _int_encode(x, bits, block_size, scheme, stochastic, seed, ef=False, residual=None):
    if bits not in (8, 4):
        raise ValueError(f"bits={bits!r} is not allowed: choose one of 8, 4")
    if scheme not in ("absmax", "minmax"):
        raise ValueError(f"scheme={scheme!r} is not allowed: choose one of 'absmax', 'minmax'")
    block_size = check_block_size(block_size)
    if scheme == "absmax":
        qmax = (1 << (bits - 1)) - 1

        def stats(flat, length, nblocks, res):
            return _amax(flat, length, nblocks, res) / qmax

        return _quant_encode(x, K.ABSMAX, bits, block_size, qmax, inv(qmax), stochastic, seed,
                             stats, ef, residual)
    top = (1 << bits) - 1

    def stats(flat, length, nblocks, res):
        part = partials(flat, P_MINMAX, length, nblocks, res=res)
        return torch.cat([part[..., 0].amin(dim=1), part[..., 1].amax(dim=1)])

    return _quant_encode(x, K.MINMAX, bits, block_size, top, inv(0.5 * top), stochastic, seed,
                         stats, ef, residual)


def int_decode(packed: torch.Tensor, scales: torch.Tensor, numel: int, bits: int,
               block_size: int = 256, scheme: str = "absmax",
               dtype: torch.dtype = _F32) -> torch.Tensor:
    """Inverse of `int_encode`: `numel` values of `dtype`."""
    block_size = check_block_size(block_size)
    if scheme == "absmax":
        qmax = (1 << (bits - 1)) - 1
        return _quant_decode(packed, scales, numel, K.ABSMAX, bits, block_size, qmax,
                             inv(qmax), dtype)
    top = (1 << bits) - 1
    return _quant_decode(packed, scales, numel, K.MINMAX, bits, block_size, top,
                         inv(0.5 * top), dtype)


def int_decode_mean(rows, at, numel, bits, block_size=256, scheme="absmax", out=None):
    """The mean of `int_decode` of the payloads held one per row of `rows` (see
    `_quant_decode_mean`), float32, in one launch."""
    block_size = check_block_size(block_size)
    out = _mean_out(rows, numel, out)
    if scheme == "absmax":
        qmax = (1 << (bits - 1)) - 1
        return _quant_decode_mean(rows, at, numel, K.ABSMAX, bits, block_size, qmax, inv(qmax),
                                  out)
    top = (1 << bits) - 1
    return _quant_decode_mean(rows, at, numel, K.MINMAX, bits, block_size, top, inv(0.5 * top),
                              out)


def _mean_out(rows, numel, out):
    return torch.empty(numel, dtype=_F32, device=rows.device) if out is None else out


def int8_encode(x, block_size=256, scheme="absmax", stochastic=False, seed=0):
    return int_encode(x, 8, block_size, scheme, stochastic, seed)


def int8_decode(packed, scales, numel, block_size=256, scheme="absmax", dtype=_F32):
    return int_decode(packed, scales, numel, 8, block_size, scheme, dtype)


def int4_encode(x, block_size=256, scheme="absmax", stochastic=False, seed=0):
    return int_encode(x, 4, block_size, scheme, stochastic, seed)


def int4_decode(packed, scales, numel, block_size=256, scheme="absmax", dtype=_F32):
    return int_decode(packed, scales, numel, 4, block_size, scheme, dtype)


def _qsgd_bits(levels: int) -> int:
    if not isinstance(levels, int) or not 1 <= levels <= 127:
        raise ValueError(f"levels={levels!r} is not allowed: levels must be an integer in "
                         "[1, 127]")
    return 1 + levels.bit_length()


def qsgd_encode(x: torch.Tensor, levels: int = 15, block_size: int = 512,
                stochastic: bool = True, seed=0) -> tuple[torch.Tensor, torch.Tensor]:
    """QSGD as `compressor("qsgd")`: (packed sign+level codes, float32 norm per block)."""
    return _qsgd_encode(x, levels, block_size, stochastic, seed)


def qsgd_encode_ef(x: torch.Tensor, residual: torch.Tensor | None, levels: int = 15,
                   block_size: int = 512, stochastic: bool = True, seed=0):
    """`qsgd_encode` with error feedback fused: (packed codes, norms, new float32 residual)."""
    return _qsgd_encode(x, levels, block_size, stochastic, seed, True, residual)


def _qsgd_encode(x, levels, block_size, stochastic, seed, ef=False, residual=None):
    bits = _qsgd_bits(levels)
    block_size = check_block_size(block_size)

    def stats(flat, length, nblocks, res):
        amax = _amax(flat, length, nblocks, res)
        unit = torch.where((amax > 0) & torch.isfinite(amax), amax, torch.ones_like(amax))
        ss = partials(flat, P_SUMSQ, length, nblocks, aux=unit.contiguous(),
                      res=res)[..., 0].sum(1)
        return ss.sqrt() * unit

    return _quant_encode(x, K.QSGD, bits, block_size, levels, inv(levels), stochastic, seed,
                         stats, ef, residual)


def qsgd_decode(packed, norms, numel, levels=15, block_size=512, dtype=_F32):
    bits = _qsgd_bits(levels)
    return _quant_decode(packed, norms, numel, K.QSGD, bits, check_block_size(block_size), levels,
                         inv(levels), dtype)


def qsgd_decode_mean(rows, at, numel, levels=15, block_size=512, out=None):
    """The mean of `qsgd_decode` of the payloads held one per row of `rows`, in one launch."""
    return _quant_decode_mean(rows, at, numel, K.QSGD, _qsgd_bits(levels),
                              check_block_size(block_size), levels, inv(levels),
                              _mean_out(rows, numel, out))


def terngrad_encode(x: torch.Tensor, block_size: int = 0, seed=0):
    """TernGrad as `compressor("terngrad")`: (packed 2-bit codes, float32 max|x| per block;
    block_size 0 = the whole tensor). Always stochastic."""
    block_size = check_block_size(block_size, allow_zero=True)
    return _quant_encode(x, K.TERN, 2, block_size, 1, 1.0, True, seed, _amax)


def terngrad_encode_ef(x: torch.Tensor, residual: torch.Tensor | None, block_size: int = 0,
                       seed=0):
    """`terngrad_encode` with error feedback fused: (packed codes, scales, new residual)."""
    block_size = check_block_size(block_size, allow_zero=True)
    return _quant_encode(x, K.TERN, 2, block_size, 1, 1.0, True, seed, _amax, True, residual)


def terngrad_decode(packed, scales, numel, block_size=0, dtype=_F32):
    return _quant_decode(packed, scales, numel, K.TERN, 2,
                         check_block_size(block_size, allow_zero=True), 1, 1.0, dtype)


def terngrad_decode_mean(rows, at, numel, block_size=0, out=None):
    """The mean of `terngrad_decode` of the payloads held one per row of `rows`, in one
    launch."""
    return _quant_decode_mean(rows, at, numel, K.TERN, 2,
                              check_block_size(block_size, allow_zero=True), 1, 1.0,
                              _mean_out(rows, numel, out))


# -- natural compression ---------------------------------------------------------------------
def natural_encode(x: torch.Tensor, seed=0) -> tuple[torch.Tensor, torch.Tensor]:
    """Natural compression as `compressor("natural")`: (packed sign bits, uint8 exponents)."""
    return _natural_encode(x, seed)


def natural_encode_ef(x: torch.Tensor, residual: torch.Tensor | None, seed=0):
    """`natural_encode` with error feedback fused: (packed signs, exponents, new residual)."""
    return _natural_encode(x, seed, True, residual)


def _natural_encode(x, seed, ef=False, residual=None):
    cap = 127 + 15 if x.dtype == torch.float16 else 254
    flat, res, newres = ef_inputs(x, residual, ef)
    n = flat.numel()
    nbytes = (n + 7) // 8
    packed = torch.empty(nbytes, dtype=_U8, device=flat.device)
    exps = torch.empty(n, dtype=_U8, device=flat.device)
    rows, g, warps = elem_cfg()
    launch(K.natural_encode_kernel, (cdiv(n, rows * g * 8),), flat, packed, exps,
           _seed(seed, flat.device), n, nbytes, CAP=cap, ROWS=rows, G=g, num_warps=warps,
           **ef_args(flat, res, newres))
    return (packed, exps, newres) if ef else (packed, exps)


def natural_decode(packed, exps, numel, dtype=_F32):
    out = torch.empty(numel, dtype=dtype, device=packed.device)
    if numel:
        block = dec_block()
        launch(K.natural_decode_kernel, (cdiv(numel, block),), packed.contiguous(),
               exps.contiguous(), out, numel, packed.numel(), BLOCK=block,
               MANUAL_BF16=bf16_fix(dtype), num_warps=4)
    return out
