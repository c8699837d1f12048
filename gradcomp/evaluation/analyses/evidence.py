"""Evidence weighed: an interval for every predicted speedup from what the prediction rests on,
and where, within 2x of the question's workers and bandwidth, the answer flips.

What an interval spans (`Evidence`):

* codec costs: each method's encode / decode cost between (1 - r) and (1 + r) times its
  fitted line, r the largest |relative residual| of its fits' points (`fit.Fit.worst_rel`:
  how far a measurement lay from the line the method is priced with); none for the assumed
  floors, which were never measured (the evidence says so);
* iterations to target: the seeds' min-max (`time_to_accuracy`'s iterations_min / _max);
* a fitted network: its time per byte within two standard errors of the all-reduce fit's
  slope (`network_spread`); a stated network has none.

A time is lowest with the cheapest codecs and the fewest iterations; the speedup of v over a
baseline b is lowest with b's time at its lowest and v's at its highest, both on the same
network (the network is shared; codec fits and seed runs are not).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...collectives.costs import ring_factors
from ..common.units import format_rate, parse_rate
from ..model.cost_tables import CostTable
from ..model.fit import fit_collectives

#: The interval columns `weigh` adds, by the speedup column they bound ("vs_16bit" is the
#: speedup over the 16-bit all-reduce, `recommend.sixteen_bit`).
SPEEDUPS = {"speedup": "none", "speedup_to_target": "none", "vs_16bit": None}
#: The search for a flip: node counts and bandwidths within this factor of the question's.
WITHIN = 2.0
STEPS = 8  # points per doubling, on each side


@dataclass(frozen=True)
class Evidence:
    """What a prediction's interval rests on: `codec` {cost-table key: relative spread r},
    the table's `label`, whether its costs were `measured` (False: the assumed floors), and
    the `network`'s relative spread of its time per byte (0: a stated network) with where it
    came from (`network_source`), and the methods whose kernels `changed` since the table
    was measured (their shift is not in the interval: the sentence says so)."""

    codec: dict
    label: str
    measured: bool = True
    network: float = 0.0
    network_source: str = ""
    changed: tuple = ()

    def spread(self, method: str) -> float:
        """The codec spread of a method or variant (its own row's, else its method's)."""
        name = method.replace(" +EF", "")
        return self.codec.get(name, self.codec.get(name.split("(")[0].split("+")[0], 0.0))

    def describe(self, methods, seeds: int | None = None) -> str:
        """The evidence sentence: codec spreads of `methods`, the seeds, the network."""
        shown = [m for m in dict.fromkeys(methods) if m and m.split("(")[0] != "none"]
        codec = (f"codec costs of table {self.label} within their fits' worst residual ("
                 + ", ".join(f"{m} +-{self.spread(m):.0%}" for m in shown) + ")"
                 if self.measured else f"codec costs of {self.label} (never measured: no "
                 "spread known, none in the interval)")
        iterations = ("" if seeds is None else
                      f"; iterations to target over {seeds} seed(s), min-max")
        network = (f"; the network {self.network_source} (+-{self.network:.0%} time per "
                   "byte)" if self.network_source else "; the network as stated (no spread)")
        stale = [m for m in shown if m.split("(")[0].split(" ")[0] in self.changed]
        changed = ("" if not stale else f"; not in it: the kernels of {', '.join(stale)} "
                   "changed since the table was measured")
        return codec + iterations + network + changed


def evidence_of(table: CostTable, network: float = 0.0, network_source: str = "") -> Evidence:
    """The `Evidence` of codec-cost table `table` (each method's largest worst |relative
    residual| over its phases) and a network spread (`network_spread`; 0 or NaN: none,
    the network taken as stated) with its `network_source`."""
    spreads: dict = {}
    for (method, _), fit in table.fits.items():
        if math.isfinite(fit.worst_rel):
            spreads[method] = max(spreads.get(method, 0.0), fit.worst_rel)
    network = network if math.isfinite(network) else 0.0
    network_source = network_source if network else ""
    return Evidence(spreads, table.label, bool(table.fits), network, network_source,
                    tuple(table.changed))


def evidence_record(evidence: Evidence) -> dict:
    """The evidence as JSON-ready fields (`--json`)."""
    return {"codec_table": evidence.label, "codec_measured": evidence.measured,
            "codec_spread": dict(evidence.codec), "network_spread": evidence.network,
            "network_source": evidence.network_source or "stated",
            "kernels_changed_since_measured": list(evidence.changed)}


def with_intervals(table: pd.DataFrame) -> pd.DataFrame:
    """`table` (`weigh`) with each speedup column written with its interval as text,
    "1.53 (1.50-1.56)", for a printed table."""
    shown = table.copy()
    for column in SPEEDUPS:
        if f"{column}_low" in table:
            shown[column] = ["-" if not math.isfinite(v) else
                             f"{v:.3g} ({lo:.3g}-{hi:.3g})" if math.isfinite(lo) else
                             f"{v:.3g}" for v, lo, hi in
                             zip(table[column], table[f"{column}_low"],
                                 table[f"{column}_high"])]
    return shown


def network_spread(collectives: pd.DataFrame) -> float:
    """Two standard errors of the all-reduce fit's time per byte (`fit.fit_collectives`,
    inter-node rows where a `tier` column says), relative to it: from the fit's weighted
    residuals, as least squares gives them. NaN where nothing can be said (two points or
    fewer, or no bandwidth resolved)."""
    rows = collectives[collectives["collective"] == "allreduce"]
    if "tier" in rows:
        rows = rows[rows["tier"] == "inter"]
    rows = rows[(rows["world_size"] > 1) & np.isfinite(rows["time_s"].to_numpy(float))]
    if len(rows) <= 2:
        return math.nan
    fit = fit_collectives(rows)["allreduce"]
    alpha, beta = fit.params["alpha_s"], fit.params["beta_s_per_byte"]
    if not beta > 0:
        return math.nan
    steps, per_byte = zip(*(ring_factors("allreduce", int(p)) for p in rows["world_size"]))
    X = np.column_stack([steps, np.asarray(per_byte) * rows["nbytes"].to_numpy(float)])
    y = rows["time_s"].to_numpy(float)
    fitted = X @ np.array([alpha, beta])
    weight = 1 / np.maximum(fitted, fitted.max() * 1e-3)  # as the fit weighs: by 1/time
    variance = float(np.sum(weight * (y - fitted) ** 2)) / (len(y) - 2)
    covariance = variance * np.linalg.pinv(X.T @ (X * weight[:, None]))
    return float(2 * math.sqrt(max(covariance[1, 1], 0.0)) / beta)


def _scaled(costs: dict, evidence: Evidence, sign: int) -> dict:
    """`costs` with every line times (1 + sign * its spread), floored at 0."""
    return {m: type(c)(tuple((a * f, b * f) for a, b in c))
            for m, c in costs.items()
            for f in [max(0.0, 1 + sign * evidence.codec.get(m, 0.0))]}


def bandwidth_bps(net: dict) -> float:
    """The bandwidth of network keywords `net` in bit/s."""
    return parse_rate(net["bandwidth"])


def _factors(evidence: Evidence) -> tuple:
    """Bandwidth factors of the network's interval: slow end, as fitted, fast end (a spread
    of 90% or more: the fast end at 10x)."""
    r = evidence.network
    return (1.0,) if not r else (1 / (1 + r), 1.0, 1 / max(1 - r, 0.1))


def _baseline(table: pd.DataFrame, method: str, algorithm: str):
    """The row position of `method`'s plain run in `table` (its variant without options or
    error feedback; on a topology: on `algorithm`, advise's baseline there), else None."""
    hit = table["variant" if "variant" in table else "method"] == method
    if "algorithm" in table:
        hit &= table["algorithm"] == algorithm
    where = np.flatnonzero(hit.to_numpy())
    return int(where[0]) if len(where) else None


