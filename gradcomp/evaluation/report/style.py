"""The style every figure shares: seaborn's whitegrid on an Agg canvas of a fixed pixel size
(`size` inches x `DPI`), a line style per method, and the atomic PNG write."""
from __future__ import annotations

import functools
import io

import matplotlib
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..common.store import write_atomic

DPI = 100


def line_styles(methods) -> dict:
    """{method: line style keywords}: ten colours, then the same colours with other dashes
    and markers."""
    colors = sns.color_palette("tab10", 10)
    return {m: {"color": colors[i % 10], "linestyle": ("-", "--", ":")[i // 10 % 3],
                "marker": ("o", "s", "^")[i // 10 % 3]} for i, m in enumerate(methods)}


def styled(draw):
    """Run `draw` under seaborn's whitegrid style, for this figure only."""
    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        style = {**sns.axes_style("whitegrid"), **sns.plotting_context("notebook")}
        with matplotlib.rc_context(style):
            return draw(*args, **kwargs)

    return wrapper


def figure(size, ncols: int = 1, nrows: int = 1, **kw):
    """A figure without pyplot and its (nrows, ncols) array of axes."""
    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, squeeze=False, **kw)


def save(fig, path):
    """Write `fig` as a PNG to `path` atomically; returns the path."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return write_atomic(path, buf.getvalue())
