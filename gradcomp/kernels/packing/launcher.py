"""Generic MSB-first bit packing on the device: `pack` and `unpack`, equal to
`gradcomp.kernels.packing.reference` bit for bit (inputs as in `gradcomp.kernels.quantize`)."""
from __future__ import annotations

import torch

from ..launch import cdiv, dec_block, elem_cfg, launch, p2
from . import jit as K

__all__ = ["pack", "unpack"]

_U8 = torch.uint8


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
        rows, g, warps = elem_cfg()
        launch(K.pack_kernel, (cdiv(n, rows * g * 8),), codes, out, n, nbytes, BITS=bits,
               BP2=max(2, p2(bits)), ROWS=rows, G=g, num_warps=warps)
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
        block = dec_block()
        launch(K.unpack_kernel, (cdiv(count, block),), packed, out, count, packed.numel(),
               BITS=bits, BLOCK=block, num_warps=4)
    return out
