"""Runs `job.py` JOBS times in a two-tier testbed (2 nodes x 2 ranks).

    python drive.py RATE_BPS JOBS OUT.jsonl ROUNDS BLOCK WARMUP VARIANT [VARIANT ...]
"""
import sys
from pathlib import Path

from gradcomp.evaluation.testbed.nodes import NodeTestbed
rate, jobs, out, rounds, block, warmup = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
names = sys.argv[7:]
with NodeTestbed(2, 2, rate, threads=1) as tb:
    for j in range(jobs):
        res = tb.run([sys.executable, str(Path(__file__).with_name("job.py")), out, rounds, block, warmup, *names], timeout=1200)
        print(j, "done", flush=True)
