#!/usr/bin/env python
"""The CPU top-k selection (`gradcomp.kernels.sparse.reference.topk_positions`, 1%) with its
magnitudes' and comparison's buffers made per call against kept between calls (`scratch`, as
`TopK` keeps them per key), on the MLP's shard on 2 nodes x 2 (2,104,325 float32 values).
A buffer made per call costs little where the allocator reuses freed memory, and a page fault
per 4 KB where it hands out freshly mapped pages, as it did in `auto`'s timed turns on the
two-tier testbed (benchmarks/results/testbed-two-tier-2026-11-29-rounds-bias).

    # script mode: both ways interleaved, medians of --repeats calls, a table of ms and
    # ratios, run once with glibc's default allocator and once with every allocation of
    # 128 KiB or more mapped afresh (MALLOC_MMAP_THRESHOLD_=131072, each in a child process):
    python benchmarks/bench_topk_buffers.py [--repeats 41]
    # pytest-benchmark (CI runs every case once, untimed, at a small size):
    python -m pytest benchmarks/bench_topk_buffers.py --benchmark-enable --benchmark-only \
        --benchmark-group-by=param:way
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time

import pytest
import torch

try:
    from gradcomp.kernels.sparse.reference import topk_positions
except ImportError:  # run from the repository root without PYTHONPATH
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from gradcomp.kernels.sparse.reference import topk_positions

SHARD = 4208650 // 2
MAPPED_AFRESH = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def gradient(n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, generator=g) * torch.rand(n, generator=g) ** 4


def selections(n: int):
    """{way: a call selecting 1% of a gradient of n values}, the ways checked to agree."""
    x, k, scratch = gradient(n), math.ceil(0.01 * n), {}
    ways = {"made per call": lambda: topk_positions(x, k),
            "kept": lambda: topk_positions(x, k, scratch)}
    assert torch.equal(ways["made per call"](), ways["kept"]())
    return ways


@pytest.mark.parametrize("way", ["made per call", "kept"])
def test_topk_buffers(benchmark, way):
    benchmark.group = "topk selection buffers"
    benchmark(selections(20_000)[way])


def medians(repeats: int) -> dict[str, float]:
    torch.set_num_threads(1)
    ways, times = selections(SHARD), {}
    for r in range(repeats):
        for name, call in ways.items() if r % 2 == 0 else reversed(ways.items()):
            t0 = time.perf_counter()
            call()
            times.setdefault(name, []).append(time.perf_counter() - t0)
    return {name: 1e3 * statistics.median(ts[2:]) for name, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=41)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(" ".join(f"{v:.3f}" for v in medians(args.repeats).values()))
        return
    print(f"# top-k 1% of {SHARD} float32 values, 1 thread, torch {torch.__version__}, median "
          f"of {args.repeats} calls each (interleaved), load average {os.getloadavg()[0]:.2f}")
    print("| allocator | made per call ms | kept ms | kept / made per call |\n"
          "| --- | ---: | ---: | ---: |")
    for label, env in (("glibc default", {}), ("mapped afresh", MAPPED_AFRESH)):
        out = subprocess.run([sys.executable, __file__, "--child", "--repeats",
                              str(args.repeats)], env={**os.environ, **env}, check=True,
                             capture_output=True, text=True).stdout
        made, kept = map(float, out.split())
        print(f"| {label} | {made:.2f} | {kept:.2f} | {kept / made:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
