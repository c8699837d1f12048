"""Bit packing: small unsigned codes (1 to 8 bits each) into a dense uint8 stream and back, in
torch: the compressors' code and the reference of the packing kernels (`launcher`).

Codes are laid out most significant bit first, one after another with no padding between them;
the stream is padded with zero bits to a whole byte. ``packed_nbytes(n, bits)`` is its length.

Eight codes of `bits` bits fill exactly `bits` bytes, so both directions work on groups of 8
codes: each byte of a group is the OR of a few shifted code columns (and each code the OR of
a few shifted byte columns, masked), all in uint8, about ``bits + 8`` column operations over
n / 8 rows; the last partial group goes through a zero-padded group of its own. Unpacking
1, 2 or 4 bits is one broadcast shift of every byte into its codes, and one mask.
"""
from __future__ import annotations

import functools

import torch


def packed_nbytes(count: int, bits: int) -> int:
    return (count * bits + 7) // 8


def _check_bits(bits) -> None:
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 8:
        raise ValueError(f"bits={bits!r} is not allowed: bits must be an integer in [1, 8]")


@functools.lru_cache(maxsize=None)
def _pieces(bits: int) -> tuple[tuple[int, int, int], ...]:
    """(byte i, code j, left shift s of code j into byte i; negative: right) for every pair
    of a byte and a code of one group of 8 codes that share bits."""
    out = []
    for i in range(bits):
        for j in range(8):
            lo = bits * j  # the code's first bit, counted from the group's MSB
            if lo < 8 * (i + 1) and lo + bits > 8 * i:
                out.append((i, j, 8 * i + 8 - lo - bits))
    return tuple(out)


def _shift(t: torch.Tensor, s: int) -> torch.Tensor:
    """t << s (s > 0) or t >> -s, always a new tensor (uint8: bits shifted out are lost)."""
    return t << s if s > 0 else (t >> -s if s < 0 else t.clone())


def _merge(parts) -> torch.Tensor:
    acc = None
    for p in parts:
        acc = p if acc is None else acc.bitwise_or_(p)
    return acc


def _pack_groups(groups: torch.Tensor, bits: int, out: torch.Tensor) -> None:
    """(G, 8) uint8 codes into the (G, bits) uint8 `out`."""
    for i in range(bits):
        out[:, i] = _merge(_shift(groups[:, j], s) for b, j, s in _pieces(bits) if b == i)


def _or_shifted(codes: torch.Tensor, bits: int, out: torch.Tensor) -> None:
    """out = the (rows, 8 / bits) `codes` of each row packed into one byte, MSB first, with
    one scratch column for the shifted codes."""
    torch.bitwise_left_shift(codes[:, 0], 8 - bits, out=out)
    scratch = torch.empty_like(out)
    for j in range(1, codes.shape[1]):
        out.bitwise_or_(torch.bitwise_left_shift(codes[:, j], 8 - bits * (j + 1), out=scratch))


def _unpack_groups(packed: torch.Tensor, bits: int, out: torch.Tensor) -> None:
    """(G, bits) uint8 bytes into the (G, 8) uint8 codes `out`."""
    mask = (1 << bits) - 1
    for j in range(8):
        code = _merge(_shift(packed[:, i], -s) for i, c, s in _pieces(bits) if c == j)
        out[:, j] = code.bitwise_and_(mask)


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack a 1-D uint8 tensor of values < 2**bits into ``packed_nbytes(len, bits)`` bytes."""
    _check_bits(bits)
    if codes.dtype != torch.uint8:
        raise TypeError(f"codes must be uint8, got {codes.dtype}")
    codes = codes.reshape(-1)
    if bits == 8:
        return codes.clone()
    n = codes.numel()
    out = torch.empty(packed_nbytes(n, bits), dtype=torch.uint8, device=codes.device)
    if 8 % bits == 0:  # one byte per 8 / bits codes: the byte column itself, contiguous
        per = 8 // bits
        full = n // per
        if full:
            _or_shifted(codes[: full * per].reshape(full, per), bits, out[:full])
        if n % per:
            tail = codes.new_zeros(1, per)
            tail[0, : n % per] = codes[full * per :]
            _or_shifted(tail, bits, out[full:])
        return out
    full = n // 8
    if full:
        _pack_groups(codes[: full * 8].reshape(full, 8), bits, out[: full * bits].view(full, bits))
    if n % 8:
        tail = codes.new_zeros(8)
        tail[: n % 8] = codes[full * 8 :]
        last = codes.new_empty(bits)
        _pack_groups(tail.view(1, 8), bits, last.view(1, bits))
        out[full * bits :] = last[: out.numel() - full * bits]
    return out


def unpack(packed: torch.Tensor, count: int, bits: int) -> torch.Tensor:
    """Inverse of `pack`: the first `count` codes of `bits` bits each, as uint8."""
    _check_bits(bits)
    packed = packed.reshape(-1)
    if bits == 8:
        return packed[:count].clone()
    if 8 % bits == 0:  # whole codes per byte: one broadcast shift into the output, one mask
        packed = packed[: packed_nbytes(count, bits)]
        per = 8 // bits
        shifts = torch.arange(8 - bits, -1, -bits, dtype=torch.uint8, device=packed.device)
        out = torch.empty(packed.numel(), per, dtype=torch.uint8, device=packed.device)
        torch.bitwise_right_shift(packed[:, None], shifts, out=out)
        return out.bitwise_and_((1 << bits) - 1).view(-1)[:count]
    out = torch.empty(count, dtype=torch.uint8, device=packed.device)
    full = count // 8
    if full:
        _unpack_groups(packed[: full * bits].reshape(full, bits), bits,
                       out[: full * 8].view(full, 8))
    if count % 8:
        rest = packed[full * bits : packed_nbytes(count, bits)]
        last = packed.new_zeros(bits)
        last[: rest.numel()] = rest
        codes = packed.new_empty(8)
        _unpack_groups(last.view(1, bits), bits, codes.view(1, 8))
        out[full * 8 :] = codes[: count % 8]
    return out
