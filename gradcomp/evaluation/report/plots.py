"""Figures of a gradcomp evaluation, each drawn from tidy DataFrames and written atomically to a
PNG of a fixed pixel size (`size` inches x `DPI`); every function returns the path it wrote
(with path None: the Figure, for inspection).
Drawn on Agg canvases in seaborn's style (`style`), without pyplot or changing global
matplotlib state.

* `speedup_vs_bandwidth`: modelled speedup of each method over uncompressed, vs bandwidth,
  the baselines and the recommendation emphasised with their intervals as bands, the
  scenario's bandwidth marked;
* `codec_costs`: measured encode and decode time vs tensor size, with the fitted a + b*n;
* `collective_times`: measured collective time vs payload, with the fitted alpha-beta cost;
* `scaling_heatmap`: modelled scaling factor over bandwidth x workers, one panel per method,
  the scenario's cell outlined;
* `predicted_vs_measured`: the model's iteration time against the measured one, per method.
* `validation_sweep`: measured and predicted iteration time vs link rate (`validate`).
* `block_sparse_sweep`: block-sparse all-reduce time vs block density, measured and predicted.
* `allreduce_times`: simulated all-reduce time per algorithm on each topology (`topology`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import NullFormatter

from ..model.fit import fit_problem
from ..model.network import Network
from .style import DPI  # noqa: F401 - the figures' resolution, part of this module's face
from .style import (figure, halo_widths, legend_handles, legend_outside, line_styles, save,
                    styled)

UNITS = {"allreduce": "all-reduce", "allgather": "all-gather", "broadcast": "broadcast"}
BASELINES = ("none", "bf16", "fp16")  # fp32 DDP and the 16-bit all-reduces: drawn wide
MUTED_ALPHA = 0.35  # the opacity of the methods neither a baseline nor recommended
BAND_ALPHA = 0.2  # the opacity of an emphasised method's interval band
SCENARIO = "scenario"  # the label of the vertical line at the scenario's bandwidth
SWEPT_GBPS = (1, 400)  # the speedup plot's axis, Gbit/s: `whatif.default_bandwidths`' range


@styled
def speedup_vs_bandwidth(sweep: pd.DataFrame, path, size=(12, 5.5), title=None, *,
                         scenario_bps: float | None = None, recommended: str | None = None):
    """Modelled speedup vs bandwidth (log x, 1-400 Gbit/s) per method from `whatif.sweep`
    rows (one workers value), as lines without markers (a model, not measurements); a panel
    per value of the optional column `costs`. The `BASELINES` and the `recommended` method
    are drawn wide and opaque, with their intervals (columns ``speedup_low`` / ``_high``,
    `weighed.sweep`, where present) as bands of their colour labelled "<method>: interval";
    every other method thin and faint; the scenario's bandwidth `scenario_bps` (bit/s) is a
    labelled vertical line (`_mark_scenario`: the axis widened to it when outside)."""
    panels = list(dict.fromkeys(sweep["costs"])) if "costs" in sweep else [None]
    methods = list(dict.fromkeys(sweep["method"]))
    styles = line_styles(methods)
    shown = [m for m in methods if m in BASELINES or m == recommended]
    banded = {"speedup_low", "speedup_high"} <= set(sweep)
    width, height = size  # room in inches for the tick labels, the axis labels and the titles
    fig, axes = figure(size, len(panels), sharey=True,
                       margins=dict(left=0.9 / width, bottom=0.65 / height,
                                    top=1 - (0.75 if panels != [None] else 0.5) / height,
                                    wspace=0.04))
    for ax, panel in zip(axes[0], panels):
        rows = sweep if panel is None else sweep[sweep["costs"] == panel]
        lines = {m: rows[rows["method"] == m].sort_values("bandwidth_bps") for m in methods}
        widths = halo_widths({m: (lines[m]["bandwidth_bps"], lines[m]["speedup"])
                              for m in shown}, log=True)
        for method, line in lines.items():
            width = widths.get(method)  # the recommendation one point wider than the rest
            ax.plot(line["bandwidth_bps"] / 1e9, line["speedup"], label=method,
                    **_model_line(styles[method], None if width is None else
                                  width + (method == recommended)))
            if banded and method in shown:
                ax.fill_between(line["bandwidth_bps"] / 1e9, line["speedup_low"],
                                line["speedup_high"], color=styles[method]["color"],
                                alpha=BAND_ALPHA, linewidth=0, zorder=2,
                                label=f"{method}: interval")
        ax.set_xscale("log")
        ax.set_xlim(*(SWEPT_GBPS if scenario_bps is None else
                      _mark_scenario(ax, scenario_bps / 1e9)))
        ax.set_xlabel("bandwidth per worker (Gbit/s)")
        if panel is not None:
            ax.set_title(f"encode/decode costs: {panel}", fontsize="medium")
    speedups = sweep[["speedup", *(["speedup_low", "speedup_high"] if banded else [])]
                     ].to_numpy(float)
    lo, hi = np.nanmin(speedups), np.nanmax(speedups)
    if hi / max(lo, 1e-12) > 4:  # spread the curves near 1
        axes[0, 0].set_yscale("log")
        ticks = [t for t in (0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7, 10, 15, 20, 30, 50,
                             100) if lo / 1.2 <= t <= hi * 1.2]
        axes[0, 0].yaxis.set_ticks(ticks, [f"{t:g}" for t in ticks])
        axes[0, 0].yaxis.set_minor_formatter(NullFormatter())
    axes[0, 0].set_ylabel("speedup over fp32 DDP (x)")
    order = shown + [m for m in methods if m not in shown]
    legend_outside(fig, [Line2D([], [], **_model_line(styles[m], (2.5 if m == recommended
                                                                  else 1.5)
                                                      if m in shown else None))
                         for m in order], [_legend_name(m, recommended) for m in order],
                   fontsize="small",
                   title="method (model)\nwide: baselines and\nthe recommendation"
                         + ("\nband: its interval\n(hidden by the line\nwhere narrower)"
                            if banded else ""))
    row = sweep.iloc[0]
    fig.suptitle(title or f"Modelled speedup vs bandwidth: {row['profile']}, {row['workers']} "
                          f"workers, {row['bucketing']} bucketing", x=0.02, ha="left")
    return save(fig, path)


def _mark_scenario(ax, at: float) -> tuple[float, float]:
    """A dotted line at the scenario's bandwidth `at` (Gbit/s), labelled on its roomier side;
    returns the x limits that hold it: `SWEPT_GBPS`, widened past `at` when it lies outside
    (the label says so: the curves end where the sweep does)."""
    low, high = SWEPT_GBPS
    outside = not low <= at <= high
    if outside:  # a margin, so that the line is not the axis' edge
        low, high = min(low, at / 1.5), max(high, at * 1.5)
    ax.axvline(at, color="black", linestyle=":", linewidth=1.5, label=SCENARIO)
    left = np.log(at / low) > np.log(high / low) / 2  # in the axis' right half: label left
    ax.annotate(f"scenario: {at:g} Gbit/s" + (", outside the sweep" if outside else ""),
                (at, 1), xycoords=("data", "axes fraction"), xytext=(-4 if left else 4, -4),
                textcoords="offset points", va="top", ha="right" if left else "left",
                fontsize="small")
    return low, high


def _model_line(style: dict, width: float | None) -> dict:
    """Line keywords of a model curve (no markers): emphasised (`width` given: that wide,
    opaque, on top) or muted (thin, faint, below)."""
    line = {"color": style["color"], "linestyle": style["linestyle"], "marker": "none"}
    if width is None:
        return {**line, "linewidth": 1.0, "alpha": MUTED_ALPHA, "zorder": 1}
    return {**line, "linewidth": width + 1.0, "alpha": 1.0, "zorder": 3 + 1 / width}


def _legend_name(method: str, recommended: str | None) -> str:
    name = {"none": "none (fp32 DDP)", "bf16": "bf16 all-reduce",
            "fp16": "fp16 all-reduce"}.get(method, method)
    return name + (" (recommended)" if method == recommended else "")


@styled
def codec_costs(table: pd.DataFrame, path, fits: dict | None = None, size=(14, 6.5),
                title=None, *, emphasised=()):
    """Measured encode and decode seconds vs elements (log-log) per method, from a
    compress-bench table: markers, one colour and marker per method; with the fits of
    `fit.fit_codec`, each method's fitted a + b*n as a line of its colour through its points
    (dotted when `fit.fit_problem` excludes it), points dropped as outliers hollow. Given
    `emphasised` methods (the baselines and the recommendation), those are drawn wide and
    every other method thin and faint."""
    methods = list(dict.fromkeys(table["method"]))
    styles = line_styles(methods)

    def weight(method: str) -> dict:
        if not emphasised:
            return {"alpha": 1.0, "linewidth": 1.2, "markersize": 5, "zorder": 2}
        if method in emphasised:
            return {"alpha": 1.0, "linewidth": 2.4, "markersize": 7, "zorder": 3}
        return {"alpha": MUTED_ALPHA, "linewidth": 0.8, "markersize": 4, "zorder": 1}
    width, height = size  # room in inches for the tick labels, the axis labels and the titles
    fig, axes = figure(size, 2, sharey=True,
                       margins=dict(left=0.9 / width, bottom=0.6 / height,
                                    top=1 - 0.75 / height, wspace=0.04))
    grid = np.geomspace(table["numel"].min(), table["numel"].max(), 50)
    for ax, phase in zip(axes[0], ("encode", "decode")):
        for method in methods:
            rows = table[table["method"] == method].sort_values("numel")
            style = styles[method]
            fit = (fits or {}).get((method, phase))
            dropped = rows["numel"].isin(fit.dropped if fit else ())
            w = weight(method)
            ax.plot(rows["numel"][~dropped], rows[f"{phase}_s"][~dropped], label=method,
                    color=style["color"], marker=style["marker"],
                    linestyle="none" if fits else "-", **w)
            ax.plot(rows["numel"][dropped], rows[f"{phase}_s"][dropped],
                    color=style["color"], marker=style["marker"], linestyle="none",
                    markerfacecolor="none", **{**w, "markersize": w["markersize"] + 2})
            if fit:
                fitted = fit.params["a"] + fit.params["b"] * grid
                ax.plot(grid[fitted > 0], fitted[fitted > 0], color=style["color"],
                        linestyle=":" if fit_problem(fit) else "-", marker="none", **w)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tensor size (elements)")
        ax.set_title(f"{phase} (per application)", fontsize="medium")
    axes[0, 0].set_ylabel("time (s)")
    handles, labels = legend_handles(styles)
    for handle, method in zip(handles, labels):
        handle.set(**{k: v for k, v in weight(method).items() if k != "zorder"})
    legend_outside(fig, handles, labels, fontsize="small",
                   title="method" + ("\nmarkers: measured\nline: fit a + b*n\ndotted: fit "
                                     "excluded\nhollow: outlier\n(dropped)" if fits else "")
                   + ("\nwide: baselines and\nthe recommendation" if emphasised else ""))
    device = table["device_name"].iloc[0] if "device_name" in table else table["device"].iloc[0]
    fig.suptitle(title or f"Measured encode and decode time vs tensor size on {device}"
                 + (", with each method's fitted a + b*n" if fits else ""))
    return save(fig, path)


@styled
def collective_times(table: pd.DataFrame, path, fits: dict | None = None, size=(8, 5),
                     title=None):
    """Measured collective seconds vs per-worker payload (log-log) from a collective-bench
    table, as markers; dashed lines: the alpha-beta fits `fit.fit_collectives` when given,
    every one drawn."""
    width, height = size  # room in inches for the tick labels, the axis labels and the title
    fig, axes = figure(size, margins=dict(left=0.9 / width, right=1 - 0.1 / width,
                                          bottom=0.6 / height, top=1 - 0.35 / height))
    ax = axes[0, 0]
    colors = dict(zip(UNITS, sns.color_palette("deep", len(UNITS))))
    grid = np.geomspace(table["nbytes"].min(), table["nbytes"].max(), 50)
    for (collective, p), rows in table.groupby(["collective", "world_size"], sort=False):
        rows = rows.sort_values("nbytes")
        label = f"{UNITS.get(collective, collective)}, {p} workers"
        ax.plot(rows["nbytes"], rows["time_s"], marker="o", linestyle="none",
                color=colors.get(collective), label=label)
        fit = (fits or {}).get(collective)
        if fit and p > 1:
            ax.plot(grid, _fitted_seconds(fit, collective, int(p), grid), linestyle="--",
                    color=colors.get(collective), linewidth=1, label=f"{label}: fit")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(table["time_s"].min() / 2, table["time_s"].max() * 2)
    ax.set_xlabel("payload per worker (bytes)")
    ax.set_ylabel("time (s)")
    ax.legend(fontsize="small")
    backend = table["backend"].iloc[0] if "backend" in table else ""
    ax.set_title(title or f"Measured collective time vs payload ({backend})"
                 + (" and alpha-beta fit (dashed)" if fits else ""), fontsize="medium")
    return save(fig, path)


def _fitted_seconds(fit, collective: str, workers: int, grid) -> list[float]:
    """Seconds of an alpha-beta `fit` at payloads `grid`, priced by `Network`; a fit of slope
    0 (bandwidth infinite: payloads too small to leave the latency's noise) is its latency
    term alone, which `Network.cost` adds to any bandwidth's transfer term."""
    alpha, rate = max(fit.params["alpha_s"], 0.0), fit.params["bandwidth_bps"]
    if np.isfinite(rate):
        net = Network(workers, rate, alpha)
        return [net.cost(collective, n) for n in grid]
    with_latency, without = Network(workers, 8e9, alpha), Network(workers, 8e9)
    return [with_latency.cost(collective, n) - without.cost(collective, n) for n in grid]


@styled
def scaling_heatmap(sweep: pd.DataFrame, path, size=None, title=None, *,
                    scenario: tuple[int, float] | None = None):
    """Scaling factor t_single / t_iter over bandwidth x workers, one panel per method (e.g.
    `none` and one other), from `whatif.sweep` rows; the `scenario`'s cell (workers,
    bandwidth in bit/s), where the grid has it, outlined (a patch labelled `SCENARIO`)."""
    methods = list(dict.fromkeys(sweep["method"]))
    width, height = size or (6.5 * len(methods), 5)
    # room in inches for the tick labels, the axis labels, the titles and the colour bars'
    # labels (each panel's colour bar takes its room from the panel)
    fig, axes = figure((width, height), len(methods),
                       margins=dict(left=0.7 / width, right=1 - 0.1 / width,
                                    bottom=0.65 / height, top=1 - 0.7 / height,
                                    wspace=0.25))
    marked = False
    for ax, method in zip(axes[0], methods):
        grid = sweep[sweep["method"] == method].pivot_table(
            index="workers", columns="bandwidth_bps", values="sf")
        if scenario is not None and scenario[0] in grid.index and scenario[1] in grid.columns:
            marked = True
            ax.add_patch(Rectangle((grid.columns.get_loc(scenario[1]),
                                    grid.index.get_loc(scenario[0])), 1, 1, fill=False,
                                   edgecolor="red", linewidth=3, zorder=5, label=SCENARIO))
        grid.columns = [f"{b / 1e9:g}" for b in grid.columns]
        sns.heatmap(grid, ax=ax, vmin=0, vmax=1, cmap="viridis", annot=True, fmt=".2f",
                    annot_kws={"fontsize": 8}, cbar_kws={"label": "scaling factor"})
        ax.invert_yaxis()
        ax.set_xlabel("bandwidth per worker (Gbit/s)")
        ax.set_ylabel("workers")
        ax.set_title({"none": "none (fp32 DDP)"}.get(method, method), fontsize="medium")
    row = sweep.iloc[0]
    fig.suptitle(title or f"Modelled scaling factor (1 = linear scaling): {row['profile']}, "
                          f"{row['bucketing']} bucketing"
                 + (f", codec costs {row['costs']}" if "costs" in sweep else "")
                 + ("; red outline: the scenario" if marked else ""))
    return save(fig, path)


@styled
def predicted_vs_measured(table: pd.DataFrame, path, size=(9, 6), title=None):
    """Measured and predicted iteration time per method (columns method, measured,
    predicted, rel_error; seconds), as bars with the relative error written beside."""
    fig, axes = figure(size)
    ax = axes[0, 0]
    y = np.arange(len(table))
    ax.barh(y - 0.2, table["measured"] * 1e3, height=0.4, label="measured")
    ax.barh(y + 0.2, table["predicted"] * 1e3, height=0.4, label="predicted")
    for i, (top, err) in enumerate(zip(np.fmax(table["measured"], table["predicted"]) * 1e3,
                                       table["rel_error"])):
        ax.annotate(f"{err:+.0%}", (top, i), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize="small")
    ax.set_yticks(y, table["method"])
    ax.invert_yaxis()
    ax.margins(x=0.12)
    ax.set_xlabel("iteration time (ms)")
    ax.set_ylabel("method")
    ax.legend(loc="lower right")
    fig.suptitle(title or "Training iteration time: measured vs predicted by the model "
                          "(label: relative error)", fontsize="medium")
    return save(fig, path)


@styled
def validation_sweep(table: pd.DataFrame, path, size=(12, 5.5), title=None):
    """`validate` rows (rate_bps, method, measured, predicted; seconds): iteration time vs
    link rate per method, measured as points, predicted as lines (left); predicted against
    measured with the +-10% band (right)."""
    methods = list(dict.fromkeys(table["method"]))
    styles = line_styles(methods)
    fig, axes = figure(size, 2)
    left, right = axes[0]
    rows_of = {m: table[table["method"] == m].sort_values("rate_bps") for m in methods}
    # Methods of nearly equal times (ddp and none) would hide one another: the earlier one
    # is drawn wider (lines) and larger (points), leaving a rim of its colour.
    widths = halo_widths({m: (r["rate_bps"], r["predicted"]) for m, r in rows_of.items()},
                         log=True)
    sizes = halo_widths({m: (r["rate_bps"], r["measured"]) for m, r in rows_of.items()},
                        log=True)
    for method, rows in rows_of.items():
        style = styles[method]
        size = 4 + 1.5 * sizes[method]
        left.plot(rows["rate_bps"] / 1e9, rows["predicted"] * 1e3, color=style["color"],
                  linestyle=style["linestyle"], label=method, linewidth=widths[method],
                  zorder=2 + 1 / widths[method])
        left.plot(rows["rate_bps"] / 1e9, rows["measured"] * 1e3, color=style["color"],
                  marker=style["marker"], linestyle="none", markersize=size,
                  zorder=3 + 1 / size)
        right.plot(rows["measured"] * 1e3, rows["predicted"] * 1e3, color=style["color"],
                   marker=style["marker"], linestyle="none", markersize=size,
                   zorder=3 + 1 / size)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
    lo = float(np.nanmin(table[["measured", "predicted"]].to_numpy())) * 1e3 * 0.8
    hi = float(np.nanmax(table[["measured", "predicted"]].to_numpy())) * 1e3 * 1.25
    ms = [t for t in (10, 20, 50, 100, 200, 300, 500, 1000, 2000, 5000, 10000, 20000)
          if lo <= t <= hi]
    rates = sorted(set(table["rate_bps"] / 1e9))
    for axis, ticks in ((left.xaxis, rates), (left.yaxis, ms), (right.xaxis, ms),
                        (right.yaxis, ms)):
        axis.set_ticks(ticks, [f"{t:g}" for t in ticks])
        axis.set_minor_formatter(NullFormatter())
    left.set_xlabel("link rate per worker (Gbit/s)")
    left.set_ylabel("iteration time (ms)")
    diagonal = np.array([lo, hi])
    right.plot(diagonal, diagonal, color="black", linewidth=1)
    right.fill_between(diagonal, diagonal * 0.9, diagonal * 1.1, color="grey", alpha=0.2,
                       label="+-10%")
    right.set_xlim(lo, hi)
    right.set_ylim(lo, hi)
    right.set_xlabel("measured iteration time (ms)")
    right.set_ylabel("predicted iteration time (ms)")
    right.legend(loc="upper left", fontsize="small")
    handles, labels = legend_handles(styles)
    fig.legend(handles, labels, loc="outside right upper", title="method", fontsize="small")
    fig.suptitle(title or "Measured (points) and predicted (lines) iteration time vs rate")
    return save(fig, path)


@styled
def block_sparse_sweep(table: pd.DataFrame, path, size=(9, 5.5), title=None):
    """A `benches.blocksparse` table: block-sparse all-reduce time vs the fraction of non-zero
    blocks per worker (log-log), measured (points, bars: spread) and predicted (line), with
    the dense all-reduce's measured (dashed) and predicted (dotted) time."""
    fig, axes = figure(size)
    ax = axes[0, 0]
    colors = sns.color_palette("deep", 2)
    sparse = table[table["mode"] == "sparse"].sort_values("density")
    ax.errorbar(sparse["density"], sparse["time_s"] * 1e3, yerr=sparse["time_spread_s"] * 1e3 / 2,
                marker="o", linestyle="none", color=colors[0], capsize=3,
                label="block-sparse, measured")
    ax.plot(sparse["density"], sparse["predicted_s"] * 1e3, color=colors[0],
            label="block-sparse, predicted")
    for _, row in table[table["mode"] == "dense"].iterrows():
        ax.axhline(row["time_s"] * 1e3, color=colors[1], linestyle="--",
                   label="dense all-reduce, measured")
        ax.axhline(row["predicted_s"] * 1e3, color=colors[1], linestyle=":",
                   label="dense all-reduce, predicted")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("non-zero blocks per worker (fraction)")
    ax.set_ylabel("time (ms)")
    ax.legend(fontsize="small")
    first = table.iloc[0]
    ax.set_title(title or f"Block-sparse all-reduce of {first['nbytes'] / 2**20:.0f} MiB, "
                 f"{first['world_size']} workers ({first['backend']}), blocks of "
                 f"{first['block_size']}", fontsize="medium")
    return save(fig, path)


@styled
def allreduce_times(table: pd.DataFrame, path, size=(11, 5.5), title=None):
    """Grouped bars: all-reduce time (log) by ring, tree, parameter server and forest on each
    topology, from `topology.compare` rows; the forest's rate / cut bound written above."""
    algorithms = [c[:-2] for c in table.columns
                  if c.endswith("_s") and c[:-2] in ("ring", "tree", "ps", "forest")]
    fig, axes = figure(size)
    ax = axes[0, 0]
    x = np.arange(len(table))
    width = 0.8 / len(algorithms)
    colors = sns.color_palette("deep", len(algorithms))
    for i, algorithm in enumerate(algorithms):
        ax.bar(x + (i - (len(algorithms) - 1) / 2) * width, table[f"{algorithm}_s"] * 1e3,
               width, label=algorithm, color=colors[i])
    if "forest_vs_cut" in table:
        top = table[[f"{a}_s" for a in algorithms]].max(axis=1) * 1e3
        for xi, t, share in zip(x, top, table["forest_vs_cut"]):
            ax.annotate(f"forest {share:.1%}\nof cut bound", (xi, t), xytext=(0, 4),
                        textcoords="offset points", ha="center", fontsize="x-small")
    ax.set_yscale("log")
    ax.margins(y=0.15)
    ax.set_xticks(x, table["topology"])
    ax.set_ylabel("all-reduce time (ms)")
    ax.legend(title="algorithm", fontsize="small")
    first = table.iloc[0]
    ax.set_title(title or f"Simulated all-reduce of {first['nbytes'] / 1e6:g} MB per worker, "
                          f"{first['workers']} workers", fontsize="medium")
    return save(fig, path)
