"""Random-k's sampler (`gradcomp.kernels.randomk.reference`, the torch reference) and its kernels
(`gradcomp.kernels.randomk_encode`, `randomk_positions`, `randomk_gather`, `randomk_scatter`).

Without a GPU the kernels run on CPU tensors under Triton's interpreter (TRITON_INTERPRET=1 is
set below, before the kernels are first loaded); with a GPU the same tests run the compiled
kernels on CUDA tensors against the CPU reference. Positions are integers: kernel and reference
must agree bit for bit, on every device. The statistical tests draw their keys from fixed
seeds, so they are deterministic; each is shown to fail for a deliberately flawed sampler.
"""
import random

import pytest
import torch
# test_kernels sets TRITON_INTERPRET=1 without a GPU (before the kernels load) and skips
# without Triton.
from test_kernels import CUDA, DEVICE

from scipy import stats

import gradcomp
from gradcomp import kernels
from gradcomp.kernels.randomk import reference as P

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# The interpreter evaluates both sides of tl.where in numpy, which warns about overflow there.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _keys(rng: random.Random) -> list[int]:
    return [rng.randrange(2**31) for _ in range(P.ROUNDS)]


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiny tiles, so that small inputs take several programs (and the gather several rounds
    of its flag loop)."""
    from gradcomp.kernels.randomk import launcher as randomk

    tiles = dict(randomk._tiles(), positions=64, finite=256, encode_positions=16, gather=64,
                 flags=2, scatter=64)
    monkeypatch.setattr(randomk, "_tiles", lambda: tiles)
    return tiles


# -- the permutation: the spec, pinned -------------------------------------------------------
def _model_positions(n, k, keys):
    """The sampler's specification in plain Python integers (independent of torch)."""
    m = max(1, -(-(n - 1).bit_length() // 2))
    mask, m32 = (1 << m) - 1, 0xFFFFFFFF

    def hash32(x):
        x ^= x >> 16
        x = (x * 0x21F0AAAD) & m32
        x ^= x >> 15
        x = (x * 0x735A2D97) & m32
        return x ^ (x >> 15)

    def network(v):
        left, right = v >> m, v & mask
        for key in keys:
            left, right = right, left ^ (hash32(right ^ key) & mask)
        return (left << m) | right

    out = []
    for j in range(k):
        v = network(j)
        while v >= n:
            v = network(v)
        out.append(v)
    return out


def test_reference_equals_the_specification_and_is_pinned():
    from gradcomp.kernels.randomk import jit as K

    assert (P.HASH_C1, P.HASH_C2) == (K.HASH_C1.value, K.HASH_C2.value) == (0x21F0AAAD,
                                                                             0x735A2D97)
    assert P.HASH_C1 < 2**31 and P.HASH_C2 < 2**31 and P.HASH_C1 % 2 and P.HASH_C2 % 2
    rng = random.Random(1)
    for n, k in [(1, 1), (2, 2), (5, 5), (17, 17), (64, 64), (65, 20), (1000, 300),
                 (4**7 + 1, 50), (2**28 - 1, 20), (3 * 2**40 + 7, 10)]:
        for keys in (_keys(rng), [0] * 4, [2**31 - 1] * 4):
            assert P.positions(n, k, keys).tolist() == _model_positions(n, k, keys), (n, k, keys)
    # Every rank must draw the same positions: a change here changes the wire protocol.
    assert P.positions(1000, 6, [1, 2, 3, 4]).tolist() == [774, 388, 292, 562, 217, 929]
    assert P.positions(2**28 - 1, 4, [123456789, 0, 2**31 - 1, 42]).tolist() == [
        234206470, 74560703, 29143051, 81808487]
    assert P.draw_keys(torch.Generator().manual_seed(0)) == [398764591, 1478610112,
                                                             1537364731, 1491434855]


def test_half_bits_cover_n_with_fewer_than_4n_values():
    assert [P.half_bits(n) for n in (1, 2, 4, 5, 16, 17, 64, 65)] == [1, 1, 1, 2, 2, 3, 3, 4]
    for n in list(range(2, 3000)) + [2**28 - 1, 2**28, 2**28 + 1, 4**15 + 1]:
        assert n <= 4 ** P.half_bits(n) < 4 * n, n


def test_feistel_is_a_bijection_of_its_domain_and_pi_of_0_n():
    rng = random.Random(2)
    for m in range(1, 7):
        v = torch.arange(4**m)
        for _ in range(3):
            out = P.feistel(v, m, _keys(rng))
            assert torch.equal(out.sort().values, v), m
    for n in list(range(1, 130)) + [255, 256, 257, 1000, 4097, 10_000]:
        keys = _keys(rng)
        pos = P.positions(n, n, keys)
        assert torch.equal(pos.sort().values, torch.arange(n)), n  # k = n: a permutation
        k = max(1, n // 3)
        assert torch.equal(P.positions(n, k, keys), pos[:k])  # a prefix of the same order
    assert not torch.equal(P.positions(1000, 1000, [1, 2, 3, 4]), torch.arange(1000))


def test_tabulated_rounds_and_walk_steps_do_not_change_the_permutation():
    rng = random.Random(12)
    for m in (1, 2, 3, 5, 7, 13):
        keys = _keys(rng)
        v = torch.arange(min(4**m, 5000)) * (4**m // min(4**m, 5000))
        assert torch.equal(P.feistel(v, m, keys, P.round_tables(m, keys)),
                           P.feistel(v, m, keys)), m
    # The masked steps (the default off the CPU) against compaction after every step.
    for n, k in [(5, 5), (65, 65), (1000, 300), (4**7 + 1, 3000)]:
        keys = _keys(rng)
        want = P.positions(n, k, keys)
        for steps in (2, 3, P.WALK_STEPS, 8):
            assert torch.equal(P.permute(torch.arange(k), n, keys, walk_steps=steps), want)


def test_a_small_cpu_gradient_looks_its_rounds_up_in_tables(monkeypatch):
    # 1% of a 5.5k-value bucket (the convergence task's): a few dozen values to walk, where
    # every hashed round costs ~10 torch calls; the tables are computed once, for 2**7 halves.
    built, tables = [], P.round_tables
    monkeypatch.setattr(P, "round_tables", lambda m, *a: built.append(m) or tables(m, *a))
    keys = [5, 6, 7, 8]
    got = P.positions(5508, 55, keys)
    assert built == [7]
    want = P.feistel(torch.arange(55), 7, keys)
    while (want >= 5508).any():  # cycle-walked with hashed rounds
        want = torch.where(want >= 5508, P.feistel(want, 7, keys), want)
    assert torch.equal(got, want)


def test_reference_rejects_bad_arguments():
    for bad in ([1, 2, 3], [1, 2, 3, 2**31], [1, 2, 3, -1], [1, 2, 3, 1.0], "1234", None):
        with pytest.raises(ValueError, match="keys"):
            P.positions(10, 2, bad)
    with pytest.raises(ValueError, match="k="):
        P.positions(10, 11, [1, 2, 3, 4])
    with pytest.raises(ValueError, match="n="):
        P.positions(-1, 0, [1, 2, 3, 4])
    assert P.positions(0, 0, [1, 2, 3, 4]).numel() == 0


# -- statistics: positions look like a uniform k-subset -------------------------------------
def _feistel_draws(n, k, draws, seed, rounds=P.ROUNDS):
    """(draws, k) positions pi(0..k-1), one key set per row, all rows at once: the library's
    `feistel` with (draws, 1) key tensors, cycle-walked with `where`."""
    g = torch.Generator().manual_seed(seed)
    keys = torch.randint(0, P.KEY_LIMIT, (rounds, draws, 1), generator=g)
    m = P.half_bits(n)
    out = P.feistel(torch.arange(k).expand(draws, k), m, list(keys))
    while (out >= n).any():
        out = torch.where(out >= n, P.feistel(out, m, list(keys)), out)
    if rounds == P.ROUNDS:  # the same as the library's sampler, row by row
        for row in (0, draws - 1):
            assert torch.equal(out[row], P.positions(n, k, keys[:, row, 0].tolist()))
    return out


def _uniform_draws(n, k, draws, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(n, generator=g)[:k] for _ in range(draws)])


def _low_biased_draws(n, k, draws, seed):
    """Distinct positions, the lower half 1.3 times as likely as the upper half."""
    w = torch.ones(draws, n)
    w[:, : n // 2] = 1.3
    return torch.multinomial(w, k, replacement=False,
                             generator=torch.Generator().manual_seed(seed))


def _p_values(pos, n, k):
    """p-values of chi-square tests of (inclusion counts of each position, co-inclusion counts
    of each pair of positions) against a uniformly random k-subset."""
    draws = pos.shape[0]
    onehot = torch.zeros(draws, n, dtype=torch.float64).scatter_(1, pos, 1.0)
    counts = onehot.sum(0)
    e = draws * k / n
    chi_inc = ((counts - e) ** 2 / (e * (1 - k / n))).sum().item()  # sum fixed: n - 1 dof
    iu = torch.triu_indices(n, n, 1)
    pairs = (onehot.T @ onehot)[iu[0], iu[1]]
    ep = draws * k * (k - 1) / (n * (n - 1))
    chi_pair = ((pairs - ep) ** 2 / ep).sum().item()
    return stats.chi2.sf(chi_inc, n - 1), stats.chi2.sf(chi_pair, n * (n - 1) // 2 - 1)


ALPHA = 1e-6  # fixed seeds: deterministic; a sound sampler is far from this


def _plausible(p: float) -> bool:
    """Neither too far from uniform nor too regular (two-sided)."""
    return ALPHA < p < 1 - ALPHA


# n = 64: no cycle walking; 60 and 65: walks (65 just above 4**3: 3/4 of the domain is >= n).
@pytest.mark.parametrize("n,k,draws", [(64, 8, 4000), (60, 8, 4000), (65, 8, 4000)])
def test_positions_are_uniform_k_subsets(n, k, draws):
    p_inc, p_pair = _p_values(_feistel_draws(n, k, draws, seed=n), n, k)
    assert _plausible(p_inc) and _plausible(p_pair), (p_inc, p_pair)


def test_frequency_tests_pass_uniform_and_fail_flawed_samplers():
    n, k, draws = 64, 8, 4000
    p_inc, p_pair = _p_values(_uniform_draws(n, k, draws, seed=3), n, k)
    assert _plausible(p_inc) and _plausible(p_pair), "a truly uniform sampler must pass"
    p_inc, _ = _p_values(_low_biased_draws(n, k, draws, seed=3), n, k)
    assert p_inc < ALPHA, "a 1.3x preference for half of the positions must fail"
    # One Feistel round puts exactly one position in each block of 8: every position is
    # equally likely, but pairs are not; only the pair test sees it.
    p_inc, p_pair = _p_values(_feistel_draws(n, k, draws, seed=3, rounds=1), n, k)
    assert _plausible(p_inc) and p_pair < ALPHA, (p_inc, p_pair)
    # Two rounds are not enough either (why the library uses 4; 3 already pass here).
    _, p_pair = _p_values(_feistel_draws(60, k, draws, seed=60, rounds=2), 60, k)
    assert p_pair < ALPHA, p_pair


# -- the positions kernel --------------------------------------------------------------------
# n = 1, k = n, n just above a power of 4 (5, 17, 65, 257, 4097: 3/4 of the network's domain
# lies outside [0, n), so walks are long), powers of 4 (no walking), n not a power of two.
CASES = [(1, 1), (2, 1), (3, 3), (4, 4), (5, 5), (16, 3), (17, 17), (64, 64), (65, 65),
         (257, 40), (1000, 1000), (777, 3), (4097, 30), (5000, 1)]
if CUDA:  # compiled: big sizes are cheap
    CASES += [(25_600_000, 256_000), (2**28 - 1, 3000), (4**13 + 1, 100_000), (10**6, 10**6)]


@pytest.mark.parametrize("n,k", CASES)
def test_kernel_positions_equal_the_reference(n, k):
    rng = random.Random(n * 7919 + k)
    extremes = [[0, 0, 0, 2**31 - 1]] if n in (5, 64, 1000) else []
    for keys in [_keys(rng)] + extremes:
        got = kernels.randomk_positions(n, k, keys, DEVICE)
        assert got.dtype == torch.int64 and got.device.type == DEVICE and got.shape == (k,)
        assert torch.equal(got.cpu(), P.positions(n, k, keys)), (n, k, keys)


def test_kernel_positions_over_several_programs(small_tiles):
    rng = random.Random(5)
    for n, k in [(250, 250), (1000, 130)]:  # 4 and 3 programs, the last one partial
        keys = _keys(rng)
        got = kernels.randomk_positions(n, k, keys, DEVICE).cpu()
        assert torch.equal(got, P.positions(n, k, keys))
        assert got.unique().numel() == k and 0 <= got.min() and got.max() < n


def test_kernel_positions_reject_bad_arguments():
    with pytest.raises(ValueError, match="keys"):
        kernels.randomk_positions(10, 2, [1, 2, 3], DEVICE)
    with pytest.raises(ValueError, match="keys"):
        kernels.randomk_positions(10, 2, [1, 2, 3, 2**31], DEVICE)
    with pytest.raises(ValueError, match="k="):
        kernels.randomk_positions(10, 11, [1, 2, 3, 4], DEVICE)
    with pytest.raises(ValueError, match="n="):
        kernels.randomk_positions(0, 0, [1, 2, 3, 4], DEVICE)
    with pytest.raises(ValueError, match="n="):
        kernels.randomk_positions(2**28, 1, [1, 2, 3, 4], DEVICE)
    assert kernels.randomk_positions(10, 0, [1, 2, 3, 4], DEVICE).numel() == 0


# -- the encode: positions inside the finiteness pass, then the gather -------------------------
def _x(n, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g).to(dtype).to(DEVICE)


def _check_encode(x, k, keys):
    values, indices = kernels.randomk_encode(x, k, keys)
    want = P.positions(x.numel(), k, keys)
    assert indices.dtype == torch.int64 and indices.device.type == DEVICE
    assert torch.equal(indices.cpu(), want), (x.numel(), k, keys)
    assert values.dtype == x.dtype and torch.equal(values, x.reshape(-1)[want.to(DEVICE)])


# Position tiles: fewer than programs (spread: every > 1), one per program, several per program.
@pytest.mark.parametrize("n,k", [(1000, 10), (4000, 40), (1000, 64), (1000, 100), (260, 48)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_encode_equals_the_reference(n, k, dtype, small_tiles):
    rng = random.Random(n + k)
    _check_encode(_x(n, dtype, seed=k).reshape(-1, 10 if n % 10 == 0 else 1), k, _keys(rng))


@pytest.mark.parametrize("n,k", [(1, 1), (2, 1), (5, 5), (65, 65), (4097, 30), (5000, 1)]
                         + ([(25_600_000, 256_000), (2**28 - 1, 3000), (10**6, 10**6)]
                            if CUDA else []))
def test_encode_equals_the_reference_with_default_tiles(n, k):
    rng = random.Random(n * 31 + k)
    _check_encode(_x(n, torch.float32, seed=n), k, _keys(rng))


def test_encode_is_all_nan_when_x_is_not_finite(small_tiles):
    # First, middle and last tile of the finiteness pass.
    for dtype, where, bad in zip(DTYPES, (0, 511, 999), ("nan", "inf", "-inf")):
        y = _x(1000, dtype, seed=5)
        y[where] = float(bad)
        values, indices = kernels.randomk_encode(y, 100, [5, 6, 7, 8])
        assert values.isnan().all() and values.dtype == dtype, (dtype, where)
        assert torch.equal(indices.cpu(), P.positions(1000, 100, [5, 6, 7, 8]))
    values, _ = kernels.randomk_encode(y.nan_to_num(), 100, [5, 6, 7, 8])
    assert torch.isfinite(values).all()


def test_encode_rejects_bad_arguments():
    x = _x(10, torch.float32)
    with pytest.raises(ValueError, match="keys"):
        kernels.randomk_encode(x, 2, [1, 2, 3])
    with pytest.raises(ValueError, match="k="):
        kernels.randomk_encode(x, 11, [1, 2, 3, 4])
    with pytest.raises(TypeError, match="dtype"):
        kernels.randomk_encode(x.double(), 2, [1, 2, 3, 4])
    values, indices = kernels.randomk_encode(x, 0, [1, 2, 3, 4])
    assert values.shape == indices.shape == (0,)


# -- the decode: zeros and the values at their positions ----------------------------------------
def _torch_decode(values, indices, n):
    out = torch.zeros(n, dtype=values.dtype, device=values.device)
    return out.index_put_((indices.long(),), values)


def _bits(t):
    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_equals_the_torch_decode_bit_for_bit(dtype, small_tiles):
    rng = random.Random(13)
    specials = torch.tensor([-0.0, float("nan"), float("inf"), float("-inf"), 0.0])
    for n, k in [(1, 1), (2, 1), (1000, 1), (1000, 1000), (1000, 100), (257, 200)]:
        indices = P.positions(n, k, _keys(rng)).to(DEVICE)
        values = _x(k, dtype, seed=n + k)
        values[: min(k, 5)] = specials[: min(k, 5)].to(dtype)  # sign of zero, NaN, Inf kept
        out = kernels.randomk_scatter(values, indices, n)
        assert out.dtype == dtype and out.shape == (n,) and out.device.type == DEVICE
        assert torch.equal(_bits(out), _bits(_torch_decode(values, indices, n))), (n, k)
    idx32 = indices.to(torch.int32)  # int32 indices, 2-D values
    out = kernels.randomk_scatter(values.reshape(10, 20), idx32.reshape(20, 10), 257)
    assert torch.equal(_bits(out), _bits(_torch_decode(values, indices, 257)))


def test_scatter_with_default_tiles_and_its_guards():
    rng = random.Random(14)
    for n, k in [(1, 1), (5000, 5000), (5000, 50)] + ([(25_600_000, 256_000)] if CUDA else []):
        indices = P.positions(n, k, _keys(rng)).to(DEVICE)
        values = _x(k, torch.float32, seed=k)
        out = kernels.randomk_scatter(values, indices, n)
        assert torch.equal(_bits(out), _bits(_torch_decode(values, indices, n))), (n, k)
    out = kernels.randomk_scatter(torch.ones(4, device=DEVICE),
                                  torch.tensor([0, 9, -1, 10], device=DEVICE), 10)
    assert out.tolist() == [1.0] + [0.0] * 8 + [1.0]  # outside [0, n): never written
    assert torch.equal(kernels.randomk_scatter(torch.ones(0, device=DEVICE),
                                               torch.zeros(0, dtype=torch.int64, device=DEVICE),
                                               3), torch.zeros(3, device=DEVICE))
    v, i = torch.ones(2, device=DEVICE), torch.tensor([0, 1], device=DEVICE)
    with pytest.raises(TypeError, match="values"):
        kernels.randomk_scatter(v.double(), i, 5)
    with pytest.raises(TypeError, match="indices"):
        kernels.randomk_scatter(v, i.float(), 5)
    with pytest.raises(ValueError, match="one index per value"):
        kernels.randomk_scatter(v, i[:1], 5)
    with pytest.raises(ValueError, match="n="):
        kernels.randomk_scatter(v, i, 1)
    if CUDA:
        with pytest.raises(ValueError, match="device"):
            kernels.randomk_scatter(v, i.cpu(), 5)


# -- the gather --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_equals_indexing(dtype, small_tiles):
    x = _x(1000, dtype)
    positions = P.positions(1000, 100, [9, 8, 7, 6], DEVICE)
    assert torch.equal(kernels.randomk_gather(x, positions), x[positions])
    g = torch.Generator().manual_seed(1)
    for idx_dtype in (torch.int64, torch.int32):  # any indices: repeats, any order
        idx = torch.randint(0, 1000, (77,), generator=g).to(idx_dtype).to(DEVICE)
        assert torch.equal(kernels.randomk_gather(x.reshape(10, 100), idx), x[idx.long()])
    assert kernels.randomk_gather(x, idx[:0]).shape == (0,)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_is_all_nan_when_x_is_not_finite(dtype, small_tiles):
    x = _x(1000, dtype, seed=2)  # 4 finiteness tiles of 256, the last one partial
    idx = P.positions(1000, 100, [1, 2, 3, 4]).to(DEVICE)
    free = sorted(set(range(1000)) - set(idx.tolist()))
    cases = [(float("nan"), free[0]), (float("inf"), free[len(free) // 2]),
             (float("-inf"), free[-1]), (float("nan"), int(idx[7]))]
    for bad, where in cases:  # first tile, a middle one, the last; one position gathered
        y = x.clone()
        y[where] = bad
        out = kernels.randomk_gather(y, idx)
        assert out.dtype == dtype and out.isnan().all(), (bad, where)
    assert torch.isfinite(kernels.randomk_gather(x, idx)).all()
    big = torch.full((1000,), 6e4 if dtype == torch.float16 else 3e38, dtype=dtype,
                     device=DEVICE)
    assert torch.isfinite(kernels.randomk_gather(big, idx)).all(), "large is not infinite"


def test_gather_guards_its_inputs():
    x = _x(100, torch.float32)
    out = kernels.randomk_gather(x, torch.tensor([0, 100, -1, 99], device=DEVICE))
    assert out[0] == x[0] and out[3] == x[99] and out[1:3].isnan().all()  # never read
    with pytest.raises(TypeError, match="indices"):
        kernels.randomk_gather(x, torch.tensor([0.0], device=DEVICE))
    with pytest.raises(TypeError, match="dtype"):
        kernels.randomk_gather(x.double(), torch.tensor([0], device=DEVICE))
    if CUDA:
        with pytest.raises(ValueError, match="device"):
            kernels.randomk_gather(x, torch.tensor([0]))


# -- the compressor: one sampler on every device ---------------------------------------------
@pytest.fixture
def kernel_path(monkeypatch):
    """Make the compressor take the kernels (CUDA tensors on a GPU; under the interpreter, CPU
    tensors, by forcing `kernels.supports` unless GRADCOMP_KERNELS=0), and record their
    calls."""
    from gradcomp.kernels.randomk import launcher as randomk

    calls = []

    def spy(name):
        def call(*args):
            calls.append(name)
            return getattr(randomk, name)(*args)
        return call

    for name in ("randomk_encode", "randomk_scatter"):
        monkeypatch.setattr(kernels, name, spy(name), raising=False)
    if not CUDA:
        monkeypatch.setattr(kernels, "supports", lambda x: kernels.enabled()
                            and x.dtype in DTYPES and x.numel() > 0)
        monkeypatch.setattr(kernels, "supports_decode", lambda wire, dtype, numel:
                            kernels.enabled() and dtype in DTYPES and numel > 0)
    return calls


def _torch_path(method, *args):
    """`method(*args)` (a compressor's compress or decompress) on the torch reference, whatever
    the device."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRADCOMP_KERNELS", "0")
        return method(*args)


@pytest.mark.parametrize("dtype", DTYPES)
def test_compressor_positions_and_values_agree_between_kernel_and_torch(dtype, kernel_path):
    x = _x(4000, dtype, seed=4).reshape(40, 100)  # 4000 / 4**6: short cycle walks
    kern = gradcomp.compressor("randomk", ratio=0.03, seed=21)
    ref = gradcomp.compressor("randomk", ratio=0.03, seed=21)
    ref.set_rank(1)  # shared randomness ignores the rank
    twin = gradcomp.compressor("randomk", ratio=0.03, seed=21)  # the reference on x's device
    for step in range(2):
        pk, pr = kern.compress(x), _torch_path(ref.compress, x.cpu())
        assert torch.equal(pk.meta["indices"].cpu(), pr.meta["indices"]), step
        assert torch.equal(pk.tensors[0].cpu(), pr.tensors[0]), step
        dense = kern.decompress(pk)
        assert kernel_path == ["randomk_encode", "randomk_scatter"] * (step + 1), "kernels ran"
        assert torch.equal(dense.cpu(), _torch_path(ref.decompress, pr)), step
        assert torch.equal(dense, _torch_path(kern.decompress, pk)), step
        pt = _torch_path(twin.compress, x)
        assert torch.equal(pt.meta["indices"].cpu(), pr.meta["indices"]), step
        x = x.roll(1)
    assert kern.shared_state() == ref.shared_state() == twin.shared_state()
    y = x.clone()
    y[3, 7] = float("nan")
    assert kern.compress(y).tensors[0].isnan().all()


def test_compressor_round_trip_on_the_kernel_path(kernel_path):
    world, n = 3, 4000
    comps = [gradcomp.compressor("randomk", ratio=0.05, seed=9) for _ in range(world)]
    xs = [_x(n, torch.float32, seed=10 + r) for r in range(world)]
    payloads = [c.compress(x) for c, x in zip(comps, xs)]
    summed = payloads[0].with_tensors([sum(p.tensors[0] for p in payloads)])
    out = comps[1].decompress(summed)  # any rank decodes the all-reduced sum
    idx = payloads[0].meta["indices"]
    want = torch.zeros(n, device=DEVICE)
    want[idx] = sum(x[idx] for x in xs)
    assert torch.equal(out, want)
    ef = gradcomp.compressor("randomk", ratio=0.05, seed=9, error_feedback=True)
    x = xs[0].reshape(40, 100)
    dense = ef.decompress(ef.compress(x, key="w"))
    assert torch.equal(ef.residuals["w"] + dense, x) and (dense != 0).sum() == 200
    assert kernel_path.count("randomk_encode") == world + 1, "the kernels must have run"
    assert kernel_path.count("randomk_scatter") >= 2, "the kernels must have run"
