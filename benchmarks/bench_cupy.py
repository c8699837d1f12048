"""Bit packing and top-k index selection: torch against Triton against CuPy (pytest-benchmark).

    python -m pytest benchmarks/bench_cupy.py --benchmark-enable --benchmark-only

On one CUDA GPU, 25.6M values (GRADCOMP_BENCH_NUMEL to change it):

* pack / unpack of 1-bit and 4-bit codes: `bitpack` (torch), `gradcomp.kernels.pack/unpack`
  (Triton) and `cupy_backend.pack/unpack` (CuPy, benchmarks/cupy_backend.py);
* top-k index selection (k = 1% of the values, as `topk`'s default ratio) on the magnitudes
  of a float32 gradient: ``torch.topk(..., sorted=False).indices`` against
  `cupy_backend.topk_indices` (cupy.argpartition). There is no Triton top-k in gradcomp.

Each case first checks its backend against the torch result (bit for bit; top-k: the same
selected values), then times it with a device synchronisation per call. Skipped without CUDA;
a backend whose library is missing is skipped with the reason. Bandwidth in extra_info:
(bytes read + bytes written) / median time.
"""
import math
import os

import pytest
import torch

from gradcomp import kernels
from gradcomp.kernels.packing import reference as bitpack
from gradcomp.kernels.sparse.reference import magnitudes

import cupy_backend  # benchmarks/cupy_backend.py

CUDA = torch.cuda.is_available()
pytestmark = pytest.mark.skipif(not CUDA, reason="the CuPy/Triton comparison needs a CUDA GPU")
NUMEL = int(os.environ.get("GRADCOMP_BENCH_NUMEL", 25_600_000))
TOPK_RATIO = 0.01


def _need(be):
    if be == "triton" and not kernels.available():
        pytest.skip("Triton kernels unavailable (triton missing or GRADCOMP_KERNELS=0)")
    if be == "cupy" and not cupy_backend.available():
        pytest.skip("CuPy unavailable: pip install 'gradcomp[cupy]'")


PACK = {"torch": bitpack.pack, "triton": lambda c, b: kernels.pack(c, b),
        "cupy": cupy_backend.pack}
UNPACK = {"torch": bitpack.unpack, "triton": lambda p, n, b: kernels.unpack(p, n, b),
          "cupy": cupy_backend.unpack}


def _time(benchmark, fn, group, be, moved):
    def run():
        fn()
        torch.cuda.synchronize()

    benchmark.group = group
    benchmark.extra_info.update(numel=NUMEL, backend=be, device=torch.cuda.get_device_name())
    benchmark(run)
    if not benchmark.disabled and benchmark.stats is not None:
        benchmark.extra_info["GBps"] = moved / benchmark.stats.stats.median / 1e9


@pytest.mark.parametrize("direction", ["pack", "unpack"])
@pytest.mark.parametrize("be", ["torch", "triton", "cupy"])
@pytest.mark.parametrize("bits", [1, 4])
def test_bitpack_bench(benchmark, bits, be, direction):
    _need(be)
    codes = torch.randint(0, 2**bits, (NUMEL,), dtype=torch.uint8, device="cuda")
    packed = bitpack.pack(codes, bits)
    if direction == "pack":
        got = PACK[be](codes, bits)
        assert torch.equal(got, packed), f"{be} pack differs from bitpack"
        fn = lambda: PACK[be](codes, bits)  # noqa: E731
    else:
        got = UNPACK[be](packed, NUMEL, bits)
        assert torch.equal(got, codes), f"{be} unpack differs from bitpack"
        fn = lambda: UNPACK[be](packed, NUMEL, bits)  # noqa: E731
    del got
    _time(benchmark, fn, f"{bits}-bit {direction}", be, codes.numel() + packed.numel())


@pytest.mark.parametrize("be", ["torch", "cupy"])
def test_topk_indices_bench(benchmark, be):
    _need(be)
    mags = magnitudes(torch.randn(NUMEL, device="cuda"))
    k = max(1, math.ceil(TOPK_RATIO * NUMEL))
    if be == "torch":
        fn = lambda: torch.topk(mags, k, sorted=False).indices  # noqa: E731
    else:
        fn = lambda: cupy_backend.topk_indices(mags, k)  # noqa: E731
    want = torch.topk(mags, k, sorted=True).values
    idx = fn()
    assert idx.numel() == k and torch.unique(idx).numel() == k
    assert torch.equal(torch.sort(mags[idx], descending=True).values, want), \
        f"{be} selected other values than torch.topk"
    del idx
    _time(benchmark, fn, f"top-k indices (k={k:,})", be, mags.numel() * mags.element_size() + k * 8)
