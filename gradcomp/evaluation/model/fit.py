"""Least-squares estimates of the model's free parameters from tidy measurement tables, and
validation of predictions against measured runs.

* `fit_codec`: encode / decode ``a + b*numel`` per method (columns method, numel, encode_s,
  decode_s); `hook_costs` fits a hook-path bench's phases for the model.
* `fit_collectives`: alpha and beta = 1/B per collective (columns collective, world_size,
  nbytes, time_s; nbytes is one worker's payload S, as in `network`: for an all-gather that is
  the input, not nccl-tests' output size) by the alpha-beta costs of `network` without an
  intercept. An all-reduce's reduction work is absorbed into its beta.
* `fit_runs`: the contention factor and the network efficiency from measured iteration times
  (columns method, workers, bandwidth_bps, t_iter_s), minimising squared relative errors by a
  shrinking grid search.

Every fit reports R^2 (NaN when the measurements do not vary) and its residuals (measured -
fitted); judge the model by `validate` on runs it was not fitted to.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..profiles.profiles import load_profile
from .methods import resolve
from .network import COLLECTIVES, Network
from .timeline import predict


@dataclass(frozen=True)
class Fit:
    """Fitted `params`, R^2, residuals (measured - fitted) and what was fitted (`label`)."""

    label: dict
    params: dict
    r2: float
    residuals: np.ndarray
    n: int

    @property
    def rmse(self) -> float:
        return float(np.sqrt(np.mean(self.residuals**2)))


def _r2(y: np.ndarray, fitted: np.ndarray) -> float:
    total = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - float(np.sum((y - fitted) ** 2)) / total if total > 0 else math.nan


def _columns(table: pd.DataFrame, needed: tuple, what: str) -> pd.DataFrame:
    missing = [c for c in needed if c not in table.columns]
    if missing:
        source = table.attrs.get("source")  # set by store.read_table: the option and file
        raise ValueError(f"{source + ': ' if source else ''}{what} table lacks column(s) "
                         f"{', '.join(missing)}; it needs {', '.join(needed)}")
    return table


def _lstsq(label: dict, X: np.ndarray, y: np.ndarray, names: tuple) -> Fit:
    if len(y) < len(names) or np.linalg.matrix_rank(X) < len(names):
        raise ValueError(f"cannot fit {label}: need at least {len(names)} measurements that "
                         f"vary (got {len(y)})")
    # Costs cannot be negative: least squares over the coefficients that stay >= 0 (drop the
    # negative ones and refit until none is left; noise can otherwise give a < 0 or alpha < 0).
    coef, free = np.zeros(len(names)), list(range(len(names)))
    while free:
        solution, *_ = np.linalg.lstsq(X[:, free], y, rcond=None)
        if (solution >= 0).all():
            coef[free] = solution
            break
        free = [f for f, c in zip(free, solution) if c > 0]
    fitted = X @ coef
    return Fit(label, dict(zip(names, map(float, coef))), _r2(y, fitted), y - fitted, len(y))


def fit_codec(table: pd.DataFrame, phases=("encode", "decode")) -> dict[tuple[str, str], Fit]:
    """{(method, phase): Fit with params a (s), b (s/element)} for "encode", "decode" and any
    further `phases` (columns ``<phase>_s``; such a phase is left out for a method without
    measured values, e.g. "middle" for a one-round method)."""
    _columns(table, ("method", "numel", *(f"{p}_s" for p in phases)), "compress-bench")
    fits = {}
    for method, rows in table.groupby("method", sort=False):
        for phase in phases:
            ok = rows[np.isfinite(rows[f"{phase}_s"].to_numpy(float))]
            if ok.empty and phase not in ("encode", "decode"):
                continue
            n = ok["numel"].to_numpy(float)
            X = np.column_stack([np.ones_like(n), n])
            fits[method, phase] = _lstsq({"method": method, "phase": phase}, X,
                                         ok[f"{phase}_s"].to_numpy(float), ("a", "b"))
    return fits


def codec_costs(fits: dict) -> dict[str, tuple[tuple[float, float], ...]]:
    """{method: ((a_enc, b_enc), (a_dec, b_dec))} from `fit_codec`, for `methods.resolve`;
    with a third (a_mid, b_mid) where a "middle" phase was fitted."""
    methods = {m for m, _ in fits}
    return {m: tuple((fits[m, p].params["a"], fits[m, p].params["b"])
                     for p in ("encode", "decode", "middle") if (m, p) in fits)
            for m in methods}


def hook_costs(table: pd.DataFrame) -> dict[str, tuple[tuple[float, float], ...]]:
    """{method: (encode, decode[, middle])} from a hook-path bench table
    (`benches.hookpath`), for `methods.resolve`. Its decode is the whole bucket's, of
    `world_size` payloads; the timeline decodes an all-gather's p payloads one by one, so
    an all-gather method's decode is divided by the table's world size."""
    _columns(table, ("method", "aggregation", "world_size", "numel", "encode_s", "middle_s",
                     "decode_s"), "hook-path bench")
    gathered = (table["aggregation"] == "allgather").to_numpy()
    decode = table["decode_s"].to_numpy(float)
    per_payload = np.where(gathered, decode / table["world_size"].to_numpy(float), decode)
    return codec_costs(fit_codec(table.assign(decode_s=per_payload),
                                 ("encode", "decode", "middle")))


def as_costs(costs) -> dict:
    """{method: (encode, decode)} from a compress-bench DataFrame (fitted), such a dict (as
    is) or None (empty)."""
    if costs is None:
        return {}
    return codec_costs(fit_codec(costs)) if isinstance(costs, pd.DataFrame) else dict(costs)


def _design(collective: str, p: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    lat, bw = {"allreduce": (2 * (p - 1), 2 * (p - 1) / p),
               "allgather": (p - 1, p - 1), "broadcast": (p - 1, np.ones_like(p))}[collective]
    return np.column_stack([lat, bw * nbytes])


def fit_collectives(table: pd.DataFrame) -> dict[str, Fit]:
    """{collective: Fit with params alpha_s, beta_s_per_byte, bandwidth_bps (= 8/beta)}."""
    _columns(table, ("collective", "world_size", "nbytes", "time_s"), "collective-bench")
    fits = {}
    for collective, rows in table.groupby("collective", sort=False):
        if collective not in COLLECTIVES:
            raise ValueError(f"collective={collective!r} is not allowed: choose one of "
                             f"{', '.join(map(repr, COLLECTIVES))}")
        rows = rows[(rows["world_size"] > 1) & np.isfinite(rows["time_s"].to_numpy(float))]
        X = _design(collective, rows["world_size"].to_numpy(float),
                    rows["nbytes"].to_numpy(float))
        fit = _lstsq({"collective": collective}, X, rows["time_s"].to_numpy(float),
                     ("alpha_s", "beta_s_per_byte"))
        beta = fit.params["beta_s_per_byte"]
        fit.params["bandwidth_bps"] = 8 / beta if beta > 0 else math.inf
        fits[collective] = fit
    return fits


def network_from_fit(fits: dict[str, Fit], workers: int, bandwidth_bps) -> Network:
    """A Network whose per-collective latency is the fitted alpha and whose per-collective
    efficiency is the fitted bandwidth / the nominal `bandwidth_bps`. Where a sweep did not
    resolve a bandwidth (fitted slope 0: its payloads were too small to leave the latency's
    noise), the nominal bandwidth is taken (efficiency 1)."""
    nominal = Network(workers, bandwidth_bps).bandwidth_bps

    def efficiency(fit: Fit) -> float:
        rate = fit.params["bandwidth_bps"]
        return rate / nominal if math.isfinite(rate) else 1.0

    return Network(workers, nominal,
                   {c: max(f.params["alpha_s"], 0.0) for c, f in fits.items()},
                   {c: efficiency(f) for c, f in fits.items()})


def fit_runs(runs: pd.DataFrame, profile, methods: dict | None = None, bucketing="ddp",
             latency_s: float = 0.0, contention: float | None = None,
             efficiency: float | None = None, levels: int = 5, points: int = 9) -> Fit:
    """Fit whichever of `contention` (in [1, 4]) and `efficiency` (in [0.05, 1.5]) is None to
    measured iteration times; `methods` maps a run's method name to a MethodCost (default:
    `methods.resolve(name)`)."""
    _columns(runs, ("method", "workers", "bandwidth_bps", "t_iter_s"), "runs")
    profile = load_profile(profile)
    # "ddp" rows (DDP's own all-reduce, no hook) are the uncompressed method.
    methods = {name: (methods or {}).get(name) or resolve("none" if name == "ddp" else name)
               for name in set(runs["method"])}
    measured = runs["t_iter_s"].to_numpy(float)
    rows = list(zip(runs["method"], runs["workers"], runs["bandwidth_bps"]))

    def model(params):
        eff, k = params.get("efficiency", efficiency), params.get("contention", contention)
        return np.array([predict(profile, Network(int(p), bw, latency_s, eff), methods[m],
                                 bucketing, k, baseline_s=math.nan).t_iter_s
                         for m, p, bw in rows])

    bounds = {name: box for name, box, fixed in
              (("contention", (1.0, 4.0), contention), ("efficiency", (0.05, 1.5), efficiency))
              if fixed is None}
    best = _grid_min(lambda prm: float(np.sum((model(prm) / measured - 1) ** 2)), bounds,
                     levels, points)
    fitted = model(best)
    params = {"contention": contention, "efficiency": efficiency, **best}
    return Fit({"runs": len(rows)}, params, _r2(measured, fitted), measured - fitted, len(rows))


def _grid_min(loss, bounds: dict, levels: int, points: int) -> dict:
    """Minimise `loss(params)` over the box `bounds` by grids that shrink around the best."""
    best = {name: (lo + hi) / 2 for name, (lo, hi) in bounds.items()}
    if not bounds:
        return best
    box = dict(bounds)
    for _ in range(levels):
        grids = [np.linspace(lo, hi, points) for lo, hi in box.values()]
        candidates = [dict(zip(box, values)) for values in itertools.product(*grids)]
        best = min(candidates, key=loss)
        box = {name: (max(bounds[name][0], best[name] - (hi - lo) / (points - 1)),
                      min(bounds[name][1], best[name] + (hi - lo) / (points - 1)))
               for name, (lo, hi) in box.items()}
    return {name: float(v) for name, v in best.items()}


@dataclass(frozen=True)
class Validation:
    """Predicted against measured: one row each, and the relative errors' summary."""

    table: pd.DataFrame
    mean_abs_rel_error: float
    max_abs_rel_error: float


def validate(predicted, measured) -> Validation:
    """Relative errors (predicted - measured) / measured; NaN stays NaN."""
    pred, meas = np.asarray(predicted, float), np.asarray(measured, float)
    if pred.shape != meas.shape or not pred.size:
        raise ValueError(f"predicted and measured must be non-empty and of equal length "
                         f"({pred.size} vs {meas.size})")
    rel = (pred - meas) / meas
    table = pd.DataFrame({"predicted": pred, "measured": meas, "error": pred - meas,
                          "rel_error": rel})
    return Validation(table, float(np.mean(np.abs(rel))), float(np.max(np.abs(rel))))


def summary(fits: dict) -> pd.DataFrame:
    """One row per fit: its label, parameters, R^2, n and RMSE of the residuals."""
    return pd.DataFrame([{**f.label, **f.params, "r2": f.r2, "n": f.n, "rmse": f.rmse}
                         for f in fits.values()])
