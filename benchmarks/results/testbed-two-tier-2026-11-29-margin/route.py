"""Each job's median iteration per variant (ms, the slowest rank's), relative to the first
variant named, auto's decisions, and the medians over all jobs (`same_job.py`'s JSON lines,
or `first-look/job.py`'s, whose other lines it skips).

    python route.py OUT.jsonl [OUT.jsonl ...]
"""
import json
import statistics
import sys
from pathlib import Path


def relative(seconds: dict[str, float], names: list[str]) -> str:
    return ", ".join(f"{n} {1000 * seconds[n]:.1f} "
                     f"({100 * (seconds[n] / seconds[names[0]] - 1):+.1f}%)" for n in names)


def main(paths: list[str]) -> None:
    for path in paths:
        jobs = [r for r in map(json.loads, Path(path).read_text().splitlines()) if "times" in r]
        names = jobs[0]["names"]
        print(f"## {path}")
        for r in jobs:
            med = {n: statistics.median(r["times"][n]) for n in names}
            print(relative(med, names)
                  + "".join(f" | {n}: {d}" for n, d in r.get("decision", {}).items()))
        pooled = {n: statistics.median(x for r in jobs for x in r["times"][n]) for n in names}
        print("all jobs: " + relative(pooled, names))


if __name__ == "__main__":
    main(sys.argv[1:])
