"""auto and bf16 trained REPEATS times in a two-tier testbed, every rank logging auto's
re-pricings (`trace_auto.py`, rank 0's kept here as trace-r<repeat>.json).

    python run.py RATE_BPS LAYOUT REPEATS
"""
import json
import sys

from gradcomp.evaluation.testbed.nodes import NodeTestbed
from gradcomp.evaluation.testbed.tier_plan import layout_options

rate, layout, repeats = float(sys.argv[1]), sys.argv[2], int(sys.argv[3])
with NodeTestbed(2, 2, rate, threads=1) as testbed:
    for repeat in range(repeats):
        testbed.run([sys.executable, "trace_auto.py", "--out", f"train-{layout}.csv",
                     "--backend", "gloo", "--methods", "auto,bf16", "--model", "mlp",
                     "--batch-size", "64", "--warmup", "40", "--iterations", "20",
                     "--min-timed-seconds", "8.0", "--bucket-cap-mb", "25.0",
                     "--bandwidth", repr(rate),
                     "--hook-options", json.dumps(layout_options(layout, 2)),
                     "--repeat", str(repeat)], timeout=900)
