"""The style every figure shares: seaborn's whitegrid on an Agg canvas of a fixed pixel size
(`size` inches x `DPI`), a colour per method (error-feedback variants dashed), and the
atomic PNG write."""
from __future__ import annotations

import functools
import io

import matplotlib
import numpy as np
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..common.store import write_atomic

DPI = 100


# Twenty colours told apart at a glance (tab10, then ten darker or brighter others).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#ffd700", "#000080", "#8b0000",
           "#00ff7f", "#ff00ff", "#808000", "#00ced1", "#ff6347", "#4b0082")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
EF = " +EF"
EF_LEGEND = "solid: without, dashed: with error feedback (+EF)"


def base_name(label: str) -> str:
    """A method label without its error-feedback suffix."""
    return label[: -len(EF)] if label.endswith(EF) else label


def line_styles(labels) -> dict:
    """{label: line style keywords}: one colour and marker per method (a label without
    " +EF"), up to twenty colours; its " +EF" variant the same colour, dashed."""
    bases = list(dict.fromkeys(base_name(m) for m in labels))
    return {m: {"color": PALETTE[bases.index(base_name(m)) % len(PALETTE)],
                "marker": MARKERS[bases.index(base_name(m)) % len(MARKERS)],
                "linestyle": "--" if m.endswith(EF) else "-"} for m in labels}


def halo_widths(lines: dict, log: bool = False, close: float = 0.02) -> dict:
    """{label: line width} for `lines` ({label: (x, y)}) drawn in their order on one axes,
    so that none hides another: a line that later lines run on (within `close` of the axes'
    y-range wherever both run, the other interpolated at its points; `log`: in log10 y)
    is widened by 2.4 points per such
    later line, leaving a rim of its colour around them. Draw wider lines first."""
    def values(y):
        y = np.asarray(y, float)
        return np.log10(np.where(y > 0, y, np.nan)) if log else y

    series = {k: (np.asarray(x, float), values(y)) for k, (x, y) in lines.items()}
    finite = np.concatenate([y[np.isfinite(y)] for _, y in series.values()] or [[]])
    span = float(np.ptp(finite)) or 1.0 if finite.size else 1.0
    labels = list(series)

    def overlap(a, b):
        (xa, ya), (xb, yb) = series[a], series[b]
        order = np.argsort(xb)
        inside = (xa >= np.nanmin(xb)) & (xa <= np.nanmax(xb)) & np.isfinite(ya)
        if not inside.any():
            return False
        diffs = np.abs(ya[inside] - np.interp(xa[inside], xb[order], yb[order]))
        diffs = diffs[np.isfinite(diffs)]
        return bool(diffs.size) and float(diffs.max()) <= close * span

    return {a: 1.5 + 2.4 * sum(overlap(a, b) for b in labels[i + 1:])
            for i, a in enumerate(labels)}


def legend_handles(styles: dict) -> tuple[list, list]:
    """Legend entries (line and marker) for {label: style} of `line_styles`."""
    return ([Line2D([], [], color=s["color"], marker=s["marker"], linestyle=s["linestyle"])
             for s in styles.values()], list(styles))


def styled(draw):
    """Run `draw` under seaborn's whitegrid style, for this figure only."""
    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        style = {**sns.axes_style("whitegrid"), **sns.plotting_context("notebook")}
        with matplotlib.rc_context(style):
            return draw(*args, **kwargs)

    return wrapper


class LayoutCanvas(FigureCanvasAgg):
    """An Agg canvas whose `draw` lays the figure out without rendering it: seaborn's heatmap
    draws the whole figure to see whether tick labels overlap, which needs their places and
    sizes, not pixels. `save` renders (Agg's PNG writer draws with `FigureCanvasAgg.draw`)."""

    def draw(self):
        self.figure.draw_without_rendering()


def figure(size, ncols: int = 1, nrows: int = 1, margins: dict | None = None, **kw):
    """A figure without pyplot and its (nrows, ncols) array of axes, laid out by constrained
    layout, or at the fixed `margins` (`Figure.subplots_adjust`'s keywords, fractions of the
    figure) where its text has a known extent: constrained layout measures every text at
    every draw."""
    fig = Figure(figsize=size, dpi=DPI, layout=None if margins else "constrained")
    LayoutCanvas(fig)
    if margins:
        fig.subplots_adjust(**margins)
    return fig, fig.subplots(nrows, ncols, squeeze=False, **kw)


def legend_outside(fig, handles, labels, pad: float = 0.1, **kw):
    """`fig.legend` right of the axes, its top at theirs, on a figure at fixed margins
    (`figure`): the axes end `pad` inches left of the legend's measured width, as
    constrained layout's ``"outside right upper"`` places it, measured once."""
    legend = fig.legend(handles, labels, loc="upper right", borderaxespad=0,
                        bbox_to_anchor=(1 - pad / fig.get_figwidth(), fig.subplotpars.top),
                        **kw)
    width = legend.get_window_extent(fig.canvas.get_renderer()).width / fig.dpi
    fig.subplots_adjust(right=1 - (width + 2 * pad) / fig.get_figwidth())
    return legend


def save(fig, path):
    """Write `fig` as a PNG to `path` atomically; returns the path (None: writes nothing and
    returns `fig`, for a look at its artists)."""
    if path is None:
        return fig
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return write_atomic(path, buf.getvalue())
