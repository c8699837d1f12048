"""Launch helpers shared by the kernel wrappers (`quantize`, `sign`, `packing`, `stats`,
`sparse`, `randomk`, `orthogonal`): input checks, tile configuration, error feedback's kernel
arguments, and the launch itself. No Triton import here."""
from __future__ import annotations

import functools
import os

import torch

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: Largest block size encoded by the fused one-pass ("rows") kernels; larger blocks, block
#: sizes that are not a multiple of 8 (sub-byte codes) and whole-tensor blocks take the
#: two-pass path (statistics, then codes).
FUSED_MAX = 8192
MAX_NUMEL = (1 << 28) - 1  # bit offsets (numel * 8) must fit in int32

_F32 = torch.float32


def interpreting() -> bool:
    """True when Triton's interpreter is on (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


# -- launch configuration --------------------------------------------------------------------
def elems() -> int:
    """Elements per program of the encoders. The interpreter pays ~ms per program, so it gets
    big tiles (and the tests small tensors)."""
    return 32768 if interpreting() else 4096


def dec_block() -> int:
    """Elements per program of the decoders."""
    return 32768 if interpreting() else 2048


def warps(n: int) -> int:
    """Warps of a program over `n` elements."""
    return 4 if n <= 2048 else 8


def p2(v: int) -> int:
    """The smallest power of two >= v (1 for v <= 1)."""
    return 1 << max(0, (int(v) - 1).bit_length())


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@functools.lru_cache(maxsize=None)
def inv(c: float) -> float:
    """The float32 reciprocal torch's CUDA kernels multiply by for `tensor / c` (cached: three
    torch ops per call cost more host time than a kernel launch)."""
    return (torch.ones((), dtype=_F32) / torch.tensor(c, dtype=_F32)).item()


def bf16_fix(dtype) -> bool:
    """Round float32 -> bfloat16 outputs by hand under the interpreter (see
    `gradcomp.kernels.tiles.to_out`)."""
    return dtype == torch.bfloat16 and interpreting()


def launch(kernel, grid, *args, num_warps=4, **constexprs):
    """Launch on the device of the first tensor argument (Triton launches on the current
    device), on its current stream, without FMA contraction."""
    dev = args[0].device
    if (dev.type == "cuda" and dev.index is not None and torch.cuda.device_count() > 1
            and dev.index != torch.cuda.current_device()):
        with torch.cuda.device(dev):
            kernel[grid](*args, **constexprs, num_warps=num_warps, enable_fp_fusion=False)
    else:
        kernel[grid](*args, **constexprs, num_warps=num_warps, enable_fp_fusion=False)


def fused_block_size(block_size: int, bits: int) -> bool:
    """Whether blocks of `block_size` values with `bits`-bit codes take the fused one-pass
    kernel."""
    return 0 < block_size <= FUSED_MAX and (bits == 8 or block_size % 8 == 0)


def rows_cfg(block_size: int) -> tuple[int, int, int]:
    """(ROWS, G, num_warps) of a rows kernel for blocks of `block_size`."""
    bsp2 = max(8, p2(block_size))
    rows = max(1, elems() // bsp2)
    return rows, bsp2 // 8, warps(rows * bsp2)


def elem_cfg() -> tuple[int, int, int]:
    """(ROWS, G, num_warps) of an elem kernel."""
    n = elems()
    return 1, n // 8, warps(n)


# -- checks ----------------------------------------------------------------------------------
def check_input(x: torch.Tensor) -> torch.Tensor:
    """`x` flattened and contiguous, or an error naming what the kernels do not take."""
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


def check_block_size(block_size: int, allow_zero: bool = False) -> int:
    ok = isinstance(block_size, int) and not isinstance(block_size, bool)
    if not ok or block_size < (0 if allow_zero else 1):
        bound = ">= 0" if allow_zero else ">= 1"
        raise ValueError(f"block_size={block_size!r} is not allowed: block_size must be an "
                         f"integer {bound}")
    return block_size


# -- error feedback --------------------------------------------------------------------------
def check_residual(residual, flat: torch.Tensor) -> torch.Tensor | None:
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


def res_args(x: torch.Tensor, res: torch.Tensor | None) -> dict:
    """Kernel arguments that correct x by the residual `res` (none for None)."""
    return {} if res is None else dict(res_ptr=res, RES=True, MANUAL_BF16=bf16_fix(x.dtype))


def ef_args(x: torch.Tensor, res: torch.Tensor | None, newres: torch.Tensor | None) -> dict:
    """Kernel arguments of an encoder with error feedback into `newres` (none for None)."""
    if newres is None:
        return {}
    return dict(res_args(x, res), newres_ptr=newres, EF=True, MANUAL_BF16=bf16_fix(x.dtype))


def ef_inputs(x: torch.Tensor, residual, ef: bool) -> tuple:
    """What an encoder with error feedback fused (`ef`) starts from: x flat (`check_input`),
    the residual checked beside it (`check_residual`) and an empty float32 new residual;
    without `ef` those two are None."""
    flat = check_input(x)
    if not ef:
        return flat, None, None
    res = check_residual(residual, flat)
    return flat, res, torch.empty(flat.numel(), dtype=_F32, device=flat.device)
