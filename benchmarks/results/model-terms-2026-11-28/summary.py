"""Per sweep, layout and method, from `terms_all.py`'s runs.csv: the median over its runs (all
rates and repeats) of measured less predicted, for the iteration and for each term (ms), with
how many of the runs the term's sign agrees with the median's; and per method and term the
sweeps' medians side by side (a term is consistently wrong when every sweep's median has the
same sign and it is large against the run-to-run noise).

    python summary.py runs.csv   (Markdown on stdout)
"""
import sys

import pandas as pd

TERMS = ("encode", "comm", "decode", "rest")


def per_sweep(runs: pd.DataFrame) -> pd.DataFrame:
    runs = runs.assign(total=runs["measured_ms"] - runs["predicted_ms"],
                       error=runs["predicted_ms"] / runs["measured_ms"] - 1,
                       **{t: runs[f"{t}_tele_ms"] - runs[f"{t}_model_ms"] for t in TERMS})
    rows = []
    for (sweep, layout, method), g in runs.groupby(["sweep", "layout", "method"], sort=False):
        row = {"sweep": sweep, "layout": layout, "method": method, "runs": len(g),
               "median |error|": f"{g['error'].abs().median():.1%}",
               "measured - predicted ms": f"{g['total'].median():+.1f}"}
        for t in TERMS:
            med = g[t].median()
            agree = int(((g[t] > 0) == (med > 0)).sum())
            row[f"{t} ms"] = f"{med:+.1f} ({agree}/{len(g)})"
        rows.append(row)
    return pd.DataFrame(rows)


def across(runs: pd.DataFrame) -> pd.DataFrame:
    """Per layout, method and term: each sweep's median of measured less predicted (ms)."""
    long = pd.concat([runs.assign(term=t, diff=runs[f"{t}_tele_ms"] - runs[f"{t}_model_ms"])
                      for t in TERMS])
    table = long.groupby(["layout", "method", "term", "sweep"], sort=False)["diff"].median()
    return table.unstack("sweep").round(1)


if __name__ == "__main__":
    runs = pd.read_csv(sys.argv[1])
    print(per_sweep(runs).to_markdown(index=False))
    print()
    print(across(runs).to_markdown())
