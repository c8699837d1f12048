"""The first look's jobs (`job.py` through `drive.py`): per file, each job's median iteration
per variant (ms, the slowest rank's), auto's decision, and the medians over all jobs.

    python summary.py [FOLDER]
"""
import json
import statistics
import sys
from pathlib import Path


def main(folder: Path) -> None:
    for name in ("hier3", "hierdef", "tele", "r30", "auto2"):
        jobs = [r for r in map(json.loads, (folder / f"{name}.jsonl").read_text().splitlines())
                if "times" in r]
        print(f"## {name}.jsonl")
        pooled = {}
        for r in jobs:
            med = {n: 1000 * statistics.median(t) for n, t in r["times"].items()}
            for n, t in r["times"].items():
                pooled.setdefault(n, []).extend(t)
            print("  " + ", ".join(f"{n} {m:.1f}" for n, m in med.items())
                  + "".join(f" | {n}: {d}" for n, d in r.get("decision", {}).items()))
        base = next(iter(pooled))
        print("  all jobs: " + ", ".join(
            f"{n} {1000 * statistics.median(t):.1f} "
            f"({100 * (statistics.median(t) / statistics.median(pooled[base]) - 1):+.1f}%)"
            for n, t in pooled.items()))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
