"""Figures of the convergence benchmark, in the style of `plots` (`style`: fixed pixel size,
written atomically, returning the path):

* `convergence_curves`: test loss and test accuracy per method (median over seeds) against the
  convergence task's own iterations (never another workload's predicted wall time: the task
  is a proxy), without and with error feedback side by side, the target drawn; one colour and
  marker per method (on every third evaluation); the baselines and the recommendation wide
  and opaque, widened (`style.halo_widths`) so that none hides another, the rest thin and
  faint;
* `iterations_to_target`: iterations each method needed without and with error feedback,
  methods that did not reach the target marked, the baselines and the recommendation named
  in bold.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..analyses.time_to_accuracy import variant_label
from .plots import BASELINES, MUTED_ALPHA
from .style import (figure, halo_widths, legend_handles, legend_outside, line_styles, save,
                    styled)

EF_PANELS = ((False, "without error feedback"), (True, "with error feedback"))


def _with_labels(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with columns case (method and options) and variant (case, " +EF")."""
    cases = [variant_label(m, o, False) for m, o in zip(frame["method"], frame["options"])]
    return frame.assign(case=cases, variant=[c + (" +EF" if ef else "") for c, ef
                                             in zip(cases, frame["error_feedback"])])


@styled
def convergence_curves(curve: pd.DataFrame, path, size=(13, 8), title=None, *,
                       recommended: str | None = None):
    """Curves from `converge.load_curves` rows of one target against the task's iterations;
    the `BASELINES` (both columns) and the `recommended` variant (its label, " +EF" in the
    right column) emphasised."""
    curve = _with_labels(curve)
    cases = list(dict.fromkeys(curve["case"]))
    styles = line_styles(cases)
    width, height = size  # room in inches for the tick labels, the axis labels and the titles
    fig, axes = figure(size, 2, nrows=2, sharex="col", sharey="row",
                       margins=dict(left=1.0 / width, bottom=0.6 / height,
                                    top=1 - 0.7 / height, wspace=0.06, hspace=0.05))
    first = curve.iloc[0]
    for col, (ef, panel) in enumerate(EF_PANELS):
        rows = curve[curve["error_feedback"].astype(bool) == ef]
        drawn = {}
        for case in cases:
            runs = rows[rows["case"] == case]
            if runs.empty:
                continue
            line = runs.groupby("iteration")[["test_loss", "test_accuracy"]].median()
            drawn[case] = (line.index.to_numpy(float), line)
        loud = [c for c in drawn if c in BASELINES or c + (" +EF" if ef else "") == recommended]
        for row, metric in enumerate(("test_loss", "test_accuracy")):
            widths = halo_widths({c: (x, drawn[c][1][metric]) for c, (x, _) in drawn.items()
                                  if c in loud}, log=metric == "test_loss")
            for i, (case, (x, line)) in enumerate(drawn.items()):
                shown = (dict(linewidth=widths[case], markersize=6, zorder=3 + 1 / widths[case])
                         if case in loud else
                         dict(linewidth=1.0, markersize=4, alpha=MUTED_ALPHA, zorder=1))
                axes[row, col].plot(x, line[metric], label=case, **styles[case],
                                    markevery=(i % 3, 3), **shown)
        axes[0, col].set_title(panel, fontsize="medium")
        axes[0, col].set_yscale("log")
        target_row = 1 if first["metric"] == "accuracy" else 0
        axes[target_row, col].axhline(first["target"], color="black", linewidth=1,
                                      linestyle="--")
        axes[1, col].set_xlabel(f"iterations of task '{first['task']}'")
    axes[0, 0].set_ylabel("test loss")
    axes[1, 0].set_ylabel("test accuracy")
    handles, labels = legend_handles(styles)
    legend_outside(fig, handles, labels, fontsize="small",
                   title="method\n(error feedback:\nright column)\nwide: baselines and\n"
                         + ("the recommendation" if recommended else "no recommendation")
                         + "\nfaint: the rest")
    fig.suptitle(title or f"Convergence on task '{first['task']}' vs its iterations "
                          f"(measured, median over seeds; dashed: target)", x=0.02, ha="left")
    return save(fig, path)


@styled
def iterations_to_target(tta: pd.DataFrame, path, size=(10, 7), title=None, *,
                         recommended: str | None = None):
    """Bars: iterations to target per method (median over seeds, whiskers min-max), without
    and with error feedback; a variant that did not reach the target on every seed is drawn
    as a hatched bar at the budget, labelled "not reached". The `BASELINES` and the
    `recommended` variant's method (named so) in bold."""
    table = _with_labels(tta)
    cases = list(dict.fromkeys(table.sort_values(["method", "options"], kind="stable")["case"]))
    fig, axes = figure(size)
    ax = axes[0, 0]
    y = np.arange(len(cases))
    budget = float(table["max_iters"].max())
    for offset, (ef, panel) in zip((-0.2, 0.2), EF_PANELS):
        rows = table[table["error_feedback"].astype(bool) == ef].set_index("case")
        rows = rows.reindex(cases)
        done = rows["iterations_to_target"].to_numpy(float)
        missing = rows["variant"].notna().to_numpy() & np.isnan(done)
        color = "tab:blue" if not ef else "tab:orange"
        ax.barh(y + offset, np.nan_to_num(done), height=0.4, color=color, label=panel)
        ax.errorbar(done, y + offset, xerr=[done - rows["iterations_min"].to_numpy(float),
                                            rows["iterations_max"].to_numpy(float) - done],
                    fmt="none", ecolor="black", elinewidth=1, capsize=2)
        ax.barh(y[missing] + offset, budget, height=0.4, color=color, alpha=0.25,
                hatch="//", edgecolor=color)
        for i in np.flatnonzero(missing):
            ax.annotate("not reached", (budget, i + offset), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize="x-small")
    pick = None if recommended is None else recommended.removesuffix(" +EF")
    named = f" (recommended{' with +EF' if recommended != pick else ''})"
    ax.set_yticks(y, [c + (named if c == pick else "") for c in cases])
    for case, label in zip(cases, ax.get_yticklabels()):
        if case in BASELINES or case == pick:
            label.set_fontweight("bold")
    ax.invert_yaxis()
    ax.margins(x=0.15)
    ax.set_xlabel("iterations to target (median over seeds; whiskers: min-max)")
    ax.legend(loc="lower right")
    first = table.iloc[0]
    goal = (f"test accuracy >= {first['target']:g}" if first["metric"] == "accuracy"
            else f"test loss <= {first['target']:g}")
    ax.set_title(title or f"Iterations to {goal} on task '{first['task']}' "
                          f"(budget {budget:.0f})", fontsize="medium")
    return save(fig, path)
