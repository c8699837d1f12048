"""Block layout and working dtype shared by the block-wise compressors, their torch references
and their kernels (no Triton here)."""
import torch


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype compressors compute in: float64 stays float64, everything else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def all_finite(flat: torch.Tensor) -> torch.Tensor:
    """Whether every value of `flat` is finite, as a 0-d bool tensor (no host sync): from its
    min and max, which NaN propagates to (one read, no bool temporary; ~10x faster than
    ``isfinite(flat).all()`` on a CPU)."""
    if flat.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=flat.device)
    lo, hi = torch.aminmax(flat)
    return torch.isfinite(lo) & torch.isfinite(hi)


def layout(numel: int, block_size: int) -> tuple[int, int]:
    """(number of blocks, block length). block_size 0 is one block of the whole tensor (of
    length >= 1, so an empty tensor still has one block, holding only padding)."""
    if block_size == 0:
        return 1, max(numel, 1)
    return -(-numel // block_size), block_size


def block_counts(numel: int, nblocks: int, length: int, dtype, device) -> torch.Tensor:
    """Number of real (non-padding) values in each block."""
    counts = torch.full((nblocks,), length, dtype=dtype, device=device)
    if nblocks:
        counts[-1:].fill_(numel - (nblocks - 1) * length)  # fill_: no host-device sync
    return counts
