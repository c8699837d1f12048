"""Eight interleaved runs per pinning mode of one method on the two-tier testbed, through the
train bench patched by `pin.patch` (PIN_MODE: none, local: a rank on core LOCAL_RANK, node: a
node's ranks on core NODE_RANK; TIMES_OUT: every timed iteration's time).

    python run.py RATE_BPS REPEATS OUT_DIR METHOD HOOK_OPTIONS_JSON MODE [MODE ...]
"""
import sys
from pathlib import Path
from gradcomp.evaluation.testbed.nodes import NodeTestbed

def main(rate, repeats, out, method, options, modes):
    out.mkdir(parents=True, exist_ok=True)
    with NodeTestbed(2, 2, rate, threads=1) as testbed:
        for repeat in range(repeats):
            for mode in modes[repeat % len(modes):] + modes[:repeat % len(modes)]:
                testbed.run([sys.executable, "-m", "gradcomp.evaluation.benches.train",
                             "--out", str(out / f"train-{mode}.csv"), "--backend", "gloo",
                             "--methods", method, "--model", "mlp", "--batch-size", "64",
                             "--warmup", "40", "--iterations", "20",
                             "--min-timed-seconds", "8.0", "--bucket-cap-mb", "25.0",
                             "--bandwidth", repr(rate), "--hook-options", options,
                             "--repeat", str(repeat)], timeout=900,
                            env={"PIN_MODE": mode, "TIMES_OUT": str(out / "times.jsonl")})

main(float(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6:])
