"""Triton top-k and threshold selection (gradcomp.kernels.sparse) against plain torch references.

Without a GPU the kernels run on CPU tensors under Triton's interpreter (TRITON_INTERPRET=1 is
set below, before the kernels are first loaded), with small inputs on which the wrappers still
use several chunks, tiles and candidate blocks; with a GPU the same tests run on CUDA tensors
(plus a larger input), and the compressors' dispatch is compared with their torch path.

Top-k: the selection must be exactly the k largest magnitudes (NaN and +-Inf count as +Inf)
with ties at the cut resolved first by position, checked against a stable sort; values are
bit copies of x. Threshold: the wire tensors equal the torch reference's bit for bit.
"""
import math
import random

import pytest
import torch
# test_kernels sets TRITON_INTERPRET=1 without a GPU (before the kernels load) and skips
# without Triton.
from test_kernels import CUDA, DEVICE, fresh_seed, torch_path

import gradcomp
from gradcomp import kernels
from gradcomp.compressors.sparsify import _count
from gradcomp.kernels.sparse.reference import magnitudes

# The interpreter evaluates both sides of tl.where in numpy, which warns about overflow there.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
F64 = torch.float64
_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def bits(t):
    return t.view(_BITS[t.dtype])


# -- inputs ----------------------------------------------------------------------------------
def sample(family, n, dtype, seed):
    """Random gradients of a few shapes that steer the selection down each path: 'mixed'
    (many magnitudes, zeros, -0.0, NaN, +-Inf, ties, subnormals, huge values), 'ties' (few
    distinct magnitudes), 'octave' (all in one octave: many candidates), 'sparse' (mostly
    zeros: the zero bin), 'nonfinite' (mostly NaN/Inf), 'tiny' (below 2**-39) and 'huge'
    (above 2**22): the clamped first-level bins."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=g, dtype=F64)
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).to(F64)
    if family == "mixed":
        x = torch.randn(n, generator=g, dtype=F64) * 10.0 ** torch.randint(-3, 3, (n,),
                                                                          generator=g)
        x[torch.rand(n, generator=g) < 0.05] = 0.0
        x[torch.rand(n, generator=g) < 0.02] = -0.0
        x[torch.rand(n, generator=g) < 0.002] = math.nan
        x[torch.rand(n, generator=g) < 0.001] = math.inf
        x[torch.rand(n, generator=g) < 0.001] = -math.inf
        x[torch.rand(n, generator=g) < 0.05] = 1.5  # a tie inside the bulk
        x[torch.rand(n, generator=g) < 0.01] = 1e-40 if dtype != torch.float16 else 1e-7
        x[torch.rand(n, generator=g) < 0.002] = 3e38 if dtype != torch.float16 else 6e4
    elif family == "ties":
        x = sign * torch.tensor([0.0, 0.5, 1.0, 2.0], dtype=F64)[
            torch.randint(0, 4, (n,), generator=g)]
    elif family == "octave":
        x = sign * (1.0 + u)
    elif family == "sparse":
        x = torch.where(u < 0.005, sign * (1.0 + u), torch.zeros((), dtype=F64))
        x[torch.rand(n, generator=g) < 0.3] = -0.0
    elif family == "nonfinite":
        x = torch.tensor([math.nan, math.inf, -math.inf, 1.0], dtype=F64)[
            torch.randint(0, 4, (n,), generator=g)]
    elif family == "tiny":
        lo = 1e-45 if dtype != torch.float16 else 6e-8
        x = sign * lo * 2.0 ** (u * (10 if dtype == torch.float16 else 60))
        if dtype == torch.float16:  # float16 has nothing below 2**-39 but zero
            x[u < 0.9] = 0.0
    elif family == "huge":
        x = sign * 2.0 ** (22 + u * 20 if dtype != torch.float16 else 14 + u * 1.9)
    else:
        raise ValueError(family)
    return x.to(dtype).to(DEVICE)


FAMILIES = ["mixed", "ties", "octave", "sparse", "nonfinite", "tiny", "huge"]


# -- top-k -----------------------------------------------------------------------------------
def keys(x):
    """int32 keys of |x| as the compressors compare them (NaN, +-Inf -> +Inf)."""
    return magnitudes(x.reshape(-1)).view(torch.int32)


def first_by_position(x, k):
    """Indices (ascending) of the k largest magnitudes, ties going to the first positions."""
    order = torch.sort(keys(x).long(), descending=True, stable=True).indices
    return order[:k].sort().values


def check_topk(x, k, tag):
    vals, idx = kernels.topk_select(x, k)
    flat = x.reshape(-1)
    assert vals.dtype == x.dtype and idx.dtype == torch.int32, tag
    assert vals.shape == (k,) and idx.shape == (k,), tag
    i = idx.long()
    assert torch.equal(i.sort().values, first_by_position(x, k)), f"selection {tag}"
    assert torch.equal(bits(vals), bits(flat[i])), f"values {tag}"
    mags = magnitudes(flat)
    want = torch.topk(mags, k).values.sort().values
    assert torch.equal(mags[i].sort().values.view(torch.int32), want.view(torch.int32)), tag
    # the decode, against the torch compressor's where the cut is not a tie
    c = gradcomp.compressor("topk", ratio=k / flat.numel())
    assert _count(c.ratio, flat.numel()) == k
    with torch_path():
        ref = c.compress(x)
        got = c.decompress(ref.with_tensors([vals, idx]))
        srt = torch.sort(mags, descending=True).values
        if k == flat.numel() or srt[k - 1] > srt[k]:
            assert torch.equal(bits(got), bits(c.decompress(ref))), f"decode {tag}"
    return vals, idx


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_topk_is_exact_with_ties_by_position(family, dtype):
    seed = fresh_seed()
    n = random.choice([1023, 3000, 5000])
    k = random.choice([1, 7, n // 100 + 1, n // 3, n - 1])
    check_topk(sample(family, n, dtype, seed), k, f"{family} n={n} k={k} {dtype} seed={seed}")


@pytest.mark.parametrize("n,k", [(1, 1), (5, 5), (5, 2), (1024, 1024), (1025, 1), (2049, 2049),
                                 (3001, 1500)])
def test_topk_sizes(n, k):
    seed = fresh_seed()
    check_topk(sample("mixed", n, torch.float32, seed), k, f"n={n} k={k} seed={seed}")


def test_topk_many_candidates_over_several_blocks():
    """One octave holds everything: the radix select over the candidates spans several tiles
    and blocks, and the k-th magnitude is tied across the cut."""
    seed = fresh_seed()
    x = sample("octave", 9000, torch.float32, seed)
    x[::3] = 1.75
    check_topk(x, 4000, f"seed={seed}")


@pytest.mark.skipif(not CUDA, reason="many programs and chunks: too slow for the interpreter")
@pytest.mark.parametrize("family", ["mixed", "octave", "sparse"])
def test_topk_large_on_cuda(family):
    seed = fresh_seed()
    n = 3_000_017
    check_topk(sample(family, n, torch.float32, seed), _count(0.01, n), f"{family} seed={seed}")


# -- threshold -------------------------------------------------------------------------------
def threshold_reference(x, t, ratio):
    """The torch compressor's wire tensors for the magnitude threshold t."""
    c = gradcomp.compressor("threshold", ratio=ratio)
    c.estimate_threshold = lambda flat, mags=None: t  # the rest of `compress` as it is
    with torch_path():
        return c.compress(x).tensors


