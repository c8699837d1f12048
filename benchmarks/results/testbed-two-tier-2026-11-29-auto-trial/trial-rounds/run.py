"""auto (its default candidates) alone, hierarchical, at each rate: how many trials its runs
take and what they decide (the training rows' auto_decision and auto_switches).

    python run.py REPEATS OUT_DIR RATE_BPS [RATE_BPS ...]
"""
import json
import sys
from pathlib import Path

from gradcomp.evaluation.testbed.nodes import NodeTestbed

repeats, out = int(sys.argv[1]), Path(sys.argv[2])
for rate in map(float, sys.argv[3:]):
    with NodeTestbed(2, 2, rate, threads=1) as testbed:
        for repeat in range(repeats):
            testbed.run([sys.executable, "-m", "gradcomp.evaluation.benches.train",
                         "--out", str(out / f"train-{rate:g}.csv"), "--backend", "gloo",
                         "--methods", "auto", "--model", "mlp", "--batch-size", "64",
                         "--warmup", "40", "--iterations", "20", "--min-timed-seconds", "8.0",
                         "--bucket-cap-mb", "25.0", "--bandwidth", repr(rate),
                         "--hook-options", json.dumps({"hierarchical": True,
                                                       "gpus_per_node": 2}),
                         "--repeat", str(repeat)], timeout=900)
