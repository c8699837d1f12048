"""The "Convergence" section of a results folder's report: from ``converge.csv`` and its curve
table (`converge`), which methods reach the target, how many iterations each needs relative to
uncompressed, how error feedback changes that, and the predicted time to the target on the
report's profile, workers and bandwidth (`time_to_accuracy`); writes
``time_to_accuracy.csv`` and the figures of `converge_plots`.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..analyses import weighed
from ..analyses.evidence import Evidence, with_intervals
from ..analyses.recommend import choose
from ..analyses.time_to_accuracy import select, unreached
from ..benches.converge import CONVERGE, load_curves
from ..common.store import ResultTable, write_atomic
from ..model.cost_tables import CostTable
from ..profiles.profiles import load_profile
from . import converge_plots

TTA = "time_to_accuracy.csv"


def _iterations(row) -> str:
    """Median iterations to target (min-max over seeds), or how far it got."""
    if math.isnan(row["iterations_to_target"]):
        return (f"not reached ({row['reached_seeds']}/{row['seeds']} seeds; accuracy "
                f"{row['final_accuracy']:.3f})")
    spread = ("" if row["iterations_min"] == row["iterations_max"] else
              f" ({row['iterations_min']:.0f}-{row['iterations_max']:.0f})")
    return f"{row['iterations_to_target']:.0f}{spread}"


def ef_effect(tta: pd.DataFrame) -> pd.DataFrame:
    """Per method and options measured both ways: iterations to target without and with error
    feedback (text) and the change."""
    rows = []
    for (method, options), pair in tta.groupby(["method", "options"], sort=False):
        off = pair[~pair["error_feedback"]]
        on = pair[pair["error_feedback"]]
        if off.empty or on.empty:
            continue
        a, b = off.iloc[0], on.iloc[0]
        if math.isnan(a["iterations_to_target"]) and math.isnan(b["iterations_to_target"]):
            change = (f"neither reaches it; final accuracy {a['final_accuracy']:.3f} -> "
                      f"{b['final_accuracy']:.3f}")
        elif math.isnan(a["iterations_to_target"]):
            change = "reaches it only with error feedback"
        elif math.isnan(b["iterations_to_target"]):
            change = "reaches it only without error feedback"
        else:
            change = f"{b['iterations_to_target'] / a['iterations_to_target']:.2f}x iterations"
        rows.append({"method": a["variant"], "without": _iterations(a),
                     "with": _iterations(b), "change": change})
    return pd.DataFrame(rows, columns=["method", "without", "with", "change"])


def _table(frame: pd.DataFrame) -> str:
    return frame.to_markdown(index=False, disable_numparse=True)


def _fmt(value, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None or math.isnan(value) else format(value * scale, spec)


def convergence_section(out, profile, net: dict, table: CostTable, evidence: Evidence,
                        bucketing: str = "ddp", device: str | None = None
                        ) -> tuple[list[str], pd.DataFrame | None]:
    """The section's markdown lines for results folder `out`, and its `time_to_accuracy`
    table priced by codec-cost `table` and weighed with `evidence` (`weighed.accuracy`;
    None when the folder gives none), for the report's recommendation on the network `net`
    (workers, bandwidth, latency_s, efficiency, tiers: `time_to_accuracy`'s keywords) and the
    question's GPU `device` (None: the profile's)."""
    out = Path(out)
    lines = ["## Convergence", ""]
    if not (out / CONVERGE).exists():
        return lines + ["Not measured in this run (no `converge.csv`).", ""], None
    summary = ResultTable(out / CONVERGE).frame()
    try:
        tta = weighed.accuracy(summary, profile, net, table, evidence, device=device,
                               bucketing=bucketing)
    except ValueError as e:
        return lines + [f"Not available: {e}.", ""], None
    write_atomic(out / TTA, tta.to_csv(index=False))
    chosen = select(summary)
    curve = load_curves(out / CONVERGE).merge(chosen[["task", "metric", "target"]]
                                              .drop_duplicates(), on=["task", "metric",
                                                                      "target"])
    pick = choose(tta, table, device or load_profile(profile).device).row
    recommended = None if pick is None else pick["variant"]
    converge_plots.convergence_curves(curve, out / "convergence_iterations.png",
                                      recommended=recommended)
    converge_plots.iterations_to_target(tta, out / "iterations_to_target.png",
                                        recommended=recommended)
    first, row, shown = tta.iloc[0], chosen.iloc[0], with_intervals(tta)
    seeds = sorted(chosen["seed"].unique())
    missed = unreached(tta)
    lines += [
        f"Task `{row['task']}` trained with DDP on {int(row['world_size'])} {row['backend']} "
        f"workers (batch {int(row['batch_size'])} per worker, SGD lr {row['lr']:g}, momentum "
        f"{row['momentum']:g}), seeds {', '.join(map(str, seeds))}, until test "
        f"{row['metric']} {'>=' if row['metric'] == 'accuracy' else '<='} {row['target']:g} "
        f"or {int(row['max_iters'])} iterations (`{CONVERGE}`, curves in "
        f"`converge_curve.csv`). Iterations are measured; the iteration time is predicted "
        f"for `{first['profile']}` on {net['workers']} workers (codec costs "
        f"{table.label}), so the "
        f"time to target is iterations x predicted iteration time (`{TTA}`); the "
        "recommendation above is its fastest variant that reached the target and is priced, "
        "a lossy one only when it clears the margin over the 16-bit baseline. Intervals "
        f"from: {evidence.describe(tta['variant'], len(seeds))}.",
        "",
        f"Reached the target on every seed: {len(tta) - len(missed)} of {len(tta)} variants"
        + (f"; not: {', '.join(missed)}." if missed else "."), "",
        _table(pd.DataFrame({
            "rank": tta["rank"],
            "method": [v + (" (not converged)" if math.isnan(i) else "") for v, i in
                       zip(tta["variant"], tta["iterations_to_target"])],
            "iterations to target": [_iterations(r) for _, r in tta.iterrows()],
            "vs none": [_fmt(v, ".2f") + ("x" if not math.isnan(v) else "")
                        for v in tta["iterations_vs_none"]],
            "final accuracy": [f"{a:.3f}" + (f" (spread {s:.3f})" if n > 1 else "")
                               for a, s, n in zip(tta["final_accuracy"],
                                                  tta["final_accuracy_spread"], tta["seeds"])],
            "bytes/iteration": [f"{b:,.0f}" for b in tta["bytes_sent_per_iter"]],
            "iteration (ms, predicted)": [_fmt(v, ".2f", 1e3) for v in tta["t_iter_s"]],
            "time to target (s)": [_fmt(v, ".3g") for v in tta["time_to_target_s"]],
            "speedup to target (interval)": shown["speedup_to_target"],
            "vs 16-bit (interval)": shown["vs_16bit"]})), "",
        "Error feedback (iterations to target without and with it; PowerSGD's is its own "
        "residual memory, on by default; `none` has nothing to feed back):", "",
        _table(ef_effect(tta)), "",
        "![loss and accuracy vs iteration](convergence_iterations.png)", "",
        "![iterations to target](iterations_to_target.png)", ""]
    return lines, tta