def weigh(ask, net: dict, costs: dict, evidence: Evidence, half: str,
          algorithm: str = "ring", central: pd.DataFrame | None = None) -> pd.DataFrame:
    """`ask(costs, net)` (an `advise` ranking or a `time_to_accuracy` table at the network
    keywords `net`, with codec `costs`) with intervals: the time's (``t_iter_low_s`` /
    ``_high_s``, or ``time_to_target_low_s`` / ``_high_s``), each speedup's of `SPEEDUPS`
    present (``<column>_low`` / ``_high``), ``vs_16bit`` (over the `half` all-reduce) and
    ``codec_spread``; NaN where the baseline is not in the table. On a topology the
    baselines are the runs on `algorithm` (`advise.reference_algorithm`). `central`: the
    rows of `ask(costs, net)` that are weighed, when already known (`ask` is then not
    asked at `costs` and `net`)."""
    table = (ask(costs, net) if central is None else central).reset_index(drop=True)
    key = ["variant"] if "variant" in table else \
        ["method", "algorithm"] if "algorithm" in table else ["method"]
    rows = list(zip(*(table[k] for k in key)))
    lows, highs = [], []
    for factor in _factors(evidence):
        at = net if factor == 1 else {**net, "bandwidth": bandwidth_bps(net) * factor}
        for sign, out in ((-1, lows), (1, highs)):
            other = ask(_scaled(costs, evidence, sign), at)
            times = dict(zip(zip(*(other[k] for k in key)), other["t_iter_s"]))
            out.append(np.array([times.get(row, math.nan) for row in rows], float))
    tta = "iterations_min" in table
    few = table["iterations_min"].to_numpy(float) if tta else 1.0
    many = table["iterations_max"].to_numpy(float) if tta else 1.0
    lows, highs = np.array(lows) * few, np.array(highs) * many
    time = "time_to_target" if tta else "t_iter"
    # the columns set in a dict and made a frame once (a column inserted into a frame costs
    # about a millisecond, and a flip search weighs at every point): as many assignments
    # to the frame, in order, would place them
    unknown = np.full(len(table), math.nan)
    columns = {**dict(table.items()), f"{time}_low_s": lows.min(axis=0),
               f"{time}_high_s": highs.max(axis=0), "vs_16bit": unknown}
    point = table[f"{time}_s"].to_numpy(float)
    for column, method in SPEEDUPS.items():
        if column not in columns:
            continue
        b = _baseline(table, method or half, algorithm)
        value = np.array(columns[column], float)
        low, high = unknown.copy(), unknown.copy()
        if b is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                if column == "vs_16bit":
                    value = point[b] / point
                low, high = (lows[:, [b]] / highs).min(0), (highs[:, [b]] / lows).max(0)
            value[b] = low[b] = high[b] = 1.0  # the baseline against itself
        columns.update({column: value, f"{column}_low": low, f"{column}_high": high})
    names = table["variant"] if "variant" in table else table["method"]
    columns["codec_spread"] = [0.0 if n == "none" else evidence.spread(n) for n in names]
    return pd.DataFrame(columns, index=table.index)


