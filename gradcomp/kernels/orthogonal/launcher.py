"""Orthonormal columns for many small tall-skinny float32 matrices at once (PowerSGD's P and Q),
one Triton program per matrix: `orthogonalize_`.

Imported lazily by `gradcomp.kernels` (this module imports Triton). Inputs are contiguous
float32 tensors on a CUDA device, or on the CPU under Triton's interpreter (TRITON_INTERPRET=1).
What it computes, per matrix of r columns, is the torch reference of
`gradcomp.compressors.orthogonalize.orthogonalize_` (Gram-Schmidt for r <= 2, QR otherwise) up to
float32 rounding, and for r > 2 up to the signs of the columns (see
`gradcomp.kernels.orthogonal.jit`).
"""
from __future__ import annotations

import functools

import torch

from ..launch import interpreting, launch, p2
from .jit import orthogonalize_kernel

__all__ = ["orthogonalize_", "MAX_RANK"]

#: Most columns per matrix (the register tile holds all columns of a row chunk).
MAX_RANK = 64
_MAX_ELEMS = (1 << 31) - 1  # element offsets inside one matrix are int32


def _tile_elems() -> int:
    """Elements of a program's register tile. The interpreter pays per program and per loop
    step, not per element, so it gets big tiles (whole matrices)."""
    return 1 << 16 if interpreting() else 8192


def _warps(elems: int) -> int:
    return 1 if elems <= 256 else 2 if elems <= 1024 else 4 if elems <= 4096 else 8


def _check_float(value, option: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{option}={value!r} is not allowed: it must be a number >= 0")
    return float(value)


def _check_shape(b: int, n: int, r: int) -> None:
    if min(b, n, r) < 0 or (b and not 1 <= r <= min(n, MAX_RANK)):
        raise ValueError(f"matrices of shape (b={b}, n={n}, r={r}) are not allowed: the kernel "
                         f"takes 1 <= r <= min(n, {MAX_RANK}) columns")
    if n * r > _MAX_ELEMS:
        raise ValueError(f"a {n} x {r} matrix is too large for the kernel (at most "
                         f"{_MAX_ELEMS} elements per matrix)")


@functools.lru_cache(maxsize=256)
def _table(shapes: tuple, device: torch.device) -> torch.Tensor:
    """(offset, rows, cols) of every matrix of `shapes` laid end to end, largest first (so that
    the longest programs start first), as an int64 tensor on `device`."""
    rows, offset = [], 0
    for b, n, r in shapes:
        rows += [(offset + k * n * r, n, r) for k in range(b)]
        offset += b * n * r
    rows.sort(key=lambda e: -e[1] * e[2])
    return torch.tensor(rows, dtype=torch.int64).reshape(-1, 3).to(device)


def orthogonalize_(matrices: torch.Tensor, epsilon: float = 0.0, *, shapes=None,
                   finite_or_eye: bool = False, chunk_rows: int | None = None) -> torch.Tensor:
    """Orthonormalise the columns of every matrix in `matrices`, in place, and return it.

    matrices: a contiguous float32 (b, n, r) tensor (b matrices of n rows and r columns), or,
        with `shapes`, a flat float32 tensor holding batches of the given (b, n, r) shapes laid
        end to end (one launch for them all).
    epsilon: added to the column norm before dividing, for r <= 2 (as torch's hook; QR, used
        for r > 2, ignores it).
    finite_or_eye: first replace each matrix holding NaN/Inf by the first r columns of the
        identity.
    chunk_rows: rows per register tile (a power of two >= 2; default: the tallest matrix's
        rows rounded up to a power of two, at least 64, at most 8192 values / the columns
        rounded up to a power of two); matrices with more rows loop over row chunks.
    """
    if not isinstance(matrices, torch.Tensor):
        raise TypeError(f"matrices must be a torch.Tensor, got {type(matrices).__name__}")
    if matrices.dtype != torch.float32:
        raise TypeError(f"matrices dtype {matrices.dtype} is not supported by the kernel: use "
                        "float32 (other dtypes stay on the torch path)")
    if not matrices.is_cuda and not interpreting():
        raise RuntimeError("the Triton kernels need a CUDA tensor (or TRITON_INTERPRET=1 set "
                           "before gradcomp.kernels is first used)")
    if not matrices.is_contiguous():
        raise ValueError("matrices must be contiguous")
    eps = _check_float(epsilon, "epsilon")
    if shapes is None:
        if matrices.dim() != 3:
            raise ValueError(f"matrices must be a (b, n, r) tensor, got shape "
                             f"{tuple(matrices.shape)} (or pass shapes= for a flat tensor)")
        shapes = (tuple(matrices.shape),)
        uniform = True
    else:
        shapes = tuple((int(b), int(n), int(r)) for b, n, r in shapes)
        total = sum(b * n * r for b, n, r in shapes)
        if matrices.dim() != 1 or matrices.numel() != total:
            raise ValueError(f"with shapes, matrices must be a flat tensor of {total} values "
                             f"(the shapes' total), got shape {tuple(matrices.shape)}")
        uniform = len(shapes) == 1
    for b, n, r in shapes:
        _check_shape(b, n, r)
    shapes = tuple(s for s in shapes if s[0])
    if not shapes:
        return matrices
    max_n = max(n for _, n, _ in shapes)
    rp = max(2, p2(max(r for _, _, r in shapes)))
    if chunk_rows is None:
        # at least 64 rows: fewer distinct compiled configurations, negligible extra work
        chunk = max(64, min(_tile_elems() // rp, p2(max_n)))
    elif (isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 2
          or chunk_rows & (chunk_rows - 1)):
        raise ValueError(f"chunk_rows={chunk_rows!r} is not allowed: it must be a power of two "
                         ">= 2")
    else:
        chunk = chunk_rows
    if uniform:
        (b, n, r), = shapes
        grid, table = (b,), matrices
    else:
        b, n, r = 0, 0, 0
        table = _table(shapes, matrices.device)
        grid = (table.shape[0],)
    launch(orthogonalize_kernel, grid, matrices, table, n, r, eps, UNIFORM=uniform,
           FIX=bool(finite_or_eye), CHUNK=chunk, RP=rp, num_warps=_warps(chunk * rp))
    return matrices
