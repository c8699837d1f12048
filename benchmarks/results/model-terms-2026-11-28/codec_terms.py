"""The hook's codec terms in training against what the model charges for them, and the rest
of the iteration against `none`'s, for every training run of committed `gradcomp validate`
folders, reading their CSVs only (the standard library; nothing is predicted or measured).

* encode, decode: the training run's telemetry (mean over iterations and ranks) less the
  least disturbed hook-path row at the bucket's size, which is what `validate` prices it at
  (`pooled.least_disturbed_costs`: per key the row of least encode + middle + decode, over
  every rate's table of a flat folder; a two-tier folder's table of that rate and layout;
  `methods.Measured`: the measured point at a measured size). The bucket is the MLP's one
  16.8 MB bucket (flat) or, on the hierarchical layout, the largest size the table holds (the
  shard, 1/2 of it).
* rest - none's: the run's iteration time (median over iterations of the slowest rank) less
  its telemetry, less the same for the `none` run(s) at that rate and layout. The model
  charges every method the same rest (compute x lambda + finalize; hierarchical: also the
  reduce-scatter and all-gather inside the node), lambda fitted to the ddp and none runs, so
  a method's rest above none's is time the model does not charge it.

    python codec_terms.py FOLDER ...   (Markdown on stdout: per folder, layout and method
    the median over its runs (all rates and repeats) and how many runs lie above 0)
"""
import csv
import glob
import math
import statistics
import sys
from pathlib import Path


def ms(value: str) -> float:
    try:
        return float(value) * 1e3
    except ValueError:
        return math.nan


def label(row: dict) -> str:
    """The method as `validation.md` names the variants these folders hold."""
    if row["method"] == "powersgd" and '"rank": 4' in row["options"]:
        return "powersgd(rank=4)"
    if row["method"] == "topk" and '"error_feedback": true' in row["options"]:
        return "topk(error_feedback=True)"
    return row["method"]


def rate_of(path: str, prefix: str) -> str:
    return Path(path).stem[len(prefix):].split("-")[0]


def priced(folder: str, layout: str, two_tier: bool) -> dict:
    """{(method, numel, rate or ""): (encode, decode) ms} of the least disturbed hook rows."""
    best = {}
    pattern = f"{folder}/hook-*-{layout}.csv" if two_tier else f"{folder}/hook-*.csv"
    for path in glob.glob(pattern):
        rate = rate_of(path, "hook-") if two_tier else ""
        for row in csv.DictReader(open(path)):
            phases = [ms(row[f"{p}_s"]) for p in ("encode", "middle", "decode")]
            total = sum(p for p in phases if not math.isnan(p))
            key = (label(row), int(row["numel"]), rate)
            if key not in best or total < best[key][0]:
                best[key] = (total, phases[0], phases[2])
    return {k: v[1:] for k, v in best.items()}


def runs(folder: str) -> list:
    two_tier = bool(glob.glob(f"{folder}/tiers-*.csv"))
    rows = []
    for layout in ("flat", "hierarchical") if two_tier else ("flat",):
        costs = priced(folder, layout, two_tier)
        bucket = max(n for _, n, _ in costs)
        pattern = f"{folder}/train-*-{layout}.csv" if two_tier else f"{folder}/train-*.csv"
        for path in sorted(glob.glob(pattern)):
            rate = rate_of(path, "train-")
            table = list(csv.DictReader(open(path)))
            rest = {id(r): ms(r["t_iter_s"]) - sum(ms(r[f"{p}_s"]) for p in
                                                   ("encode", "comm", "decode"))
                    for r in table}
            none = statistics.median(rest[id(r)] for r in table if r["method"] == "none")
            for r in table:
                key = (label(r), bucket, rate if two_tier else "")
                if r["method"] in ("ddp", "none", "auto") or key not in costs:
                    continue
                encode, decode = costs[key]
                rows.append((Path(folder).name, layout, key[0],
                             ms(r["encode_s"]) - encode, ms(r["decode_s"]) - decode,
                             rest[id(r)] - none))
    return rows


def table(rows: list) -> str:
    groups = {}
    for sweep, layout, method, *terms in rows:
        groups.setdefault((sweep, layout, method), []).append(terms)
    lines = ["| folder | layout | method | runs | encode ms | decode ms | rest - none's ms |",
             "|:--|:--|:--|--:|--:|--:|--:|"]
    for (sweep, layout, method), terms in groups.items():
        cells = []
        for i in range(3):
            values = [t[i] for t in terms]
            above = sum(v > 0 for v in values)
            cells.append(f"{statistics.median(values):+.1f} ({above}/{len(values)})")
        lines.append(f"| {sweep} | {layout} | {method} | {len(terms)} | " + " | ".join(cells)
                     + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table([row for folder in sys.argv[1:] for row in runs(folder)]))