def flips(decide, net: dict, name=str, fewest: int = 1, steps: int = STEPS) -> str:
    """Where the answer `decide(net)` (a recommendation's name at network keywords `net`)
    changes within `WITHIN` of the question: node counts (`fewest` workers at least) and
    bandwidths searched outward on each side, `steps` points per doubling, one at a time,
    the nearest change on each side named (`name`: how an answer reads). A sentence."""
    here = decide(net)
    per_node = (net.get("tiers") or {}).get("gpus_per_node", 1) or 1
    nodes, rate = net["workers"] // per_node, bandwidth_bps(net)
    least = -(-fewest // per_node)  # the fewest nodes
    factors = [2 ** (k / steps) for k in range(1, round(math.log2(WITHIN) * steps) + 1)]
    found = []
    for down in (True, False):
        counts = dict.fromkeys(max(least, round(nodes / s if down else nodes * s))
                               for s in factors)
        for count in (c for c in counts if c != nodes):
            other = decide({**net, "workers": count * per_node})
            if other != here:
                found.append(f"{name(other)} at {count * per_node} workers")
                break
    for down in (True, False):
        for s in factors:
            bps = rate / s if down else rate * s
            other = decide({**net, "bandwidth": bps})
            if other != here:
                found.append(f"{name(other)} at {format_rate(bps)}")
                break
    lo_w = max(least, round(nodes / WITHIN)) * per_node
    hi_w = round(nodes * WITHIN) * per_node
    searched = (f"{lo_w}-{hi_w} workers and {format_rate(rate / WITHIN)} to "
                f"{format_rate(rate * WITHIN)}"
                + ("" if steps == STEPS else f", {steps} points per doubling")
                + ", one at a time around the question")
    if not found:
        return f"The answer holds over {searched}."
    return f"Where the answer flips (searched {searched}): " + "; ".join(found) + "."
