"""Time the flat ring tier (all 4 ranks as one ring) at each rate of a two-tier sweep, as
validate's tier sweep does (same sizes, repeats, warm-up, compute before each call), appending
to that folder's tiers-<rate>.csv."""
import sys
from pathlib import Path

from gradcomp.evaluation.benches.collective import AFTER_COMPUTE_MS
from gradcomp.evaluation.common.units import parse_rate
from gradcomp.evaluation.testbed.nodes import NodeTestbed
from gradcomp.evaluation.testbed.ratecheck import run_tier_sweep
from gradcomp.evaluation.testbed.validate import (COLLECTIVE_REPEATS, model_collective_sizes,
                                                  rate_tag)

out = Path(sys.argv[1])
for rate in sys.argv[2].split(","):
    bps = parse_rate(rate, "rate")
    with NodeTestbed(2, 2, bps, threads=1) as testbed:
        print(rate, "ring", flush=True)
        run_tier_sweep(testbed, out / f"tiers-{rate_tag(bps)}.csv",
                       list(model_collective_sizes("mlp")), ("allreduce", "allgather"),
                       COLLECTIVE_REPEATS, 2, AFTER_COMPUTE_MS, tiers=("ring",))
