"""Python entry points of the Triton kernels: each returns exactly the wire tensors of the
matching compressor in `gradcomp.compressors` (same layout, same dtypes), and each decoder
takes them back.

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

import functools
import math

import torch

from . import _triton as K
from . import interpreting
from .blocks import block_counts, layout

__all__ = [
    "int_encode", "int_decode", "int8_encode", "int8_decode", "int4_encode", "int4_decode",
    "qsgd_encode", "qsgd_decode", "terngrad_encode", "terngrad_decode",
    "natural_encode", "natural_decode", "sign_encode", "sign_decode",
    "signsgd_encode", "signsgd_decode", "efsignsgd_encode", "efsignsgd_decode",
    "onebit_encode", "onebit_decode", "pack", "unpack", "fused_block_size",
    "int_encode_ef", "qsgd_encode_ef", "terngrad_encode_ef", "natural_encode_ef",
    "sign_encode_ef",
]

_F32 = torch.float32
_U8 = torch.uint8
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: Largest block size encoded by the fused one-pass ("rows") kernels; larger blocks, block
#: sizes that are not a multiple of 8 (sub-byte codes) and whole-tensor blocks take the
#: two-pass path (statistics, then codes).
FUSED_MAX = 8192
MAX_NUMEL = (1 << 28) - 1  # bit offsets (numel * 8) must fit in int32


# -- launch configuration --------------------------------------------------------------------
def _elems() -> int:
    """Elements per program of the encoders. The interpreter pays ~ms per program, so it gets
    big tiles (and the tests small tensors)."""
    return 32768 if interpreting() else 4096


def _dec_block() -> int:
    return 32768 if interpreting() else 2048


def _warps(elems: int) -> int:
    return 4 if elems <= 2048 else 8


def _p2(v: int) -> int:
    return 1 << max(0, (int(v) - 1).bit_length())


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@functools.lru_cache(maxsize=None)
def _inv(c: float) -> float:
    """The float32 reciprocal torch's CUDA kernels multiply by for `tensor / c` (cached: three
    torch ops per call cost more host time than a kernel launch)."""
    return (torch.ones((), dtype=_F32) / torch.tensor(c, dtype=_F32)).item()


def _bf16_fix(dtype) -> bool:
    """Round float32 -> bfloat16 outputs by hand under the interpreter (see `_to_out`)."""
    return dtype == torch.bfloat16 and interpreting()


def _launch(kernel, grid, *args, num_warps=4, **constexprs):
    """Launch on the device of the first tensor argument (Triton launches on the current
    device), on its current stream, without FMA contraction."""
    dev = args[0].device
    if (dev.type == "cuda" and dev.index is not None and torch.cuda.device_count() > 1
            and dev.index != torch.cuda.current_device()):
        with torch.cuda.device(dev):
            kernel[grid](*args, **constexprs, num_warps=num_warps, enable_fp_fusion=False)
    else:
        kernel[grid](*args, **constexprs, num_warps=num_warps, enable_fp_fusion=False)


def _check_input(x: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"x dtype {x.dtype} is not supported by the kernels: use float32, "
                        "float16 or bfloat16 (float64 stays on the torch path)")
    if not x.is_cuda and not interpreting():
        raise RuntimeError("the Triton kernels need a CUDA tensor (or TRITON_INTERPRET=1 set "
                           "before gradcomp.kernels is first used)")
    if not 0 < x.numel() <= MAX_NUMEL:
        raise ValueError(f"x has {x.numel()} elements: the kernels take 1 to {MAX_NUMEL}")
    return x.reshape(-1).contiguous()


def _check_bs(block_size: int, allow_zero: bool = False) -> int:
    ok = isinstance(block_size, int) and not isinstance(block_size, bool)
    if not ok or block_size < (0 if allow_zero else 1):
        bound = ">= 0" if allow_zero else ">= 1"
        raise ValueError(f"block_size={block_size!r} is not allowed: block_size must be an "
                         f"integer {bound}")
    return block_size


def _seed(seed, device) -> torch.Tensor:
    if isinstance(seed, torch.Tensor):
        return seed.reshape(-1)[:1].to(device=device, dtype=torch.int64)
    return torch.tensor([int(seed)], dtype=torch.int64, device=device)


def _recip(t: torch.Tensor) -> bool:
    return t.is_cuda


def _check_residual(residual, flat: torch.Tensor) -> torch.Tensor | None:
    """The error-feedback residual as a flat contiguous float32 tensor beside `flat`."""
    if residual is None:
        return None
    if not isinstance(residual, torch.Tensor):
        raise TypeError(f"residual must be a torch.Tensor or None, got {type(residual).__name__}")
    if residual.dtype != _F32:
        raise TypeError(f"residual dtype {residual.dtype} is not supported: the residual is "
                        "float32")
    if residual.numel() != flat.numel():
        raise ValueError(f"residual has {residual.numel()} elements: x has {flat.numel()}")
    if residual.device != flat.device:
        raise ValueError(f"residual is on {residual.device}: x is on {flat.device}")
    return residual.reshape(-1).contiguous()


def _res_args(x: torch.Tensor, res: torch.Tensor | None) -> dict:
    """Kernel arguments that correct x by the residual `res` (none for None)."""
    return {} if res is None else dict(res_ptr=res, RES=True, MANUAL_BF16=_bf16_fix(x.dtype))


def _ef_args(x: torch.Tensor, res: torch.Tensor | None, newres: torch.Tensor | None) -> dict:
    """Kernel arguments of an encoder with error feedback into `newres` (none for None)."""
    if newres is None:
        return {}
    return dict(_res_args(x, res), newres_ptr=newres, EF=True, MANUAL_BF16=_bf16_fix(x.dtype))


def _new_residual(flat: torch.Tensor, ef: bool) -> torch.Tensor | None:
    return torch.empty(flat.numel(), dtype=_F32, device=flat.device) if ef else None


def fused_block_size(block_size: int, bits: int) -> bool:
    """Whether blocks of `block_size` values with `bits`-bit codes take the fused one-pass
    kernel."""
    return 0 < block_size <= FUSED_MAX and (bits == 8 or block_size % 8 == 0)


def _rows_cfg(block_size: int) -> tuple[int, int, int]:
    """(ROWS, G, num_warps) of a rows kernel for blocks of `block_size`."""
    bsp2 = max(8, _p2(block_size))
    rows = max(1, _elems() // bsp2)
    return rows, bsp2 // 8, _warps(rows * bsp2)


def _elem_cfg() -> tuple[int, int, int]:
    elems = _elems()
    return 1, elems // 8, _warps(elems)


# -- partial statistics ----------------------------------------------------------------------
def _partials(x: torch.Tensor, mode: int, length: int, nblocks: int,
              aux: torch.Tensor | None = None, res: torch.Tensor | None = None) -> torch.Tensor:
    """(nblocks, chunks per block, 4) float32 statistics of blocks of `length` values (of x
    corrected by the residual `res`, if given)."""
    n = x.numel()
    chunk_max = _elems()
    if length <= chunk_max:
        cpb, chunk = 1, max(2, _p2(length))
        rows = max(1, chunk_max // chunk)
    else:
        cpb, chunk, rows = _cdiv(length, chunk_max), chunk_max, 1
    part = torch.empty(nblocks * cpb * K.NPART, dtype=_F32, device=x.device)
    grid = (_cdiv(nblocks, rows) * cpb,)
    _launch(K._partial_kernel, grid, x, part, part if aux is None else aux, n, length, nblocks,
            cpb, MODE=mode, ROWS=rows, CHUNK=chunk, num_warps=_warps(rows * chunk),
            **_res_args(x, res))
    return part.view(nblocks, cpb, K.NPART)


# -- int8 / int4 / qsgd / terngrad -----------------------------------------------------------
def _quant_encode(x, method, bits, block_size, levels, inv, stochastic, seed, stat_fn,
                  ef=False, residual=None):
    """Shared driver: the fused rows kernel where the layout allows, else statistics by
    `stat_fn(flat, length, nblocks, res)` and the elem kernel. With `ef`, error feedback with
    `residual` (None: the first step), and the new residual returned third."""
    flat = _check_input(x)
    res = _check_residual(residual, flat) if ef else None
    newres = _new_residual(flat, ef)
    n = flat.numel()
    nblocks, length = layout(n, block_size)
    nbytes = (n * bits + 7) // 8
    packed = torch.empty(nbytes, dtype=_U8, device=flat.device)
    seed_t = _seed(seed, flat.device) if stochastic else packed  # not read when not STOCH
    common = dict(METHOD=method, BITS=bits, BP2=max(2, _p2(bits)), LEVELS=levels, INV=inv,
                  RECIP=_recip(flat), STOCH=stochastic)
    if block_size and fused_block_size(block_size, bits):
        nstats = 2 * nblocks if method == K.MINMAX else nblocks
        stats = torch.empty(nstats, dtype=_F32, device=flat.device)
        rows, g, warps = _rows_cfg(block_size)
        _launch(K._quant_rows_kernel, (_cdiv(nblocks, rows),), flat, packed, stats, seed_t, n,
                nblocks, nbytes, BS=block_size, ROWS=rows, G=g, num_warps=warps, **common,
                **_ef_args(flat, res, newres))
    else:
        stats = stat_fn(flat, length, nblocks, res).to(_F32).contiguous()
        rows, g, warps = _elem_cfg()
        _launch(K._quant_elem_kernel, (_cdiv(n, rows * g * 8),), flat, packed, stats, seed_t, n,
                nblocks, nbytes, BS=block_size, ROWS=rows, G=g, num_warps=warps, **common,
                **_ef_args(flat, res, newres))
    return (packed, stats, newres) if ef else (packed, stats)


def _quant_decode(packed, stats, numel, method, bits, block_size, levels, inv, dtype):
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype {dtype} is not supported by the kernels")
    nblocks, _ = layout(numel, block_size)
    out = torch.empty(numel, dtype=dtype, device=packed.device)
    if numel == 0:
        return out
    block = _dec_block()
    _launch(K._quant_decode_kernel, (_cdiv(numel, block),), packed.contiguous(),
            stats.to(_F32).contiguous(), out, numel, nblocks, packed.numel(), METHOD=method,
            BS=block_size, BLOCK=block, BITS=bits, LEVELS=levels, INV=inv,
            RECIP=_recip(packed), MANUAL_BF16=_bf16_fix(dtype), num_warps=4)
    return out


def _amax(flat, length, nblocks, res=None):
    return _partials(flat, K.P_ABSMAX, length, nblocks, res=res)[..., 0].amax(dim=1)


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
    block_size = _check_bs(block_size)
    if scheme == "absmax":
        qmax = (1 << (bits - 1)) - 1

        def stats(flat, length, nblocks, res):
            return _amax(flat, length, nblocks, res) / qmax

        return _quant_encode(x, K.ABSMAX, bits, block_size, qmax, _inv(qmax), stochastic, seed,
                             stats, ef, residual)
    top = (1 << bits) - 1

    def stats(flat, length, nblocks, res):
        part = _partials(flat, K.P_MINMAX, length, nblocks, res=res)
        return torch.cat([part[..., 0].amin(dim=1), part[..., 1].amax(dim=1)])

    return _quant_encode(x, K.MINMAX, bits, block_size, top, _inv(0.5 * top), stochastic, seed,
                         stats, ef, residual)


def int_decode(packed: torch.Tensor, scales: torch.Tensor, numel: int, bits: int,
               block_size: int = 256, scheme: str = "absmax",
               dtype: torch.dtype = _F32) -> torch.Tensor:
    """Inverse of `int_encode`: `numel` values of `dtype`."""
    block_size = _check_bs(block_size)
    if scheme == "absmax":
        qmax = (1 << (bits - 1)) - 1
        return _quant_decode(packed, scales, numel, K.ABSMAX, bits, block_size, qmax,
                             _inv(qmax), dtype)
    top = (1 << bits) - 1
    return _quant_decode(packed, scales, numel, K.MINMAX, bits, block_size, top,
                         _inv(0.5 * top), dtype)


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
    block_size = _check_bs(block_size)

    def stats(flat, length, nblocks, res):
        amax = _amax(flat, length, nblocks, res)
        unit = torch.where((amax > 0) & torch.isfinite(amax), amax, torch.ones_like(amax))
        ss = _partials(flat, K.P_SUMSQ, length, nblocks, aux=unit.contiguous(),
                       res=res)[..., 0].sum(1)
        return ss.sqrt() * unit

    return _quant_encode(x, K.QSGD, bits, block_size, levels, _inv(levels), stochastic, seed,
                         stats, ef, residual)


def qsgd_decode(packed, norms, numel, levels=15, block_size=512, dtype=_F32):
    bits = _qsgd_bits(levels)
    return _quant_decode(packed, norms, numel, K.QSGD, bits, _check_bs(block_size), levels,
                         _inv(levels), dtype)


def terngrad_encode(x: torch.Tensor, block_size: int = 0, seed=0):
    """TernGrad as `compressor("terngrad")`: (packed 2-bit codes, float32 max|x| per block;
    block_size 0 = the whole tensor). Always stochastic."""
    block_size = _check_bs(block_size, allow_zero=True)
    return _quant_encode(x, K.TERN, 2, block_size, 1, 1.0, True, seed, _amax)


def terngrad_encode_ef(x: torch.Tensor, residual: torch.Tensor | None, block_size: int = 0,
                       seed=0):
    """`terngrad_encode` with error feedback fused: (packed codes, scales, new residual)."""
    block_size = _check_bs(block_size, allow_zero=True)
    return _quant_encode(x, K.TERN, 2, block_size, 1, 1.0, True, seed, _amax, True, residual)


def terngrad_decode(packed, scales, numel, block_size=0, dtype=_F32):
    return _quant_decode(packed, scales, numel, K.TERN, 2,
                         _check_bs(block_size, allow_zero=True), 1, 1.0, dtype)


# -- natural compression ---------------------------------------------------------------------
def natural_encode(x: torch.Tensor, seed=0) -> tuple[torch.Tensor, torch.Tensor]:
    """Natural compression as `compressor("natural")`: (packed sign bits, uint8 exponents)."""
    return _natural_encode(x, seed)


def natural_encode_ef(x: torch.Tensor, residual: torch.Tensor | None, seed=0):
    """`natural_encode` with error feedback fused: (packed signs, exponents, new residual)."""
    return _natural_encode(x, seed, True, residual)


def _natural_encode(x, seed, ef=False, residual=None):
    cap = 127 + 15 if x.dtype == torch.float16 else 254
    flat = _check_input(x)
    res = _check_residual(residual, flat) if ef else None
    newres = _new_residual(flat, ef)
    n = flat.numel()
    nbytes = (n + 7) // 8
    packed = torch.empty(nbytes, dtype=_U8, device=flat.device)
    exps = torch.empty(n, dtype=_U8, device=flat.device)
    rows, g, warps = _elem_cfg()
    _launch(K._natural_encode_kernel, (_cdiv(n, rows * g * 8),), flat, packed, exps,
            _seed(seed, flat.device), n, nbytes, CAP=cap, ROWS=rows, G=g, num_warps=warps,
            **_ef_args(flat, res, newres))
    return (packed, exps, newres) if ef else (packed, exps)


def natural_decode(packed, exps, numel, dtype=_F32):
    out = torch.empty(numel, dtype=dtype, device=packed.device)
    if numel:
        block = _dec_block()
        _launch(K._natural_decode_kernel, (_cdiv(numel, block),), packed.contiguous(),
                exps.contiguous(), out, numel, packed.numel(), BLOCK=block,
                MANUAL_BF16=_bf16_fix(dtype), num_warps=4)
    return out


# -- sign compressors ------------------------------------------------------------------------
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
    block_size = 0 if m == K.SIGN else _check_bs(block_size, allow_zero=True)
    flat = _check_input(x)
    res = _check_residual(residual, flat) if ef else None
    newres = _new_residual(flat, ef)
    n = flat.numel()
    nbytes = (n + 7) // 8
    packed = torch.empty(nbytes, dtype=_U8, device=flat.device)
    nblocks, length = layout(n, block_size)
    if block_size and fused_block_size(block_size, 1):
        stats = torch.empty(nblocks * (2 if m == K.ONEBIT else 1), dtype=_F32,
                            device=flat.device)
        rows, g, warps = _rows_cfg(block_size)
        _launch(K._sign_rows_kernel, (_cdiv(nblocks, rows),), flat, packed, stats, n, nblocks,
                nbytes, METHOD=m, BS=block_size, ROWS=rows, G=g, num_warps=warps,
                **_ef_args(flat, res, newres))
        return (packed, stats, newres) if ef else (packed, stats)
    rows, g, warps = _elem_cfg()
    nprog = _cdiv(n, rows * g * 8)
    whole = block_size == 0 or nblocks == 1
    mode = {K.SIGN: K.P_ABSMAX, K.EFSIGN: K.P_ABSSUM, K.ONEBIT: K.P_ONEBIT}[m]
    if whole or not ef:  # bits (and the whole tensor's partial statistics)
        part = torch.empty(nprog * K.NPART, dtype=_F32, device=flat.device)
        _launch(K._sign_elem_kernel, (nprog,), flat, packed, part, n, nbytes,
                STATS=mode if whole else K.P_NONE, ROWS=rows, G=g, num_warps=warps,
                **_res_args(flat, res))
    # (1, programs, 4) for the whole tensor, else (blocks, chunks, 4) from a second pass.
    part = part.view(1, nprog, K.NPART) if whole else _partials(flat, mode, length, nblocks,
                                                                 res=res)
    stats = _sign_stats(m, part, n, nblocks, length)
    if ef:  # the residual given the statistics (and the bits where not yet written)
        _launch(K._sign_ef_kernel, (nprog,), flat, stats, packed, newres, n, nbytes, METHOD=m,
                BS=block_size, BITS_OUT=not whole, ROWS=rows, G=g, num_warps=warps,
                **dict(_res_args(flat, res), MANUAL_BF16=_bf16_fix(flat.dtype)))
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
    block_size = 0 if m == K.SIGN else _check_bs(block_size, allow_zero=True)
    out = torch.empty(numel, dtype=dtype, device=packed.device)
    if numel:
        block = _dec_block()
        _launch(K._sign_decode_kernel, (_cdiv(numel, block),), packed.contiguous(),
                stats.to(_F32).contiguous(), out, numel, packed.numel(), METHOD=m,
                BS=block_size, BLOCK=block, MANUAL_BF16=_bf16_fix(dtype), num_warps=4)
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


# -- generic bit packing ---------------------------------------------------------------------
def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """`bitpack.pack` on the device: uint8 codes (< 2**bits) into an MSB-first stream."""
    if not isinstance(bits, int) or not 1 <= bits <= 8:
        raise ValueError(f"bits={bits!r} is not allowed: bits must be an integer in [1, 8]")
    if codes.dtype != _U8:
        raise TypeError(f"codes must be uint8, got {codes.dtype}")
    codes = codes.reshape(-1).contiguous()
    if bits == 8:
        return codes.clone()
    n = codes.numel()
    nbytes = (n * bits + 7) // 8
    out = torch.empty(nbytes, dtype=_U8, device=codes.device)
    if n:
        rows, g, warps = _elem_cfg()
        _launch(K._pack_kernel, (_cdiv(n, rows * g * 8),), codes, out, n, nbytes, BITS=bits,
                BP2=max(2, _p2(bits)), ROWS=rows, G=g, num_warps=warps)
    return out


def unpack(packed: torch.Tensor, count: int, bits: int) -> torch.Tensor:
    """`bitpack.unpack` on the device."""
    if not isinstance(bits, int) or not 1 <= bits <= 8:
        raise ValueError(f"bits={bits!r} is not allowed: bits must be an integer in [1, 8]")
    packed = packed.reshape(-1).contiguous()
    if bits == 8:
        return packed[:count].clone()
    out = torch.empty(count, dtype=_U8, device=packed.device)
    if count:
        block = _dec_block()
        _launch(K._unpack_kernel, (_cdiv(count, block),), packed, out, count, packed.numel(),
                BITS=bits, BLOCK=block, num_warps=4)
    return out
