"""The optional CuPy backend of the benchmarks (benchmarks/cupy_backend.py).

Everywhere: importing gradcomp does not import CuPy, `available()` never raises (and is False
without CUDA), and CPU tensors get a clear error naming their device. With CUDA and CuPy:
pack/unpack equal `bitpack`'s torch reference bit for bit, and `topk_indices` selects a set
whose magnitudes are those of `torch.topk`, on fresh random inputs (the seed is in the failure
message).
"""
import math
import os
import random
import subprocess
import sys
import types

import pytest
import torch

from gradcomp.kernels.packing import reference as bitpack
from gradcomp.kernels.sparse.reference import magnitudes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(ROOT, "benchmarks")
sys.path.insert(0, BENCHMARKS)
import cupy_backend as cb  # noqa: E402

CUDA = torch.cuda.is_available()
GPU = pytest.mark.skipif(not cb.available(),
                         reason="needs a CUDA GPU and CuPy (pip install 'gradcomp[cupy]')")
U8 = torch.uint8


def _gen():
    """A freshly seeded CUDA generator and its seed (for the failure message)."""
    seed = random.SystemRandom().randrange(2**62)
    return torch.Generator(device="cuda").manual_seed(seed), seed


# -- everywhere -------------------------------------------------------------------------------
def test_available_is_a_bool_and_false_without_cuda():
    ok = cb.available()
    assert isinstance(ok, bool)
    if not CUDA:
        assert ok is False


def test_available_never_raises(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    assert cb.available() is False

    broken = types.ModuleType("cupy")

    def boom():
        raise RuntimeError("no CUDA driver")

    broken.cuda = types.SimpleNamespace(is_available=boom)
    monkeypatch.setitem(sys.modules, "cupy", broken)
    assert cb.available() is False


def test_importing_gradcomp_does_not_import_cupy():
    code = ("import sys, gradcomp, gradcomp.kernels, gradcomp.compressors\n"
            "import cupy_backend\n"
            "cupy_backend.available.__name__\n"
            "assert 'cupy' not in sys.modules, 'cupy was imported'\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT, BENCHMARKS] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("call", [
    lambda: cb.pack(torch.zeros(16, dtype=U8), 1),
    lambda: cb.unpack(torch.zeros(2, dtype=U8), 16, 1),
    lambda: cb.topk_indices(torch.rand(16), 3),
], ids=["pack", "unpack", "topk_indices"])
def test_cpu_tensor_is_a_clear_error(call):
    with pytest.raises(RuntimeError, match=r"CUDA tensors.*device 'cpu'"):
        call()


def test_bad_arguments():
    codes = torch.zeros(8, dtype=U8)
    for bits in (0, 9, True, 2.0):
        with pytest.raises(ValueError, match="bits"):
            cb.pack(codes, bits)
        with pytest.raises(ValueError, match="bits"):
            cb.unpack(codes, 8, bits)
    with pytest.raises(TypeError, match="torch.Tensor"):
        cb.pack([1, 2, 3], 2)


# -- CUDA + CuPy ------------------------------------------------------------------------------
SIZES = [1, 2, 3, 7, 8, 9, 15, 1000, 4097, 65_537, 1_000_003]


@GPU
@pytest.mark.parametrize("bits", range(1, 9))
def test_pack_unpack_equal_bitpack(bits):
    gen, seed = _gen()
    for n in SIZES:
        codes = torch.randint(0, 2**bits, (n,), dtype=U8, device="cuda", generator=gen)
        ref = bitpack.pack(codes, bits)
        got = cb.pack(codes, bits)
        assert got.dtype == U8 and got.device == codes.device
        assert torch.equal(got, ref), f"pack bits={bits} n={n} seed={seed}"
        assert torch.equal(cb.unpack(got, n, bits), codes), f"round trip {bits} {n} {seed}"
        # Arbitrary streams (padding bits set too) and codes with bits above `bits` set.
        stream = torch.randint(0, 256, (ref.numel(),), dtype=U8, device="cuda", generator=gen)
        assert torch.equal(cb.unpack(stream, n, bits), bitpack.unpack(stream, n, bits)), \
            f"unpack bits={bits} n={n} seed={seed}"
        # The reference takes codes < 2**bits only; CuPy's kernel ignores the higher bits.
        wide = torch.randint(0, 256, (n,), dtype=U8, device="cuda", generator=gen)
        assert torch.equal(cb.pack(wide, bits), bitpack.pack(wide & (2**bits - 1), bits)), \
            f"pack of wide codes bits={bits} n={n} seed={seed}"


