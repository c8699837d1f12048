"""The sign compressors' torch reference: encode and decode of signsgd, efsignsgd and onebit, as
the compressors run them on CPU tensors and float64 and as the Triton kernels (`launcher`, same
signatures) must reproduce them (see `gradcomp.compressors.sign` for the methods and their
wire formats).

The bit of a value is ``x >= 0`` (0 and -0.0 are "non-negative", NaN "negative"), packed 8 to
a byte MSB first; statistics are float32. Decoders return the work dtype (float64 for float64,
else float32).
"""
from __future__ import annotations

import torch

from ..blocks import all_finite, block_counts, layout, work_dtype
from ..packing.reference import pack, unpack


def _sign_bits(flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(bool mask ``flat >= 0``, its packed 1-bit stream)."""
    bits = flat >= 0
    return bits, pack(bits.view(torch.uint8), 1)


def _unpack_bits(packed: torch.Tensor, numel: int) -> torch.Tensor:
    return unpack(packed, numel, 1).view(torch.bool)  # codes are 0 or 1


def _blocked(x: torch.Tensor, nblocks: int, length: int, fill=0) -> torch.Tensor:
    """`x` padded with `fill` to nblocks * length values, viewed as (nblocks, length)."""
    pad = nblocks * length - x.numel()
    if pad:
        x = torch.cat([x, x.new_full((pad,), fill)])
    return x.view(nblocks, length)


# -- signsgd -------------------------------------------------------------------------------
def signsgd_encode(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed sign bits, float32 flag: 1.0 when `x` is all finite, else NaN)."""
    _, packed = _sign_bits(x)
    flag = torch.where(all_finite(x), 1.0, float("nan")).to(torch.float32).reshape(1)
    return packed, flag


def signsgd_decode(packed: torch.Tensor, flag: torch.Tensor, numel: int,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """+-flag per value."""
    work = work_dtype(dtype)
    bits = _unpack_bits(packed, numel)
    flag = flag.to(work)
    return torch.where(bits, flag, -flag)


# -- efsignsgd -----------------------------------------------------------------------------
def efsignsgd_encode(x: torch.Tensor, block_size: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed sign bits, float32 mean |x| per block; block_size 0: one block)."""
    x = x.to(work_dtype(x.dtype))
    _, packed = _sign_bits(x)
    nblocks, length = layout(x.numel(), block_size)
    sums = _blocked(x.abs(), nblocks, length).sum(dim=1)
    counts = block_counts(x.numel(), nblocks, length, x.dtype, x.device).clamp_min(1)
    return packed, (sums / counts).to(torch.float32)


def efsignsgd_decode(packed: torch.Tensor, scales: torch.Tensor, numel: int,
                     block_size: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """+-scale of its block per value."""
    work = work_dtype(dtype)
    nblocks, length = layout(numel, block_size)
    bits = _blocked(_unpack_bits(packed, numel), nblocks, length, fill=False)
    scale = scales.to(work).unsqueeze(1)
    return torch.where(bits, scale, -scale).reshape(-1)[:numel]


# -- onebit --------------------------------------------------------------------------------
def onebit_encode(x: torch.Tensor, block_size: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed sign bits, float32 means (non-negative, negative) interleaved per block)."""
    x = x.to(work_dtype(x.dtype))
    bits, packed = _sign_bits(x)
    n = x.numel()
    nblocks, length = layout(n, block_size)
    xb, bb = _blocked(x, nblocks, length), _blocked(bits, nblocks, length, fill=False)
    part = torch.where(bb, xb, 0)  # one scratch for both groups
    pos_sum = part.sum(dim=1)
    neg_sum = torch.where(bb, x.new_zeros(()), xb, out=part).sum(dim=1)
    pos_count = bb.sum(dim=1).to(x.dtype)
    neg_count = block_counts(n, nblocks, length, x.dtype, x.device) - pos_count
    means = torch.stack([pos_sum / pos_count.clamp_min(1),
                         neg_sum / neg_count.clamp_min(1)], dim=1)
    return packed, means.to(torch.float32).reshape(-1)


def onebit_decode(packed: torch.Tensor, means: torch.Tensor, numel: int, block_size: int = 0,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The mean of its block's group per value."""
    work = work_dtype(dtype)
    nblocks, length = layout(numel, block_size)
    bits = _blocked(_unpack_bits(packed, numel), nblocks, length, fill=False)
    means = means.to(work).view(nblocks, 2)
    out = torch.where(bits, means[:, :1], means[:, 1:])
    return out.reshape(-1)[:numel]
