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

A method's measured time here is the median of its runs (`regret_time`: column
``measured_runs_median`` where `validate --train-repeats` measured several, else
``measured``). The errors hold the model against each method's least disturbed run instead
(`pooled`); a least-disturbed run is a minimum over a method's runs, and the fastest of many
such minima is biased low against the one it is compared with: in
``testbed-2026-11-28-auto-rounds-4`` auto's least-disturbed run (a minimum over 4) against the
fastest candidate's (a minimum over 16) put auto 2.8-4.0% over its fastest candidate at 2 of
4 rates where the medians of the runs put it within 2.1% at every rate.

`auto_regret` holds `auto`'s measured time (its steady state: `benches.train` times it after
its exploration) against two fastest fixed runs:

* its candidates': the fixed runs of `comm.auto.DEFAULT_CANDIDATES` with auto's options
  (`candidate_labels`: top-k with error feedback, PowerSGD rank 4; `validate` runs them,
  `with_auto_candidates`): regret = auto / fastest candidate - 1, what its choice cost;
* every fixed method's (per-step, DDP included; random-k, say, is none of auto's): regret_vs_fixed
  = auto / fastest fixed - 1, what using auto cost against the best fixed choice.

Matched by name alone (as before 2026-11-28), a fixed ``topk`` without error feedback (10-13
ms less encode per iteration on the testbed's MLP) stood for auto's top-k with it, a method
auto cannot run. Both are pure functions of the table; `validate` writes them beside the
errors.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from ...comm.auto import DEFAULT_CANDIDATES
from ...compressors import compressor
from ..common.store import write_atomic
from ..common.units import format_rate
from ..model.cost_tables import variant_name
from ..model.methods import method_spec, parse_methods
from .validate_diloco import is_diloco

CONFIG = ("rate_bps", "layout", "nodes", "gpus_per_node")


def spec_label(spec: str) -> str:
    """A method as ``name[:key=value,...]`` the way validation tables name its runs
    (`validate_diloco.run_label`); a method that is no compressor (ddp, auto, DiLoCo) as
    given."""
    name, options = parse_methods(spec)[0]
    try:
        built = compressor(name, **options).options()
    except (ValueError, TypeError):
        return spec
    return variant_name(name, json.dumps(built, sort_keys=True))


def auto_candidates() -> list[str]:
    """`auto`'s default candidates as methods with its options: ``topk:ratio=0.01,...``."""
    return [c if isinstance(c, str) else method_spec(*c) for c in DEFAULT_CANDIDATES]


def candidate_labels() -> set[str]:
    """The validation tables' names of the fixed runs of `auto_candidates`."""
    return {spec_label(c) for c in auto_candidates()}


def with_auto_candidates(methods: list[str]) -> list[str]:
    """`methods`, and where `auto` is among them each of `auto_candidates` they lack (by
    `spec_label`), before `auto`: its regret needs their fixed runs."""
    if "auto" not in methods:
        return list(methods)
    have = {spec_label(m) for m in methods}
    extra = [c for c in auto_candidates() if spec_label(c) not in have]
    at = methods.index("auto")
    return [*methods[:at], *extra, *methods[at:]]


def config_columns(table: pd.DataFrame) -> list[str]:
    """The columns of `CONFIG` that `table` has."""
    return [c for c in CONFIG if c in table.columns]


def regret_time(runs: pd.DataFrame) -> pd.Series:
    """Each row's measured time for the regret: the median of its runs
    (``measured_runs_median``), or ``measured`` where a table has no such column."""
    if "measured_runs_median" in runs:
        return runs["measured_runs_median"].fillna(runs["measured"])
    return runs["measured"]


def advice_regret(table: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration (module docstring): its `CONFIG` columns, rate, pick,
    pick_predicted, pick_measured, fastest, fastest_measured, regret."""
    rows = []
    config = config_columns(table)
    predicted = table[table["predicted"].notna() & ~is_diloco(table["method"])]
    for key, runs in predicted.groupby(config, sort=False):
        runs = runs.reset_index(drop=True)  # labels of a concatenated table repeat
        times = regret_time(runs)
        pick, best = runs["predicted"].idxmin(), times.idxmin()
        rows.append({**dict(zip(config, key if isinstance(key, tuple) else (key,))),
                     "rate": format_rate(runs.at[pick, "rate_bps"]),
                     "pick": runs.at[pick, "method"],
                     "pick_predicted": runs.at[pick, "predicted"], "pick_measured": times[pick],
                     "fastest": runs.at[best, "method"], "fastest_measured": times[best],
                     "regret": times[pick] / times[best] - 1})
    return pd.DataFrame(rows)


def auto_regret(table: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration with an `auto` run (module docstring): its `CONFIG` columns,
    rate, auto (measured), fastest_candidate, fastest_candidate_measured, regret (against
    its candidates' fixed runs), fastest_fixed, fastest_fixed_measured, regret_vs_fixed
    (against every fixed per-step run); NaN where no such run was measured."""
    rows = []
    config = config_columns(table)
    candidates = candidate_labels()
    for key, runs in table.groupby(config, sort=False):
        auto = runs[runs["method"] == "auto"]
        if not len(auto):
            continue
        t = float(regret_time(auto).iloc[0])
        fixed = runs[(runs["method"] != "auto") & ~is_diloco(runs["method"])]
        rows.append({**dict(zip(config, key if isinstance(key, tuple) else (key,))),
                     "rate": format_rate(float(auto["rate_bps"].iloc[0])), "auto": t,
                     **_against(t, fixed[fixed["method"].isin(candidates)], "candidate", ""),
                     **_against(t, fixed, "fixed", "_vs_fixed")})
    return pd.DataFrame(rows)


def _against(t: float, runs: pd.DataFrame, what: str, suffix: str) -> dict:
    """fastest_<what>, fastest_<what>_measured and regret<suffix> of time `t` against the
    fastest of `runs` (by `regret_time`)."""
    if not len(runs):
        return {f"fastest_{what}": "", f"fastest_{what}_measured": math.nan,
                f"regret{suffix}": math.nan}
    runs = runs.reset_index(drop=True)  # a table concatenated from others repeats labels
    times = regret_time(runs)
    best = times.idxmin()
    return {f"fastest_{what}": runs.at[best, "method"], f"fastest_{what}_measured": times[best],
            f"regret{suffix}": t / times[best] - 1}


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
            "time over the fastest measured method's, minus 1 (each method's measured time the "
            "median of its runs):\n\n"
            + shown.to_markdown(index=False, floatfmt=".3g")
            + f"\n\nRegret at or under {s['within']:.0%} in {s['within_count']} of "
            f"{s['configurations']} configurations; median {s['median_regret']:.1%}, max "
            f"{s['max_regret']:.1%}.\n")
    auto = auto_regret(table)
    if len(auto):
        shown = auto.drop(columns=[c for c in ("rate_bps",) if c in auto])
        for c in ("auto", "fastest_candidate_measured", "fastest_fixed_measured"):
            shown[c] = shown[c] * 1e3
        text += ("\n`auto`'s regret: its steady-state time (timed after its exploration) "
                 "over the fastest fixed run of its candidates, with its options (`regret`), "
                 "and over the fastest fixed run of any method (`regret_vs_fixed`), minus 1 "
                 "(ms; each the median of its runs):\n\n"
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


def auto_comparison(table: pd.DataFrame) -> pd.DataFrame:
    """Per rate with an `auto` row: its measured time (`regret_time`) against the fastest fixed
    run of its default candidates (`candidate_labels`: with auto's options) and DDP's, and its
    choices."""
    names = candidate_labels()
    rows = []
    for rate, runs in table.groupby("rate_bps", sort=True):
        auto, others = runs[runs["method"] == "auto"], runs[runs["method"].isin(names)]
        if not len(auto):
            continue
        t = float(regret_time(auto).iloc[0])
        best = _against(t, others, "candidate", "")
        ddp = regret_time(runs[runs["method"] == "ddp"])
        rows.append({"rate": format_rate(rate), "auto_ms": t * 1e3,
                     "fastest_candidate": best["fastest_candidate"],
                     "fastest_candidate_ms": best["fastest_candidate_measured"] * 1e3,
                     "auto_vs_fastest": best["regret"] + 1,
                     "auto_vs_ddp": t / float(ddp.iloc[0]) if len(ddp) else math.nan,
                     "auto_choices": auto["auto_choices"].iloc[0]})
    return pd.DataFrame(rows)
