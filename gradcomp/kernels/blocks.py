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


def reused(scratch: dict | None, shape, dtype: torch.dtype, device) -> torch.Tensor:
    """An uninitialised tensor of `shape` and `dtype` on `device`, kept in `scratch` (a dict
    the caller keeps per tensor it works on; None: a new one) for the next call. On the CPU a
    large tensor made per call can land on freshly mapped pages to fault in: PowerSGD's
    encode of the MLP's bucket took 14-19 ms instead of 8 on some calls, top-k's selection
    of its 2.1M-value shard 17.6 ms instead of 9.4 (benchmarks/bench_topk_buffers.py)."""
    key = (tuple(shape), dtype)
    if scratch is None:
        return torch.empty(key[0], dtype=dtype, device=device)
    buf = scratch.get(key)
    if buf is None or buf.device != torch.device(device):
        buf = scratch[key] = torch.empty(key[0], dtype=dtype, device=device)
    return buf
