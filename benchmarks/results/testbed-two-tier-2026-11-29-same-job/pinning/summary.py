"""Per pinning mode: the runs' medians (ms), their spread (standard deviation over the mean),
and within runs the per-iteration standard deviation and lag-1 autocorrelation (times.jsonl).

    python summary.py [FOLDER]
"""
import csv
import json
import statistics
import sys
from pathlib import Path


def lag1(t: list[float]) -> float:
    m = statistics.mean(t)
    return sum((a - m) * (b - m) for a, b in zip(t, t[1:])) / sum((a - m) ** 2 for a in t)


def main(folder: Path) -> None:
    runs = [json.loads(line) for line in (folder / "times.jsonl").read_text().splitlines()]
    print("| pinning | runs' medians, ms | median | spread of runs | per-iteration sd "
          "| lag-1 autocorrelation |")
    print("|:--|:--|--:|--:|--:|--:|")
    for mode in ("none", "local", "node"):
        medians = [1000 * float(r["t_iter_s"])
                   for r in csv.DictReader(open(folder / f"train-{mode}.csv"))]
        mine = [[1000 * x for x in r["times"]] for r in runs if r["pin"] == mode]
        print(f"| {mode} | {' '.join(f'{m:.0f}' for m in medians)} | "
              f"{statistics.median(medians):.1f} | "
              f"{100 * statistics.stdev(medians) / statistics.mean(medians):.1f}% | "
              f"{statistics.median(statistics.stdev(t) for t in mine):.1f} ms | "
              f"{statistics.median(lag1(t) for t in mine):.2f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