def check_threshold(x, t, ratio, tag):
    k = _count(ratio, x.numel())
    want = threshold_reference(x, t, ratio)
    got = kernels.threshold_select(x, t, k)
    assert got[0].dtype == x.dtype and got[1].dtype == torch.int32, tag
    assert torch.equal(got[1], want[1]), f"indices {tag}"
    assert torch.equal(bits(got[0]), bits(want[0])), f"values {tag}"
    return got


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", ["mixed", "ties", "sparse"])
def test_threshold_estimated_matches_torch(family, dtype):
    seed = fresh_seed()
    x = sample(family, random.choice([3000, 5000]), dtype, seed)
    c = gradcomp.compressor("threshold", ratio=0.02, sample_ratio=0.2, seed=seed % 1000)
    check_threshold(x, c.estimate_threshold(x.reshape(-1)), 0.02, f"{family} {dtype} {seed}")


@pytest.mark.parametrize("case", ["all pass", "more than k", "fewer than k", "none pass",
                                  "all non-finite", "inf threshold"])
def test_threshold_slot_cases(case):
    seed = fresh_seed()
    x = sample("nonfinite" if case == "all non-finite" else "mixed", 4000, torch.float32, seed)
    if case == "all non-finite":
        x[x == 1.0] = math.nan
    if case == "none pass":
        x = torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    t = {"all pass": 0.0, "more than k": 0.01, "fewer than k": 500.0, "none pass": math.inf,
         "all non-finite": 1.0, "inf threshold": math.inf}[case]
    ratio = 1.0 if case == "all pass" else 0.05
    t = torch.tensor(t, dtype=torch.float32, device=DEVICE)
    vals, idx = check_threshold(x, t, ratio, f"{case} seed={seed}")
    if case == "none pass":
        assert not vals.any() and not idx.any()


