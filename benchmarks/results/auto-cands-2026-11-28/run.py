"""auto's default candidates beside random-k and top-k without error feedback (same density,
1%) on `bench converge`'s default task (teacher, test accuracy 0.85, 600 iterations at most,
2 local gloo workers): python run.py OUT_DIR SEEDS [CHUNK] (run.sh). Seeds in chunks of CHUNK
(default 5), every variant per chunk, so a run cut off leaves whole seeds; rerunning resumes
(finished runs are skipped). OUT_DIR/conditions.csv: per chunk the load average before and
after, the seconds and the CPU seconds of this process and all it started (the workers are
forked by a fork server, this process's child, which reaps them)."""
import os
import sys
import time
from pathlib import Path

from gradcomp.comm.auto import DEFAULT_CANDIDATES
from gradcomp.evaluation.benches.converge import bench_converge
from gradcomp.evaluation.common.env import environment
from gradcomp.evaluation.common.store import ResultTable

# Each default candidate with the error feedback it has there (PowerSGD: its own residuals,
# on by default), then auto with its defaults; the new ones without error feedback.
WITHOUT = ["none", "bf16", ("topk", {"ratio": 0.01}), ("randomk", {"ratio": 0.01}),
           ("auto", {})]
WITH = [("powersgd", {"rank": 4}), ("topk", {"ratio": 0.01})]
assert list(DEFAULT_CANDIDATES) == ["none", "bf16", ("powersgd", {"rank": 4}),
                                    ("topk", {"ratio": 0.01, "error_feedback": True})]


def tree_cpu_s() -> float:
    """CPU seconds of this process, its reaped children, and its living children with the
    children they reaped (/proc/PID/stat fields 14-17: utime, stime, cutime, cstime)."""
    total = sum(os.times()[:4])
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == os.getpid():
            total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def main() -> None:
    out, seeds = Path(sys.argv[1]), int(sys.argv[2])
    chunk = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    out.mkdir(parents=True, exist_ok=True)
    conditions = ResultTable(out / "conditions.csv", ("seeds",))
    for first in range(0, seeds, chunk):
        todo = list(range(first, min(first + chunk, seeds)))
        load, start, cpu = os.getloadavg()[0], time.monotonic(), tree_cpu_s()
        bench_converge(WITHOUT, seeds=todo, error_feedback=(False,), out=out / "converge.csv")
        bench_converge(WITH, seeds=todo, error_feedback=(True,), out=out / "converge.csv")
        conditions.append({"seeds": f"{todo[0]}-{todo[-1]}", "load_1min_before": load,
                           "load_1min_after": os.getloadavg()[0],
                           "seconds": time.monotonic() - start, "cpu_s": tree_cpu_s() - cpu,
                           "cpus": os.cpu_count(), **environment()})


if __name__ == "__main__":  # the fork server imports this file
    main()
