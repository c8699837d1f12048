"""Random-k in torch: a keyed pseudo-random permutation of [0, n) whose first k values are the
shared positions, the gather of their values (`randomk_encode`) and the scatter back
(`randomk_scatter`); the compressor's code off CUDA and the Triton kernels' reference.

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
and is masked back to 32 bits, so the CPU, any torch device and the Triton kernels
(`gradcomp.kernels.randomk_positions` / `randomk_encode`, which must equal this bit for bit)
give the same integers.

Cost of the torch code: a round's function depends only on the m-bit right half, so for
``2**m <= TABLE_LIMIT`` (n < 2**32) `positions` tabulates the 4 round functions once (4 * 2**m
hashes) and a network evaluation is then 12 tensor operations (4 table lookups) instead of
~55. Cycle walking re-evaluates only the values still >= n; on a CPU it compacts them after
every step, on other devices (where each step is a few kernel launches and each compaction a
host sync) it takes `WALK_STEPS` masked steps between compactions, so a call syncs about
``1 + (longest walk) / WALK_STEPS`` times (9 for k = 256,000 of n = 25.6M, whose longest walk
is 30 evaluations) instead of once per step.
"""
from __future__ import annotations

import math

import torch

from ..blocks import all_finite

#: Feistel rounds, one 31-bit key each.
ROUNDS = 4
KEY_LIMIT = 2**31
HASH_C1 = 0x21F0AAAD
HASH_C2 = 0x735A2D97
_M32 = 0xFFFFFFFF
#: Largest 2**m for which `positions` tabulates the round functions (4 tables of int64).
TABLE_LIMIT = 2**16
#: Up to this 2**m a CPU tabulates whatever the number of values: a small gradient's walk
#: costs torch calls (~10 us each, ~10 per hashed round), not arithmetic (random-k at 1% of
#: 5.5k values: 1.4 ms with tables, 4.6 ms without, 2026-11-28).
CPU_TABLE_MIN = 2**12
#: Masked walk steps between two compactions of the walking values off the CPU.
WALK_STEPS = 4


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


def round_tables(m: int, keys: list[int], device=None) -> tuple[torch.Tensor, ...]:
    """`ROUNDS` int64 tables of 2**m values: table r holds round r's function
    ``hash32(R ^ key_r) & (2**m - 1)`` for every half R in [0, 2**m)."""
    r = torch.arange(1 << m, dtype=torch.int64, device=device)
    return (hash32(torch.stack([r ^ key for key in keys])) & ((1 << m) - 1)).unbind()


def feistel(v: torch.Tensor, m: int, keys: list[int], tables=None) -> torch.Tensor:
    """The Feistel network on int64 values in [0, 4**m): a permutation of that range. With
    `tables` (``round_tables(m, keys)``; v 1-D) the round functions are looked up, not
    hashed."""
    mask = (1 << m) - 1
    left, right = v >> m, v & mask
    for r, key in enumerate(keys):
        # index_select: ~5x faster than advanced indexing on a CPU
        f = hash32(right ^ key) & mask if tables is None else tables[r].index_select(0, right)
        left, right = right, left ^ f
    return (left << m) | right


def permute(v: torch.Tensor, n: int, keys: list[int], walk_steps: int | None = None
            ) -> torch.Tensor:
    """pi(v) for int64 values v in [0, n): the Feistel network, cycle-walked into [0, n), with
    `walk_steps` steps between compactions (default: 1 on a CPU, `WALK_STEPS` elsewhere)."""
    m = half_bits(n)
    cpu = v.device.type == "cpu"
    # A CPU pays 4 * 2**m hashes for the tables and saves ~10 per value (and ~30 torch calls
    # per network evaluation, `CPU_TABLE_MIN`); elsewhere tables save ~40 kernel launches.
    tabulate = (1 << m) <= TABLE_LIMIT and (
        not cpu or (1 << m) <= max(2 * v.numel(), CPU_TABLE_MIN))
    tables = round_tables(m, keys, v.device) if tabulate else None
    out = feistel(v, m, keys, tables)
    steps = walk_steps or (1 if cpu else WALK_STEPS)
    walking = torch.nonzero(out >= n).squeeze(1)
    while walking.numel():  # one host sync per `steps` walk steps
        w = feistel(out[walking], m, keys, tables)
        for _ in range(steps - 1):
            w = torch.where(w >= n, feistel(w, m, keys, tables), w)
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


def randomk_encode(x: torch.Tensor, k: int, keys) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices) of random-k on the 1-D `x`: indices = ``positions(n, k, keys)``,
    values = ``x[indices]``, every value NaN if x holds a NaN or +-Inf."""
    indices = positions(x.numel(), k, keys, x.device)
    return torch.where(all_finite(x), x[indices], math.nan), indices


def randomk_scatter(values: torch.Tensor, indices: torch.Tensor, n: int) -> torch.Tensor:
    """The dense (n,) tensor holding ``values[j]`` at ``indices[j]`` and zeros elsewhere."""
    out = torch.zeros(n, dtype=values.dtype, device=values.device)
    return out.index_put_((indices,), values)