def test_threshold_empty_tensor_stays_on_torch():
    c = gradcomp.compressor("threshold", ratio=0.1)
    p = c.compress(torch.empty(0, device=DEVICE))
    assert p.tensors[0].numel() == 0 and p.tensors[1].numel() == 0
    assert c.decompress(p).numel() == 0


# -- the compressors -------------------------------------------------------------------------
@pytest.mark.skipif(not CUDA, reason="dispatch happens for CUDA tensors only")
@pytest.mark.parametrize("dtype", DTYPES)
def test_compressors_on_cuda_match_their_torch_path(dtype):
    seed = fresh_seed()
    x = sample("mixed", 1_000_000, dtype, seed).view(1000, 1000)[:, :999].T  # non-contiguous
    c = gradcomp.compressor("topk", ratio=0.01)
    k = _count(0.01, x.numel())
    got = c.compress(x)
    assert torch.equal(got.tensors[1].long().sort().values, first_by_position(x, k))
    with torch_path():
        want = c.compress(x)
        mags = magnitudes(x.reshape(-1))
        a, b = mags[got.tensors[1].long()], mags[want.tensors[1].long()]
        assert torch.equal(a.sort().values.view(torch.int32), b.sort().values.view(torch.int32))
        # which of the elements tied at the k-th magnitude travel is torch.topk's choice
        off_cut = (mags != a.min()).reshape(x.shape)
        assert torch.equal(bits(c.decompress(got)[off_cut]), bits(c.decompress(want)[off_cut]))
    t = gradcomp.compressor("threshold", ratio=0.01, seed=3)
    got = t.compress(x)
    with torch_path():
        want = gradcomp.compressor("threshold", ratio=0.01, seed=3).compress(x)
    assert torch.equal(got.tensors[1], want.tensors[1])
    assert torch.equal(bits(got.tensors[0]), bits(want.tensors[0]))


def test_compressors_keep_torch_on_cpu():
    x = torch.randn(1000)
    assert not kernels.supports(x)
    p = gradcomp.compressor("topk", ratio=0.05).compress(x)
    assert torch.equal(p.tensors[1].long().sort().values, first_by_position(x, 50).cpu())


def test_bfloat16_subnormals_rank_above_zero():
    # Triton's interpreter turns bfloat16 subnormals into wrong float32 values; the keys must
    # not depend on that conversion.
    x = torch.tensor([0.0, 9.18e-41, -0.0, 1e-39, 1.0, -2.0], dtype=torch.bfloat16,
                     device=DEVICE)
    check_topk(x, 4, "bfloat16 subnormals")
    assert set(kernels.topk_select(x, 4)[1].tolist()) == {1, 3, 4, 5}


def test_selection_needs_triton_3_4(monkeypatch):
    import triton

    kernels.triton_version.cache_clear()
    monkeypatch.setattr(triton, "__version__", "3.3.1")
    assert kernels.triton_version() == (3, 3)
    monkeypatch.setattr(kernels, "supports", lambda x: True)
    assert not kernels.supports_selection(torch.ones(4))
    kernels.triton_version.cache_clear()
    monkeypatch.setattr(triton, "__version__", "3.4.0+git1234")
    assert kernels.supports_selection(torch.ones(4))
    kernels.triton_version.cache_clear()


def test_bad_input_is_named():
    x = torch.randn(100, device=DEVICE)
    for bad in (0, 101, 2.5, True):
        with pytest.raises(ValueError, match="k=.*in \\[1, 100\\]"):
            kernels.topk_select(x, bad)
        with pytest.raises(ValueError, match="k="):
            kernels.threshold_select(x, 1.0, bad)
    with pytest.raises(TypeError, match="float64"):
        kernels.topk_select(x.double(), 3)
    with pytest.raises(ValueError, match="elements"):
        kernels.threshold_select(x[:0], 1.0, 1)
