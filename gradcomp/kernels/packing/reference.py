"""Bit packing: small unsigned codes (1 to 8 bits each) into a dense uint8 stream and back, in
torch: the compressors' code and the reference of the packing kernels (`launcher`).

Codes are laid out most significant bit first, one after another with no padding between them;
the stream is padded with zero bits to a whole byte. ``packed_nbytes(n, bits)`` is its length.

Eight codes of `bits` bits fill exactly `bits` bytes, so both directions work on groups of 8
codes. Up to `WORD_CODES` codes, where the cost is the number of torch operations, a group
goes through its 64-bit word: the codes shifted into their places and summed (they share no
bit), then each byte shifted out of the word (and back the same way, masked), a fixed handful
of operations whatever `bits` is. Beyond it, where the cost is memory traffic, all stays
uint8: each byte of a group is the OR of a few shifted code columns (and each code the OR of
a few shifted byte columns, masked), about ``bits + 8`` column operations over n / 8 rows;
the last partial group goes through a zero-padded group of its own. Unpacking 1, 2 or 4 bits
is one broadcast shift of every byte into its codes, and one mask, at any size.
"""
from __future__ import annotations

import functools

import torch

#: Up to this many codes, `pack` and `unpack` go through 64-bit words (faster on small tensors,
#: about 3x slower at a million codes on a CPU).
WORD_CODES = 1 << 15


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


def _word_shifts(bits: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """int64 shifts on `device` between a group of 8 codes and its 64-bit word (the group's
    `bits` bytes, MSB first, in the low 8 * bits bits): each code's left shift into the word,
    and each byte's right shift out of it."""
    return (torch.arange(7 * bits, -1, -bits, dtype=torch.int64, device=device),
            torch.arange(8 * (bits - 1), -1, -8, dtype=torch.int64, device=device))


def _words(columns: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """(G, 1) int64 words of the (G, k) uint8 `columns`, each shifted left by its `shifts`
    entry; the shifted columns share no bit, so their sum is their OR."""
    return (columns.to(torch.int64) << shifts).sum(dim=1, keepdim=True)


def _zero_padded(t: torch.Tensor, length: int) -> torch.Tensor:
    return t if t.numel() == length else torch.cat([t, t.new_zeros(length - t.numel())])


def _pack_words(codes: torch.Tensor, bits: int) -> torch.Tensor:
    n, groups = codes.numel(), -(-codes.numel() // 8)
    code_shifts, byte_shifts = _word_shifts(bits, codes.device)
    words = _words(_zero_padded(codes, 8 * groups).reshape(groups, 8), code_shifts)
    out = (words >> byte_shifts).to(torch.uint8).view(-1)  # the cast keeps each low byte
    nbytes = packed_nbytes(n, bits)
    return out if nbytes == out.numel() else out[:nbytes].clone()


def _unpack_words(packed: torch.Tensor, count: int, bits: int) -> torch.Tensor:
    groups = -(-count // 8)
    packed = _zero_padded(packed[: packed_nbytes(count, bits)], groups * bits)
    code_shifts, byte_shifts = _word_shifts(bits, packed.device)
    words = _words(packed.reshape(groups, bits), byte_shifts)
    return (words >> code_shifts).bitwise_and_((1 << bits) - 1).to(torch.uint8).view(-1)[:count]


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
    if n <= WORD_CODES:
        return _pack_words(codes, bits)
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
    if count <= WORD_CODES:
        return _unpack_words(packed, count, bits)
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
