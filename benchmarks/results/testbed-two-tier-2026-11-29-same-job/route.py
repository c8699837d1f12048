"""Each job's median iteration per variant (ms, the slowest rank's) and the medians over all
jobs, relative to the first variant named (`same_job.py`'s JSON lines).

    python route.py OUT.jsonl
"""
import json
import statistics
import sys
from pathlib import Path


def main(path: str) -> None:
    jobs = [json.loads(line) for line in Path(path).read_text().splitlines()]
    names = jobs[0]["names"]
    for r in jobs:
        med = {n: statistics.median(r["times"][n]) for n in names}
        print(", ".join(f"{n} {1000 * med[n]:.1f} ({100 * (med[n] / med[names[0]] - 1):+.1f}%)"
                        for n in names))
    pooled = {n: statistics.median(x for r in jobs for x in r["times"][n]) for n in names}
    print("all jobs: " + ", ".join(
        f"{n} {1000 * pooled[n]:.1f} ({100 * (pooled[n] / pooled[names[0]] - 1):+.1f}%)"
        for n in names))


if __name__ == "__main__":
    main(sys.argv[1])
