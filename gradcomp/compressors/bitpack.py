"""Bit packing: small unsigned codes (1 to 8 bits each) into a dense uint8 stream and back.

Codes are laid out most significant bit first, one after another with no padding between them;
the stream is padded with zero bits to a whole byte. ``packed_nbytes(n, bits)`` is its length.
"""
from __future__ import annotations

import torch



def _msb_first(bits: int, device) -> torch.Tensor:
    """Shift amounts for the bits of a `bits`-wide code, most significant first (built on the
    device, so no host-to-device copy)."""
    return torch.arange(bits - 1, -1, -1, dtype=torch.uint8, device=device)


def packed_nbytes(count: int, bits: int) -> int:
    return (count * bits + 7) // 8


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack a 1-D uint8 tensor of values < 2**bits into ``packed_nbytes(len, bits)`` bytes."""
    if not 1 <= bits <= 8:
        raise ValueError(f"bits={bits!r} is not allowed: bits must be an integer in [1, 8]")
    if codes.dtype != torch.uint8:
        raise TypeError(f"codes must be uint8, got {codes.dtype}")
    if bits == 8:
        return codes.clone()
    n = codes.numel()
    shifts = _msb_first(bits, codes.device)
    bitstream = ((codes.reshape(-1, 1) >> shifts) & 1).reshape(-1)
    pad = (-bitstream.numel()) % 8
    if pad:
        bitstream = torch.cat([bitstream, bitstream.new_zeros(pad)])
    octets = bitstream.view(-1, 8)
    out = octets[:, 0] << 7
    for j in range(1, 8):
        out |= octets[:, j] << (7 - j)
    assert out.numel() == packed_nbytes(n, bits)
    return out


def unpack(packed: torch.Tensor, count: int, bits: int) -> torch.Tensor:
    """Inverse of `pack`: the first `count` codes of `bits` bits each, as uint8."""
    if not 1 <= bits <= 8:
        raise ValueError(f"bits={bits!r} is not allowed: bits must be an integer in [1, 8]")
    if bits == 8:
        return packed[:count].clone()
    byte_shifts = _msb_first(8, packed.device)
    bitstream = ((packed.reshape(-1, 1) >> byte_shifts) & 1).reshape(-1)[: count * bits]
    fields = bitstream.view(count, bits)
    out = fields[:, 0].clone()
    for j in range(1, bits):
        out = (out << 1) | fields[:, j]
    return out
