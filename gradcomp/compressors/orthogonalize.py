"""Orthonormalising PowerSGD's P and Q batches: Gram-Schmidt for rank <= 2, QR otherwise (as
torch's `powerSGD_hook`), on a GPU one Triton launch for all of a call's matrices."""
from __future__ import annotations

import torch

from .. import kernels
from ..kernels.orthogonal.reference import identity_if_not_finite, orthogonalize_torch


def orthogonalize_(matrices: torch.Tensor, epsilon: float = 0.0) -> torch.Tensor:
    """Orthonormalise the columns of a batch of tall matrices (b, n, r) in place: Gram-Schmidt
    for r <= 2, QR otherwise (as torch's hook does).

    A contiguous float32 CUDA batch goes to the Triton kernel when `kernels.available()` (one
    program per matrix; `gradcomp.kernels.orthogonalize_`): for r <= 2 it runs the same
    Gram-Schmidt steps, equal to this torch code up to float32 rounding (NaN where torch gives
    NaN: a zero column with epsilon 0, a NaN/Inf column and those after it); for r > 2 it runs
    re-orthogonalised Gram-Schmidt, which agrees with torch's QR up to the signs of the columns
    and rounding (P Q^T does not depend on the signs), and, like QR, completes a zero column
    to an orthonormal set instead of giving NaN.
    """
    if use_kernel(matrices):
        return kernels.orthogonalize_(matrices, epsilon)
    return orthogonalize_torch(matrices, epsilon)


def use_kernel(t: torch.Tensor, max_rank: int | None = None) -> bool:
    """Whether float32 CUDA matrices (at most `max_rank` columns) go to the Triton kernel."""
    if not (t.is_cuda and t.dtype == torch.float32 and t.is_contiguous() and t.numel()
            and kernels.available()):
        return False
    from ..kernels.orthogonal.launcher import MAX_RANK

    if max_rank is None:  # one (b, n, r) batch
        return t.dim() == 3 and t.shape[2] <= min(t.shape[1], MAX_RANK)
    return max_rank <= MAX_RANK


def orthogonalize_all(flat: torch.Tensor, views: dict, shapes: list, epsilon: float,
                       finite_or_eye: bool = False) -> None:
    """Orthonormalise every batch of `views` (views of `flat`, whose (b, n, r) are `shapes`)
    in place: one kernel launch for them all on a GPU, else the torch code per batch. With
    `finite_or_eye`, a matrix holding NaN/Inf is first replaced by the identity's columns."""
    if use_kernel(flat, max((r for _, _, r in shapes), default=0)):
        kernels.orthogonalize_(flat, epsilon, shapes=shapes, finite_or_eye=finite_or_eye)
        return
    for v in views.values():
        if finite_or_eye:
            v.copy_(orthogonalize_torch(identity_if_not_finite(v), epsilon))
        else:
            orthogonalize_torch(v, epsilon)
