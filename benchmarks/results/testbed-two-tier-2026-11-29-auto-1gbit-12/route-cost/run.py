"""The cost of auto's route on the two-tier testbed, hierarchical: top-k's (error feedback)
fixed hook against auto variants, in interleaved passes (each pass's order rotated).

    python run.py RATE_BPS REPEATS OUT_DIR VARIANT [VARIANT ...]

Variants: fixed (top-k's hook), auto-topk (auto with top-k as its one candidate),
auto-topk-no-slowdown (the same without its slowdown check: its all-reduce of samples once
per check, not every iteration), auto-topk-none (top-k and `none`), auto-default (auto's
default candidates). Each writes train-<variant>.csv in OUT_DIR.
"""
import json
import sys
from pathlib import Path

from gradcomp.evaluation.testbed.nodes import NodeTestbed

LAYOUT = {"hierarchical": True, "gpus_per_node": 2}
TOPK = ["topk", {"ratio": 0.01, "error_feedback": True}]
VARIANTS = {
    "fixed": ("topk:ratio=0.01,error_feedback=true", LAYOUT),
    "auto-topk": ("auto", {**LAYOUT, "candidates": [TOPK]}),
    "auto-topk-no-slowdown": ("auto", {**LAYOUT, "candidates": [TOPK], "slowdown": None}),
    "auto-topk-none": ("auto", {**LAYOUT, "candidates": [TOPK, "none"]}),
    "auto-default": ("auto", LAYOUT),
}


def main(rate: float, repeats: int, out: Path, names: list[str]) -> None:
    with NodeTestbed(2, 2, rate, threads=1) as testbed:
        for repeat in range(repeats):
            for name in names[repeat % len(names):] + names[:repeat % len(names)]:
                method, options = VARIANTS[name]
                testbed.run([sys.executable, "-m", "gradcomp.evaluation.benches.train",
                             "--out", str(out / f"train-{name}.csv"), "--backend", "gloo",
                             "--methods", method, "--model", "mlp", "--batch-size", "64",
                             "--warmup", "40", "--iterations", "20",
                             "--min-timed-seconds", "8.0", "--bucket-cap-mb", "25.0",
                             "--bandwidth", repr(rate), "--hook-options", json.dumps(options),
                             "--repeat", str(repeat)], timeout=900)


if __name__ == "__main__":
    main(float(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:])
