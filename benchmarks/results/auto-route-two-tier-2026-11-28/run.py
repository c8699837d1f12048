"""Auto's steady-state cost over the fixed hook of its one candidate, interleaved on the
testbed: python run.py REPEAT ORDER RATE_BPS OUT.csv, under `gradcomp testbed` (run.sh; the
folder auto-route-2026-11-28 measured the same on 2 workers)."""
import sys

from gradcomp.evaluation.benches.train import bench_train

TOPK = ("topk", {"ratio": 0.01, "error_feedback": True})
PSGD = ("powersgd", {"rank": 4})
RUNS = {"A": TOPK, "B": ("auto", {"candidates": [TOPK]}),
        "C": ("auto", {"candidates": [TOPK], "slowdown": None}),
        "D": PSGD, "E": ("auto", {"candidates": [PSGD]})}
repeat, order, rate, out = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
bench_train(methods=[RUNS[k] for k in order], model="mlp", batch_size=64, warmup=40,
            iterations=20, min_timed_s=8.0, bandwidth_bps=rate, out=out, repeat=repeat)
