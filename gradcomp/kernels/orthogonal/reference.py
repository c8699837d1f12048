"""PowerSGD's orthogonalisation, the torch reference: Gram-Schmidt for rank <= 2, QR above (as
torch's `powerSGD_hook`), which the Triton kernel (`launcher`) must reproduce up to float32
rounding (and, above rank 2, the signs of the columns); and the identity that replaces a
non-finite Q so that warm start recovers."""
from __future__ import annotations

import torch


def orthogonalize_torch(matrices: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Orthonormalise the columns of a batch of tall matrices (b, n, r) in place."""
    rank = matrices.shape[2]
    if rank > 2:
        q, _ = torch.linalg.qr(matrices)
        return matrices.copy_(q)
    for i in range(rank):
        col = matrices[:, :, i : i + 1]
        col /= torch.linalg.vector_norm(col, dim=1, keepdim=True) + epsilon
        if i + 1 < rank:
            rest = matrices[:, :, i + 1 :]
            rest -= torch.sum(col * rest, dim=1, keepdim=True) * col
    return matrices


def identity_if_not_finite(q: torch.Tensor) -> torch.Tensor:
    """A copy of the stacked Qs (b, m, r) where a Q that holds NaN/Inf (after a non-finite
    gradient) is replaced by the first r columns of the identity, so warm start recovers; the
    same on every rank, since Q was all-reduced, and without a host sync."""
    eye = torch.eye(q.shape[1], q.shape[2], dtype=q.dtype, device=q.device).expand_as(q)
    return torch.where(torch.isfinite(q).all(dim=(1, 2), keepdim=True), q, eye)
