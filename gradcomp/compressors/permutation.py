"""A keyed pseudo-random permutation of [0, n), in torch: random-k's shared positions.

``pi`` is a balanced Feistel network (Luby & Rackoff, SIAM J. Comput. 17(2), 1988) on 2m bits,
``m = max(1, ceil(bitlength(n - 1) / 2))``, so its domain [0, 4**m) holds fewer than 4n values
(4 when n = 1). Each of the `ROUNDS` rounds maps the halves ``(L, R)`` to
``(R, L ^ (hash32(R ^ key) & (2**m - 1)))`` with its own round key. Cycle walking (Black &
Rogaway, "Ciphers with Arbitrary Finite Domains", CT-RSA 2002) makes it a permutation of
[0, n): apply the network again while the value is >= n. Random-k keeps
``pi(0), ..., pi(k - 1)``: k distinct positions in O(k) work (about 4**m / n < 4 network
evaluations each, on average).

`hash32` is a two-multiply xorshift integer hash with the shifts (16, 15, 15) of C. Wellons'
hash-prospector search (2018) and odd multipliers below 2**31: 0x21F0AAAD from that search, and
its 0xD35A2D97 with the top bit cleared (so every product fits in int64). With 4 rounds the
positions pass the inclusion- and pair-frequency tests of `tests/test_kernels_randomk.py`;
this is a statistical pseudo-random permutation, not a cryptographic one.

Integers are int64 tensors; a product of a 32-bit value and a constant < 2**31 fits in int64
and is masked back to 32 bits, so the CPU, any torch device and the Triton kernel
(`gradcomp.kernels.randomk_positions`, which must equal this bit for bit) give the same
integers.
"""
from __future__ import annotations

import torch

#: Feistel rounds, one 31-bit key each.
ROUNDS = 4
KEY_LIMIT = 2**31
HASH_C1 = 0x21F0AAAD
HASH_C2 = 0x735A2D97
_M32 = 0xFFFFFFFF


def half_bits(n: int) -> int:
    """m: the bits of one Feistel half for a domain of n >= 1 values."""
    return max(1, -(-(n - 1).bit_length() // 2))


def check_keys(keys) -> list[int]:
    """`keys` as a list of `ROUNDS` ints in [0, 2**31), or a ValueError naming the option."""
    ok = (isinstance(keys, (list, tuple)) and len(keys) == ROUNDS
          and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < KEY_LIMIT
                  for v in keys))
    if not ok:
        raise ValueError(f"keys={keys!r} is not allowed: keys must be a list of {ROUNDS} "
                         f"integers in [0, 2**31)")
    return list(keys)


def check_counts(n, k) -> None:
    """n >= 0 and 0 <= k <= n, or a ValueError naming the option."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n={n!r} is not allowed: n must be an integer >= 0")
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= n:
        raise ValueError(f"k={k!r} is not allowed: k must be an integer in [0, n={n}]")


def draw_keys(generator: torch.Generator) -> list[int]:
    """`ROUNDS` fresh round keys from a CPU generator (one draw: no device work)."""
    return torch.randint(0, KEY_LIMIT, (ROUNDS,), generator=generator).tolist()


def hash32(x: torch.Tensor) -> torch.Tensor:
    """The 32-bit integer hash of int64 values in [0, 2**32), as int64 values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = (x * HASH_C1) & _M32
    x = x ^ (x >> 15)
    x = (x * HASH_C2) & _M32
    return x ^ (x >> 15)


def feistel(v: torch.Tensor, m: int, keys: list[int]) -> torch.Tensor:
    """The Feistel network on int64 values in [0, 4**m): a permutation of that range."""
    mask = (1 << m) - 1
    left, right = v >> m, v & mask
    for key in keys:
        left, right = right, left ^ (hash32(right ^ key) & mask)
    return (left << m) | right


def permute(v: torch.Tensor, n: int, keys: list[int]) -> torch.Tensor:
    """pi(v) for int64 values v in [0, n): the Feistel network, cycle-walked into [0, n)."""
    m = half_bits(n)
    out = feistel(v, m, keys)
    walking = torch.nonzero(out >= n).squeeze(1)
    while walking.numel():
        w = feistel(out[walking], m, keys)
        out[walking] = w
        walking = walking[w >= n]
    return out


def positions(n: int, k: int, keys, device=None) -> torch.Tensor:
    """``pi(0), ..., pi(k - 1)`` as int64 on `device`: k distinct positions in [0, n), in this
    order."""
    check_counts(n, k)
    keys = check_keys(keys)
    j = torch.arange(k, dtype=torch.int64, device=device)
    return permute(j, n, keys) if k else j
