"""Advice regret, the number a user cares about: when the model's advice is followed, how much
slower training runs than with the method that was measured fastest.

For every configuration of a validation table (`CONFIG`: the rate and, on two tiers, the
layout, nodes and GPUs per node; columns absent are left out), among the rows with a
prediction (`auto` has none) of per-step methods (a DiLoCo variant's inner step is no
per-step method's: it takes other steps to converge; `advise --convergence` ranks them by time
to the target):

* pick: the method of least predicted time (ties: the first in the table's order), and its
  measured time;
* fastest: the method of least measured time;
* regret = measured time of the pick / measured time of the fastest - 1 (0: the advice was
  the best choice; 0.05: training 5% slower than it could have been).

`auto_regret` holds `auto`'s measured time (in `validate` its steady state, timed after its
exploration) against the fastest measured run of the methods among its candidates
(`comm.auto.DEFAULT_CANDIDATES`, by name): its regret = auto / fastest candidate - 1.
Both are pure functions of the table; `validate` writes them beside the errors.
"""
from __future__ import annotations

import inspect
import math
from pathlib import Path

import pandas as pd

from ...comm.auto import DEFAULT_CANDIDATES, AutoRoute
from ...comm.hooks import build_state
from ..common.store import write_atomic
from ..common.units import format_rate
from .validate_diloco import is_diloco

CONFIG = ("rate_bps", "layout", "nodes", "gpus_per_node")
AUTO_CANDIDATES = tuple(c if isinstance(c, str) else c[0] for c in DEFAULT_CANDIDATES)
#: Iterations after auto's exploration before its decisions act: the step at iteration i
#: reads the samples reduced at i - 1 (`comm.auto.choice`, "Agreement").
DECISION_LAG = 2


def auto_warmup(warmup: int) -> int:
    """Untimed iterations for an `auto` run with its defaults so that its timed iterations
    are its steady state: `warmup`, plus its start iteration, its exploration of every
    default candidate (`explore_iters` each) and `DECISION_LAG`."""
    params = inspect.signature(AutoRoute).parameters
    start = inspect.signature(build_state).parameters["start_iter"].default
    return (warmup + start + len(DEFAULT_CANDIDATES) * params["explore_iters"].default
            + DECISION_LAG)


def config_columns(table: pd.DataFrame) -> list[str]:
    """The columns of `CONFIG` that `table` has."""
    return [c for c in CONFIG if c in table.columns]


def steady_state_jobs(methods, warmup: int) -> list[tuple[list[str], int]]:
    """The training jobs of `methods` (names): the fixed methods after `warmup` untimed
    iterations, then `auto` alone after `auto_warmup(warmup)`."""
    fixed = [m for m in methods if m != "auto"]
    return ([(fixed, warmup)] if fixed else []) + (
        [(["auto"], auto_warmup(warmup))] if "auto" in methods else [])


def advice_regret(table: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration (module docstring): its `CONFIG` columns, rate, pick,
    pick_predicted, pick_measured, fastest, fastest_measured, regret."""
    rows = []
    config = config_columns(table)
    predicted = table[table["predicted"].notna() & ~is_diloco(table["method"])]
    for key, runs in predicted.groupby(config, sort=False):
        pick = runs.loc[runs["predicted"].idxmin()]
        best = runs.loc[runs["measured"].idxmin()]
        rows.append({**dict(zip(config, key if isinstance(key, tuple) else (key,))),
                     "rate": format_rate(pick["rate_bps"]), "pick": pick["method"],
                     "pick_predicted": pick["predicted"], "pick_measured": pick["measured"],
                     "fastest": best["method"], "fastest_measured": best["measured"],
                     "regret": pick["measured"] / best["measured"] - 1})
    return pd.DataFrame(rows)


def auto_regret(table: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration with an `auto` run: its `CONFIG` columns, rate, auto
    (measured), fastest_candidate, fastest_candidate_measured, regret (NaN when no
    candidate ran)."""
    rows = []
    config = config_columns(table)
    for key, runs in table.groupby(config, sort=False):
        auto = runs[runs["method"] == "auto"]
        if not len(auto):
            continue
        fixed = runs[runs["method"].isin(AUTO_CANDIDATES)]
        best = fixed.loc[fixed["measured"].idxmin()] if len(fixed) else None
        t = float(auto["measured"].iloc[0])
        rows.append({**dict(zip(config, key if isinstance(key, tuple) else (key,))),
                     "rate": format_rate(float(auto["rate_bps"].iloc[0])), "auto": t,
                     "fastest_candidate": "" if best is None else best["method"],
                     "fastest_candidate_measured": math.nan if best is None
                     else best["measured"],
                     "regret": math.nan if best is None else t / best["measured"] - 1})
    return pd.DataFrame(rows)


def regret_summary(regrets: pd.DataFrame, within: float = 0.05) -> dict:
    """How often the advice was within `within` of the fastest: configurations, how many
    within, their share, the median and max regret."""
    n = len(regrets)
    ok = int((regrets["regret"] <= within).sum()) if n else 0
    return {"configurations": n, "within": within, "within_count": ok,
            "within_share": ok / n if n else math.nan,
            "median_regret": float(regrets["regret"].median()) if n else math.nan,
            "max_regret": float(regrets["regret"].max()) if n else math.nan}


def regret_markdown(table: pd.DataFrame) -> str:
    """The advice regret and auto's as Markdown (times in ms), with their summaries."""
    advice = advice_regret(table)
    if not len(advice):
        return ""
    shown = advice.drop(columns=[c for c in ("rate_bps",) if c in advice])
    for c in ("pick_predicted", "pick_measured", "fastest_measured"):
        shown[c] = shown[c] * 1e3
    s = regret_summary(advice)
    text = ("\nAdvice regret: the method the model ranks fastest (times in ms), its measured "
            "time over the fastest measured method's, minus 1:\n\n"
            + shown.to_markdown(index=False, floatfmt=".3g")
            + f"\n\nRegret at or under {s['within']:.0%} in {s['within_count']} of "
            f"{s['configurations']} configurations; median {s['median_regret']:.1%}, max "
            f"{s['max_regret']:.1%}.\n")
    auto = auto_regret(table)
    if len(auto):
        shown = auto.drop(columns=[c for c in ("rate_bps",) if c in auto])
        for c in ("auto", "fastest_candidate_measured"):
            shown[c] = shown[c] * 1e3
        text += ("\n`auto`'s regret: its steady-state time (timed after its exploration) "
                 "over the fastest measured run of its candidate methods, minus 1 (ms):\n\n"
                 + shown.to_markdown(index=False, floatfmt=".3g") + "\n")
    return text


def write_regret(out, table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """``regret.csv`` (`advice_regret`) and ``auto-regret.csv`` (`auto_regret`, when auto
    ran) in the folder `out`; both tables."""
    tables = {"regret": advice_regret(table), "auto_regret": auto_regret(table)}
    for name, rows in tables.items():
        if len(rows):
            write_atomic(Path(out) / f"{name.replace('_', '-')}.csv", rows.to_csv(index=False))
    return tables