@GPU
def test_pack_unpack_edge_cases():
    empty = torch.empty(0, dtype=U8, device="cuda")
    for bits in (1, 2, 4, 8, 3):
        assert cb.pack(empty, bits).numel() == 0
        assert cb.unpack(empty, 0, bits).numel() == 0
    gen, seed = _gen()
    base = torch.randint(0, 16, (2 * 4099,), dtype=U8, device="cuda", generator=gen)
    strided = base[::2]  # non-contiguous input
    assert torch.equal(cb.pack(strided, 4), bitpack.pack(strided.contiguous(), 4)), seed
    # a longer stream: only the first `count` codes are read
    packed = cb.pack(base, 4)
    assert torch.equal(cb.unpack(packed, 1001, 4), base[:1001]), seed
    with pytest.raises(ValueError, match="need"):
        cb.unpack(packed[:3], 7, 4)
    with pytest.raises(TypeError, match="uint8"):
        cb.pack(base.to(torch.int32), 4)


@GPU
def test_pack_on_a_side_stream():
    gen, seed = _gen()
    codes = torch.randint(0, 2, (1_000_003,), dtype=U8, device="cuda", generator=gen)
    ref = bitpack.pack(codes, 1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = cb.pack(codes, 1)
        back = cb.unpack(got, codes.numel(), 1)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(got, ref), seed
    assert torch.equal(back, codes), seed


def _check_topk(mags, k, where):
    idx = cb.topk_indices(mags, k)
    assert idx.dtype == torch.int64 and idx.device == mags.device and idx.shape == (k,), where
    flat = mags.reshape(-1)
    assert torch.unique(idx).numel() == k, f"repeated indices {where}"
    assert k == 0 or (int(idx.min()) >= 0 and int(idx.max()) < flat.numel()), where
    want = torch.topk(flat.float(), k, sorted=True).values
    got = torch.sort(flat[idx].float(), descending=True).values
    assert torch.equal(got, want), f"selected values differ {where}"


@GPU
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_topk_indices_with_ties(dtype):
    gen, seed = _gen()
    for n in (1, 10, 1000, 100_003, 2_000_000):
        for k in sorted({1, max(1, n // 100), n // 3, n - 1, n} - {0}):
            where = f"n={n} k={k} dtype={dtype} seed={seed}"
            # few distinct values: many ties, also at the k-th value
            x = torch.randint(-20, 21, (n,), device="cuda", generator=gen).to(dtype)
            _check_topk(magnitudes(x).to(dtype), k, where)
            # continuous values with a block of equal ones and infinities
            x = torch.randn(n, device="cuda", generator=gen).to(dtype)
            x[: n // 4] = 0.5
            x[n // 2: n // 2 + 3] = math.inf
            _check_topk(magnitudes(x).to(dtype), k, where)


@GPU
def test_topk_indices_edge_cases():
    mags = torch.rand(3, 5, device="cuda")  # flattened
    _check_topk(mags, 7, "2-d")
    assert cb.topk_indices(mags, 0).numel() == 0
    for k in (-1, 16, True):
        with pytest.raises(ValueError, match="k="):
            cb.topk_indices(mags, k)
    with pytest.raises(TypeError, match="float"):
        cb.topk_indices(torch.ones(4, dtype=torch.int32, device="cuda"), 1)
    nan = torch.tensor([1.0, math.nan, 3.0, 2.0], device="cuda")
    assert cb.topk_indices(nan, 1).tolist() == [1]  # NaN is the largest, as in torch.topk
