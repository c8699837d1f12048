"""Before (77c65b2) / after / plain torch, interleaved in one process (this folder's table).

    git archive 77c65b2 gradcomp | tar -x -C /tmp/b && mkdir -p /tmp/oldpkg \
        && cp -r /tmp/b/gradcomp /tmp/oldpkg/gradcomp_before
    PYTHONPATH=$PWD python benchmarks/results/cpu-codecs/before_after.py 7 [case,case,...]
"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, "/tmp/oldpkg")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import gradcomp  # noqa: E402
import gradcomp_before  # noqa: E402
import bench_cpu_codecs as B  # noqa: E402

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
only = sys.argv[2].split(",") if len(sys.argv) > 2 else list(B.CASES)
torch.set_num_threads(2)
n = 25_600_000
B.SIZE[0] = n
x = B.data(n)
print(f"# {n:,} float32, 2 threads, torch {torch.__version__}, median of {reps}, "
      "interleaved (before = 77c65b2)")
print("| case | before ms | after ms | plain ms | before/plain | after/plain |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for case in only:
    B.gradcomp = gradcomp_before
    old, _ = B.steps(case)
    B.gradcomp = gradcomp
    new, plain = B.steps(case)
    # first calls of both (same keys / draws); top-k as a set
    assert B.same("topk" if case.startswith("topk") else case, old(x), new(x)), case
    new, plain = B.steps(case)
    assert B.same(case, new(x), plain(x)), case
    fns = [("before", old), ("after", new), ("plain", plain)]
    ts = {k: [] for k, _ in fns}
    for r in range(reps):
        for k, f in (fns if r % 2 == 0 else fns[::-1]):
            t0 = time.perf_counter()
            f(x)
            ts[k].append(time.perf_counter() - t0)
    a, b, c = (statistics.median(ts[k]) * 1e3 for k in ("before", "after", "plain"))
    print(f"| {case} | {a:.2f} | {b:.2f} | {c:.2f} | {a / c:.2f}x | {b / c:.2f}x |", flush=True)
