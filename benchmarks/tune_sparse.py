#!/usr/bin/env python
"""Tune the launch configuration of the Triton top-k / threshold selection on one CUDA GPU.

    PYTHONPATH=. python benchmarks/tune_sparse.py --out DIR

Times `kernels.topk_select(x, k)` and `kernels.threshold_select(x, t, k)` (t from
`compressor("threshold").estimate_threshold(x)`, computed once, outside the timing) for
25.6M float32 values, k = 1%, on two inputs: randn and a heavy-tailed randn * 10**U{-3..2}.
Each configuration of `gradcomp.kernels.sparse.launcher.GPU_TILES` is timed two ways: wall time per
call with triton.testing.do_bench (median, L2 flushed; host launch cost included when the GPU
waits for it) and GPU time per call (torch.profiler: summed CUDA kernel/memset durations,
as `gpu_time()` in benchmarks/gpu_roofline.py), and checked against torch.topk (the selected
magnitudes must be exactly the k largest). The sweep moves one group of tunables at a time
away from the defaults, then times the best value of every group together.

Writes DIR/tune_sparse.csv (a row per configuration and input, as measured) and prints the
best configuration (least topk GPU time summed over both inputs) as a GPU_TILES dict.
Runs in about 1-2 minutes on an H100 (each new tile/warps value compiles a few kernels).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time

import torch

try:
    import gradcomp
    from gradcomp import kernels
except ImportError:  # run from the repository root without PYTHONPATH
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import gradcomp
    from gradcomp import kernels

from gpu_roofline import gpu_time  # noqa: E402  (beside this script)

N = 25_600_000
RATIO = 0.01
# one group of tunables at a time; the first entry of each group is never the only one
GROUPS = {
    "progs_per_sm": [{"progs_per_sm": v} for v in (2, 4, 8, 16)],
    "hist": [{"hist": t, "hist_warps": w} for t, w in ((2048, 4), (4096, 4), (4096, 8),
                                                         (8192, 8))],
    "split": [{"split": t, "split_warps": w} for t, w in ((1024, 4), (2048, 4), (2048, 8),
                                                            (4096, 8))],
    "cand": [{"cand": t, "cand_warps": w, "cand_progs_per_sm": p}
             for t, w, p in ((4096, 8, 1), (4096, 8, 2), (2048, 4, 2), (2048, 4, 4),
                             (8192, 8, 1))],
}


def gpu_time_us(fn):
    """(GPU time of one call in us, its longest kernels), as gpu_roofline measures it."""
    ms, kernels = gpu_time(fn)
    return ms * 1e3, kernels


def inputs():
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(N, device="cuda", generator=g)
    e = torch.randint(-3, 3, (N,), device="cuda", generator=g).float()
    heavy = torch.randn(N, device="cuda", generator=g) * torch.pow(10.0, e)
    return {"randn": x, "heavy": heavy}


def check(x, k):
    vals, idx = kernels.topk_select(x, k)
    want = torch.topk(x.abs(), k).values.sort().values
    got = x[idx.long()].abs().sort().values
    return bool(torch.equal(got, want)) and bool(torch.equal(vals, x[idx.long()]))


def measure(cfg, xs, thresholds, rep_ms):
    from triton.testing import do_bench

    from gradcomp.kernels.sparse import launcher as sparse

    sparse.GPU_TILES.clear()
    sparse.GPU_TILES.update(cfg)
    rows = []
    for name, x in xs.items():
        k = int(RATIO * N)
        t = thresholds[name]
        ok = check(x, k)
        row = {"input": name, **cfg, "ok": ok}
        for op, fn in (("topk", lambda: kernels.topk_select(x, k)),
                       ("thr", lambda: kernels.threshold_select(x, t, k))):
            row[f"{op}_bench_us"] = 1e3 * do_bench(fn, warmup=10, rep=rep_ms)
            row[f"{op}_gpu_us"], row[f"{op}_kernels"] = gpu_time_us(fn)
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--rep-ms", type=float, default=40.0, help="do_bench repetition time")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    os.makedirs(args.out, exist_ok=True)
    from gradcomp.kernels.sparse import launcher as sparse

    default = dict(sparse.GPU_TILES)
    xs = inputs()
    thr = gradcomp.compressor("threshold", ratio=RATIO)
    thresholds = {n: thr.estimate_threshold(x) for n, x in xs.items()}
    path = os.path.join(args.out, "tune_sparse.csv")
    fields = ["stage", "input", *default, "ok", "topk_gpu_us", "topk_bench_us", "thr_gpu_us",
              "thr_bench_us", "topk_kernels", "thr_kernels", "device"]
    dev = torch.cuda.get_device_name()
    t0 = time.time()
    results = []  # (cfg, summed topk gpu us, all ok)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()

        def run(stage, cfg):
            rows = measure(cfg, xs, thresholds, args.rep_ms)
            for r in rows:
                w.writerow({"stage": stage, "device": dev, **r})
            f.flush()
            tot = sum(r["topk_gpu_us"] for r in rows)
            ok = all(r["ok"] for r in rows)
            results.append((dict(cfg), tot, ok))
            print(f"[{time.time() - t0:5.0f}s] {stage:12s} {cfg} topk gpu "
                  + " ".join(f"{r['input']}={r['topk_gpu_us']:.0f}us" for r in rows)
                  + " bench " + " ".join(f"{r['topk_bench_us']:.0f}" for r in rows)
                  + " thr gpu " + " ".join(f"{r['thr_gpu_us']:.0f}" for r in rows)
                  + ("" if ok else "  WRONG RESULT"), flush=True)
            print("      kernels:", rows[0]["topk_kernels"], flush=True)
            return tot if ok else float("inf")

        run("default", default)
        best = dict(default)
        for group, options in GROUPS.items():
            scores = []
            for opt in options:
                cfg = {**default, **opt}
                scores.append((run(group, cfg), opt))
            best.update(min(scores, key=lambda s: s[0])[1])
        if best != default:
            run("combined", best)
        sparse.GPU_TILES.clear()
        sparse.GPU_TILES.update(default)
    good = [r for r in results if r[2]]
    cfg, tot, _ = min(good, key=lambda r: r[1])
    print(f"\nwrote {path}; best (topk GPU time summed over inputs {tot:.0f} us):")
    print(f"GPU_TILES = {cfg}")
    if len(good) < len(results):
        print("SOME CONFIGURATIONS GAVE WRONG RESULTS (see the csv)")
        sys.exit(1)


if __name__ == "__main__":
    main()
