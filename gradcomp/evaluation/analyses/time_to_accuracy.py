"""Time to accuracy: the iterations a method needed to reach the target in the convergence
benchmark (measured, `converge`) times its iteration time on the user's system (predicted by
the performance model for a profile, workers and bandwidth). A method that halves the
iteration time but needs three times the iterations loses here.

Per variant (method, options, error feedback) over its seeds: iterations_to_target is the
median over the seeds when every seed reached the target, else NaN (the variant did not reach
it; `reached_seeds` says how many did); iterations_min / iterations_max give the spread of the
seeds that reached it. time_to_target_s = iterations_to_target x t_iter_s. Relative to
uncompressed (`none` without error feedback): iterations_vs_none and speedup_to_target
(time_to_target of none / the variant's).

The iterations come from the benchmark's small task on local workers: a proxy for how the
method's compression error slows learning, not a measurement on the profiled model.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pandas as pd

from ... import diloco
from ...compressors import compressor
from ..benches.converge import compressor_options, options_text
from ..common.units import format_rate
from ..model.fit import as_costs
from ..model.methods import resolve
from ..model.network import Network
from ..model.timeline import predict
from ..profiles.profiles import load_profile

VARIANT = ["method", "options", "error_feedback"]
SELECT = ("task", "metric", "target")
TTA_COLUMNS = ["rank", "variant", "reached_seeds", "iterations_to_target", "iterations_min",
               "iterations_max", "iterations_vs_none", "t_iter_s", "time_to_target_s",
               "speedup_to_target", "final_accuracy"]


def select(summary: pd.DataFrame, task=None, target=None) -> pd.DataFrame:
    """The rows of one (task, metric, target) of a convergence summary; `task` and `target`
    choose when it holds several (else ValueError naming the option and the choices)."""
    if summary.empty:
        raise ValueError("convergence: the table has no rows (run `gradcomp bench converge`)")
    missing = [c for c in (*SELECT, *VARIANT, "seed", "reached", "iterations_to_target")
               if c not in summary.columns]
    if missing:
        raise ValueError(f"{summary.attrs.get('source', 'convergence')}: not a `bench "
                         f"converge` summary table (no column(s) "
                         f"{', '.join(missing)})")
    rows = summary
    for option, value in (("task", task), ("target", target)):
        if value is None:
            continue
        chosen = rows[rows[option] == value] if option == "task" else \
            rows[(rows[option] - float(value)).abs() < 1e-12]
        if chosen.empty:
            raise ValueError(f"{option}={value!r} is not in the convergence table: choose one "
                             f"of {', '.join(map(repr, sorted(rows[option].unique().tolist())))}")
        rows = chosen
    groups = rows.groupby(list(SELECT)).size()
    if len(groups) > 1:
        choices = "; ".join(f"task={t!r} {m} target={v:g}" for t, m, v in groups.index)
        raise ValueError(f"the convergence table holds several targets ({choices}): choose "
                         "one with task and target")
    return rows


def variant_label(method: str, options: str, error_feedback: bool) -> str:
    """method(non-default options), with " +EF" when error feedback was on; `auto` (the hook
    choosing among its candidates, no compressor) against the settings `bench converge`
    records for it when given none."""
    given = json.loads(options) if isinstance(options, str) else dict(options)
    if method == diloco.NAME:
        return diloco.Variant.from_options(given).label() + (" +EF" if error_feedback else "")
    default = json.loads(options_text(method, {}, False)) if method == "auto" else \
        compressor(method).options()
    shown = {k: v for k, v in given.items() if k != "seed" and default.get(k) != v}
    text = method + (f"({', '.join(f'{k}={v}' for k, v in shown.items())})" if shown else "")
    return text + (" +EF" if error_feedback else "")


def per_variant(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per variant of one target's summary rows: seeds, reached_seeds,
    iterations_to_target (median when all seeds reached, else NaN), its min and max, the
    mean final accuracy and its spread (max - min), bytes sent per iteration, ratio."""
    rows = []
    for (method, options, ef), runs in summary.groupby(VARIANT, sort=False):
        hit = runs[runs["reached"].astype(bool)]["iterations_to_target"]
        all_hit = len(hit) == len(runs)
        rows.append({"method": method, "options": options, "error_feedback": bool(ef),
                     "variant": variant_label(method, options, bool(ef)), "seeds": len(runs),
                     "reached_seeds": len(hit),
                     "iterations_to_target": hit.median() if all_hit else math.nan,
                     "iterations_min": hit.min() if len(hit) else math.nan,
                     "iterations_max": hit.max() if len(hit) else math.nan,
                     "max_iters": runs["max_iters"].max(),
                     "final_accuracy": runs["final_accuracy"].mean(),
                     "final_accuracy_spread": runs["final_accuracy"].max()
                     - runs["final_accuracy"].min(),
                     "diverged_seeds": int(runs["diverged"].astype(bool).sum()),
                     "bytes_sent_per_iter": runs["bytes_sent_per_iter"].mean(),
                     "ratio": runs["ratio"].mean()})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Variants:
    """One target's variants of a convergence summary (`variants`): `table`, one row per
    variant (`per_variant`), and the target's `task`, `metric` and `target`. Made once, it
    prices at many questions (`time_to_accuracy`) without being summarised again."""
    table: pd.DataFrame
    task: str
    metric: str
    target: float


