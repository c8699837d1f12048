"""Tables of a same-job sweep (`same_job.py`'s JSON lines): per layout, each variant's median
iteration over every job's timed iterations, and auto against the fastest fixed candidate,
pooled and job by job (the same processes and minutes: paired), and job by job against the
candidate it chose (one bucket: its choice for bucket 0).

    python analyse.py OUT.jsonl [OUT.jsonl ...]
"""
import json
import statistics
import sys
from pathlib import Path


def layout_of(name: str) -> str:
    return "flat" if name.startswith("flat-") else "hierarchical"


def main(paths: list[str]) -> None:
    print("| rate | layout | fixed candidates, median ms | auto ms | auto over the fastest "
          "(pooled) | per job: median (each) | auto's choices | auto over the candidate it chose, "
          "per job |")
    print("|:--|:--|:--|--:|--:|:--|:--|:--|")
    for path in paths:
        records = [json.loads(line) for line in Path(path).read_text().splitlines()]
        rate = Path(path).stem.split("-", 1)[1]
        for layout in ("flat", "hierarchical"):
            names = [n for n in records[0]["names"] if layout_of(n) == layout]
            auto = next(n for n in names if n.endswith("auto"))
            fixed = [n for n in names if n != auto]
            pooled = {n: 1000 * statistics.median(x for r in records for x in r["times"][n])
                      for n in names}
            best = min(fixed, key=pooled.get)
            per_job, own = [], []
            for r in records:
                med = {n: statistics.median(r["times"][n]) for n in names}
                per_job.append(med[auto] / min(med[n] for n in fixed) - 1)
                chosen = r["choices"][auto].split()[2]  # "bucket 0: NAME since ..."
                own.append(med[auto] / med[auto.replace("auto", chosen)] - 1)
            choices = "; ".join(r["choices"][auto].replace("bucket 0: ", "") for r in records)
            print(f"| {rate} | {layout} | "
                  + ", ".join(f"{n.removeprefix('flat-')} {pooled[n]:.1f}" for n in fixed)
                  + f" | {pooled[auto]:.1f} | {100 * (pooled[auto] / pooled[best] - 1):+.1f}% | "
                  + f"{100 * statistics.median(per_job):+.1f}% ("
                  + ", ".join(f"{100 * x:+.1f}" for x in per_job) + f") | {choices} | "
                  + ", ".join(f"{100 * x:+.1f}%" for x in own) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
