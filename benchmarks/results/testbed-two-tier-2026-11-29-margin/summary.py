"""Each auto variant over the fastest fixed candidate of its job (both the median over the
job's timed iterations, the slowest rank's), per file (a rate and a layout): job by job and
the median over jobs; with auto's choice per job ("bucket 0: NAME since ..."), whether a
trial ran ("trial at N" in its decision), and auto over the fixed hook of its choice.

    python summary.py OUT.jsonl [OUT.jsonl ...]
"""
import json
import statistics
import sys
from pathlib import Path


def main(paths: list[str]) -> None:
    print("| file | variant | over the fastest fixed, per job | median | choices "
          "| over its choice's hook |")
    print("|:--|:--|:--|--:|:--|:--|")
    for path in paths:
        records = [json.loads(line) for line in Path(path).read_text().splitlines()]
        names = records[0]["names"]
        autos = [n for n in names if "auto" in n]
        fixed = [n for n in names if n not in autos]
        for auto in autos:
            over, choices, own = [], [], []
            for r in records:
                med = {n: statistics.median(r["times"][n]) for n in names}
                over.append(med[auto] / min(med[n] for n in fixed) - 1)
                choice = r["choices"][auto].split()[2]
                trial = " (trial)" if "trial at" in r["decision"][auto] else ""
                choices.append(choice + trial)
                prefix = "flat-" if auto.startswith("flat-") else ""
                if prefix + choice in fixed:
                    own.append(f"{100 * (med[auto] / med[prefix + choice] - 1):+.1f}%")
            print(f"| {Path(path).stem} | {auto} | "
                  + ", ".join(f"{100 * x:+.1f}%" for x in over)
                  + f" | {100 * statistics.median(over):+.1f}% | {', '.join(choices)} | "
                  + ", ".join(own) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