def variants(summary: pd.DataFrame, task=None, target=None, methods=None) -> Variants:
    """The variants of one target of a convergence summary (see `select`), only `methods`
    when given (by name: ``diloco:H=10`` selects every DiLoCo variant)."""
    rows = select(summary, task, target)
    if methods is not None:
        rows = rows[rows["method"].isin([str(m).split(":")[0] for m in methods])]
        if rows.empty:
            raise ValueError(f"methods={list(methods)!r}: none of them is in the convergence "
                             "table")
    first = rows.iloc[0]
    return Variants(per_variant(rows), first["task"], first["metric"], first["target"])


def time_to_accuracy(summary, profile, workers: int, bandwidth, costs=None,
                     bucketing="ddp", latency_s: float = 0.0, efficiency: float = 1.0,
                     contention: float = 1.0, task=None, target=None,
                     methods=None, tiers=None) -> pd.DataFrame:
    """Rank the variants of a convergence summary (one target, see `select`; only `methods`
    when given) by predicted time to target on `profile` with `workers` at `bandwidth`
    (`costs`: a compress-bench table or fitted costs, `tiers` the cluster's two-tier fields,
    as for `advise`; `methods` by name: ``diloco:H=10`` selects every DiLoCo variant), or
    the `Variants` made of one (`variants`: task, target and methods chose them then).
    Variants that did not reach the target come last, with NaN time. A DiLoCo variant's
    iterations are inner steps, its t_iter an inner step's."""
    chosen = summary if isinstance(summary, Variants) else \
        variants(summary, task, target, methods)
    table = chosen.table
    prof = load_profile(profile)
    network = Network(workers, bandwidth, latency_s, efficiency, **(tiers or {}))
    fitted = as_costs(costs)
    base = predict(prof, network, "none", bucketing, contention).t_iter_s
    preds = [predict(prof, network, resolve(m, fitted, error_feedback=ef,
                                            **compressor_options(m, o)),
                     bucketing, contention, base)
             for m, o, ef in zip(table["method"], table["options"], table["error_feedback"])]
    t_iter = pd.Series([p.t_iter_s for p in preds], index=table.index, dtype=float)
    to_target = table["iterations_to_target"] * t_iter
    none = ((table["method"] == "none") & ~table["error_feedback"]).to_numpy()
    ref = (table["iterations_to_target"][none].iloc[0], to_target[none].iloc[0]) \
        if none.any() else (math.nan, math.nan)
    # the columns added in one frame: a column inserted one at a time costs about a
    # millisecond, and this runs at every point a flip search prices
    table = pd.DataFrame({**dict(table.items()), "t_iter_s": t_iter,
                          "speedup_per_iter": [p.speedup for p in preds],
                          "time_to_target_s": to_target,
                          "iterations_vs_none": table["iterations_to_target"] / ref[0],
                          "speedup_to_target": ref[1] / to_target, "task": chosen.task,
                          "metric": chosen.metric, "target": chosen.target,
                          "profile": prof.name, "workers": workers,
                          "bandwidth_bps": network.bandwidth_bps, "bucketing": bucketing,
                          "costs": "fitted" if fitted else "assumed"}, index=table.index)
    table = table.sort_values(["time_to_target_s", "final_accuracy"], ascending=[True, False],
                              na_position="last", kind="stable").reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    return table


