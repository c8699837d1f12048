"""The cost of auto's route, hierarchical: auto with top-k (error feedback) as its one
candidate, with its slowdown check (an all-reduce of samples every iteration) and without
(slowdown=None), and top-k's fixed hook, in interleaved passes (each pass's order rotated).

    python run.py RATE_BPS REPEATS OUT_DIR
"""
import json
import sys
from pathlib import Path

from gradcomp.evaluation.testbed.nodes import NodeTestbed

rate, repeats, out = float(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
layout = {"hierarchical": True, "gpus_per_node": 2}
topk = ["topk", {"ratio": 0.01, "error_feedback": True}]
variants = {
    "fixed": ("topk:ratio=0.01,error_feedback=true", layout),
    "auto-topk": ("auto", {**layout, "candidates": [topk]}),
    "auto-topk-no-slowdown": ("auto", {**layout, "candidates": [topk], "slowdown": None}),
}
with NodeTestbed(2, 2, rate, threads=1) as testbed:
    for repeat in range(repeats):
        names = list(variants)
        order = names[repeat % len(names):] + names[:repeat % len(names)]
        for name in order:
            method, options = variants[name]
            testbed.run([sys.executable, "-m", "gradcomp.evaluation.benches.train",
                         "--out", str(out / f"train-{name}.csv"), "--backend", "gloo",
                         "--methods", method, "--model", "mlp", "--batch-size", "64",
                         "--warmup", "40", "--iterations", "20", "--min-timed-seconds", "8.0",
                         "--bucket-cap-mb", "25.0", "--bandwidth", repr(rate),
                         "--hook-options", json.dumps(options), "--repeat", str(repeat)],
                        timeout=900)
