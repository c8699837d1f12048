"""summary.md of this folder: iterations to target per variant (converge.csv), and each
variant's iterations times its iteration time on the flat testbed sweep
(`testbed-2026-11-28-budget/validation.csv`, the least of two runs): python summary.py"""
import json
import math
from pathlib import Path

import pandas as pd

from gradcomp.evaluation.common.store import write_atomic

HERE = Path(__file__).resolve().parent
SWEEP = HERE.parent / "testbed-2026-11-28-budget" / "validation.csv"
#: The variant's name in the testbed sweep's method column.
ON_TESTBED = {"none": "none", "bf16": "bf16", "powersgd rank=4 +EF": "powersgd(rank=4)",
              "topk ratio=0.01 +EF": "topk(error_feedback=True)", "topk ratio=0.01": "topk",
              "randomk ratio=0.01": "randomk", "auto": "auto"}
CANDIDATES = ["none", "bf16", "powersgd rank=4 +EF", "topk ratio=0.01 +EF"]


def variant(method: str, options: str, error_feedback: bool) -> str:
    shown = {k: v for k, v in json.loads(options).items() if k in ("rank", "ratio")}
    return " ".join([method, *(f"{k}={v}" for k, v in shown.items())]
                    + (["+EF"] if error_feedback and method != "auto" else []))


def main() -> str:
    runs = pd.read_csv(HERE / "converge.csv")
    runs["variant"] = [variant(*r) for r in zip(runs["method"], runs["options"],
                                                 runs["error_feedback"])]
    seeds = runs.groupby("variant")["seed"].nunique()
    whole = sorted(set.intersection(*(set(s) for _, s in runs.groupby("variant")["seed"])))
    runs = runs[runs["seed"].isin(whole)]  # seeds every variant finished
    assert not runs.duplicated(["variant", "seed"]).any(), "two variants share a name"
    # A run that missed the target counts as more than its budget (inf), not as no run.
    runs["iterations"] = runs["iterations_to_target"].fillna(math.inf)
    by = runs.groupby("variant", sort=False)
    table = pd.DataFrame({
        "runs": by.size(), "reached": by["reached"].sum(),
        "median": by["iterations"].median(), "mean": by["iterations"].mean(),
        "max": by["iterations"].max(),
        "final accuracy, median": by["final_accuracy"].median(),
        "best accuracy, median (min-max)": by["best_accuracy"].agg(
            lambda a: f"{a.median():.3f} ({a.min():.3f}-{a.max():.3f})"),
        "auto's choices (runs)": by["auto_choices"].agg(lambda c: ", ".join(
            f"{k} {n}" for k, n in c.dropna().str.split(" since").str[0]
            .str.removeprefix("bucket 0: ").value_counts().items())),
    })
    wide = runs.pivot_table(index="seed", columns="variant", values="iterations")
    base = wide["topk ratio=0.01 +EF"]
    paired = {v: f"{(wide[v] < base).sum()} / {(wide[v] == base).sum()} / {(wide[v] > base).sum()}"
              for v in wide.columns}
    table["fewer / same / more than top-k +EF"] = pd.Series(paired)
    times = pd.read_csv(SWEEP).pivot_table(index="method", columns="rate",
                                           values="measured", aggfunc="min")
    rates = ["100 Mbit/s", "500 Mbit/s", "1 Gbit/s", "2.5 Gbit/s"]
    rows = []
    for v, name in ON_TESTBED.items():
        if v in table.index:
            rows.append({"variant": v, **{f"{r}: ms/iter": times.loc[name, r] * 1e3
                                          for r in rates},
                         **{f"{r}: s to target": times.loc[name, r] * table.loc[v, "median"]
                            for r in rates}})
    tta = pd.DataFrame(rows).set_index("variant")
    fastest = {r: tta.loc[CANDIDATES, f"{r}: ms/iter"].idxmin() for r in rates}
    text = (f"Seeds {whole[0]}..{whole[-1]} ({len(whole)}; every variant finished them; runs "
            f"per variant in converge.csv: {seeds.min()}-{seeds.max()})\n\n"
            "## Iterations to target (teacher, test accuracy 0.85, at most 600; inf: not "
            "reached)\n\n"
            + table.to_markdown(floatfmt=".3g")
            + "\n\n## Median iterations to target x iteration time on the flat testbed "
            "(MLP, `testbed-2026-11-28-budget`, least of two runs)\n\n"
            + tta.to_markdown(floatfmt=".3g")
            + "\n\nThe default candidate fastest per iteration (auto's pick) at each rate: "
            + ", ".join(f"{r} {v}" for r, v in fastest.items()) + "\n")
    write_atomic(HERE / "summary.md", text)
    return text


if __name__ == "__main__":
    print(main())