def _target_text(row) -> str:
    return (f"test accuracy >= {row['target']:g}" if row["metric"] == "accuracy"
            else f"test loss <= {row['target']:g}")


def unreached(table: pd.DataFrame) -> list[str]:
    """The variants of a `time_to_accuracy` table that did not reach the target on every
    seed."""
    return list(table[table["iterations_to_target"].isna()]["variant"])


def tta_verdict(table: pd.DataFrame) -> str:
    """A plain answer from a `time_to_accuracy` table."""
    first = table.iloc[0]
    goal = (f"{_target_text(first)} on task '{first['task']}' (iterations measured), "
            f"{first['profile']} on {first['workers']} workers at "
            f"{format_rate(first['bandwidth_bps'])} (iteration time predicted)")
    missed = unreached(table)
    tail = "" if not missed else (f" Did not reach the target within "
                                  f"{int(table['max_iters'].max())} iterations on every seed: "
                                  f"{', '.join(missed)}.")
    if math.isnan(first["time_to_target_s"]):
        return f"No method reached {goal}.{tail}"
    none = table[(table["method"] == "none") & ~table["error_feedback"]]
    best = (f"{first['variant']} reaches it in {first['iterations_to_target']:.0f} iterations "
            f"x {first['t_iter_s'] * 1e3:.2f} ms = {first['time_to_target_s']:.3g} s")
    if none.empty or math.isnan(none.iloc[0]["time_to_target_s"]):
        return f"{goal}: {best}; uncompressed did not reach it.{tail}"
    ref = none.iloc[0]
    if first["variant"] == ref["variant"]:
        others = table[(table["variant"] != ref["variant"]) & table["time_to_target_s"].notna()]
        runner = "" if others.empty else (
            f"; the fastest compressed method, {others.iloc[0]['variant']}, would take "
            f"{others.iloc[0]['time_to_target_s'] / ref['time_to_target_s'] - 1:.0%} longer")
        return f"No: uncompressed is fastest to {goal}: {best}{runner}.{tail}"
    noise = ""
    if ref["iterations_min"] <= first["iterations_to_target"] <= ref["iterations_max"]:
        noise = (f" Its iteration count lies within uncompressed's seed spread "
                 f"({ref['iterations_min']:.0f}-{ref['iterations_max']:.0f}), so that part is "
                 f"noise: on iteration time alone it is "
                 f"{ref['t_iter_s'] / first['t_iter_s']:.2f}x faster.")
    interval = "" if "speedup_to_target_low" not in table else (
        f" (interval {first['speedup_to_target_low']:.2f}-"
        f"{first['speedup_to_target_high']:.2f}x)")  # a table weighed by `evidence.weigh`
    return (f"Yes: {best}, {first['speedup_to_target']:.2f}x{interval} sooner than uncompressed "
            f"({ref['iterations_to_target']:.0f} iterations x {ref['t_iter_s'] * 1e3:.2f} ms"
            f" = {ref['time_to_target_s']:.3g} s) to {goal}.{noise}{tail}")
