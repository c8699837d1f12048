"""Least-squares estimates of the model's free parameters from tidy measurement tables, and
validation of predictions against measured runs.

* `fit_codec`: encode / decode ``a + b*numel`` per method (columns method, numel, encode_s,
  decode_s, and further phases such as PowerSGD's "middle"), robust: squared errors
  weighted by 1/time (so that small sizes count, not only the largest), and a point further
  than `OUTLIER` (relative) and 4x the median from the line is dropped and the line
  refitted, up to a third of the points (a measurement disturbed by load; never at the
  smallest or largest size, where costs legitimately bend away from a line: cache sizes,
  launch overheads). `fit_problem` says when a fit is too poor to price with (a point
  further than `OK_WITHIN` from a line with R^2 < `R2_MIN`); `fit_status` calls a fit "ok"
  only when R^2 >= `R2_MIN` and every point it uses lies within `OK_WITHIN` of its line,
  "flat" when R^2 says nothing (a cost that hardly grows with size) but every point lies
  within `FLAT_WITHIN`, "rough" otherwise (priced, its worst point said). `hook_costs` fits a
  hook-path bench's phases for the model.
* `fit_collectives`: alpha and beta = 1/B per collective (columns collective, world_size,
  nbytes, time_s; nbytes is one worker's payload S, as in `network`: for an all-gather that is
  the input, not nccl-tests' output size) by the alpha-beta costs of `network` without an
  intercept, squared errors weighted by 1/time as for the codecs (unweighted, the largest
  payload's noise decides alpha alone: 0 at 100 Mbit/s on the testbed, where a 16 KB
  all-reduce takes milliseconds). An all-reduce's reduction work is absorbed into its beta.
* `fit_runs`: the contention factor and the network efficiency from measured iteration times
  (columns method, workers, bandwidth_bps, t_iter_s), minimising squared relative errors by a
  shrinking grid search; `fit_slowdown` the compute slowdown (MLSys 2022's lambda) likewise.

Every fit reports R^2 (NaN when the measurements do not vary) and its residuals (measured -
fitted); judge the model by `validate` on runs it was not fitted to.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...collectives.costs import ring_factors
from ..common.columns import check_unique, check_values
from ..profiles.profiles import load_profile
from .methods import Measured, PerBucket, resolve
from .network import COLLECTIVES, Network
from .timeline import predict


R2_MIN = 0.9  # a codec fit with a lower R^2 is priced only ...
FLAT_WITHIN = 0.2  # ... as "flat" when all its points lie this close to it (R^2 ~ 0 for
# flat costs), as "rough" when they lie within OK_WITHIN (host-bound calls: a flat cost with
# noisy points, as the H200 table of 2026-11-27 measured top-k, random-k, QSGD and int8)
OUTLIER = 0.5  # a point this far (relative) from the line, and 4x the median, is dropped
OK_WITHIN = 0.5  # an "ok" fit has every point it uses this close (relative) to its line


@dataclass(frozen=True)
class Fit:
    """Fitted `params`, R^2, residuals (measured - fitted) and what was fitted (`label`);
    for codec fits also the worst |relative residual| of the points used and the sizes of
    the points `dropped` as outliers."""

    label: dict
    params: dict
    r2: float
    residuals: np.ndarray
    n: int
    worst_rel: float = math.nan
    dropped: tuple = ()
    points: tuple = ()  # codec fits: the (size, time) points used

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


def _nonneg_lstsq(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares over the coefficients that stay >= 0 (negative ones dropped, refitted)."""
    coef, free = np.zeros(X.shape[1]), list(range(X.shape[1]))
    while free:
        solution, *_ = np.linalg.lstsq(X[:, free], y, rcond=None)
        if (solution >= 0).all():
            coef[free] = solution
            break
        free = [f for f, c in zip(free, solution) if c > 0]
    return coef


def _lstsq(label: dict, X: np.ndarray, y: np.ndarray, names: tuple) -> Fit:
    """Coefficients `names` >= 0 (noise could otherwise give alpha < 0) by
    `_weighted_lstsq`."""
    if len(y) < len(names) or np.linalg.matrix_rank(X) < len(names):
        raise ValueError(f"cannot fit {label}: need at least {len(names)} measurements that "
                         f"vary (got {len(y)})")
    coef = _weighted_lstsq(X, y)
    fitted = X @ coef
    return Fit(label, dict(zip(names, map(float, coef))), _r2(y, fitted), y - fitted, len(y))


def _weighted_line(n: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(a, b) >= 0 of the line a + b*n by `_weighted_lstsq`."""
    return _weighted_lstsq(np.column_stack([np.ones_like(n), n]), y)


def _weighted_lstsq(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Coefficients >= 0 minimising sum((y - X c)^2 / t), t the time a plain fit gives
    (floored at 0.1% of its largest): between absolute errors (the largest sizes decide
    alone, and a latency is lost in their noise) and relative ones (the smallest count as
    much as those priced)."""
    first = X @ _nonneg_lstsq(X, y)
    weight = 1 / np.sqrt(np.maximum(first, max(float(first.max()), 1e-30) * 1e-3))
    return _nonneg_lstsq(X * weight[:, None], y * weight)


def _relative(y: np.ndarray, fitted: np.ndarray) -> np.ndarray:
    return (y - fitted) / np.maximum(fitted, 1e-30)


def robust_line(label: dict, n, y) -> Fit:
    """The `a + b*n` fit of the module docstring (errors weighted by 1/time, outliers
    dropped) with R^2, residuals and the worst relative residual over the points kept."""
    n, y = np.asarray(n, float), np.asarray(y, float)
    if len(y) < 2 or len(set(n)) < 2:
        raise ValueError(f"cannot fit {label}: need at least 2 sizes (got {len(set(n))})")
    keep = np.ones(len(y), bool)
    most = len(y) // 3
    while True:
        coef = _weighted_line(n[keep], y[keep])
        rel = np.abs(_relative(y, coef[0] + coef[1] * n))
        if (~keep).sum() >= most or len(set(n[keep])) <= 2:
            break
        inner = keep & (n > n.min()) & (n < n.max())  # where a line may bend, not an outlier
        if not inner.any():
            break
        worst = int(np.argmax(np.where(inner, rel, -1)))
        others = rel[keep & (np.arange(len(y)) != worst)]
        if rel[worst] <= max(OUTLIER, 4 * float(np.median(others))):
            break
        keep[worst] = False
    fitted = coef[0] + coef[1] * n[keep]
    return Fit(label, {"a": float(coef[0]), "b": float(coef[1])}, _r2(y[keep], fitted),
               y[keep] - fitted, int(keep.sum()), float(rel[keep].max()),
               tuple(int(v) for v in n[~keep]), tuple(zip(n[keep].tolist(), y[keep].tolist())))


#: What identifies a measurement of a `bench compress` / `bench collective` table.
CODEC_KEY = ("method", "options", "numel", "dtype", "device", "device_name")
COLLECTIVE_KEY = ("collective", "nbytes", "world_size", "backend", "device_name")


def fit_codec(table: pd.DataFrame, phases=("encode", "decode"),
              key_columns=CODEC_KEY) -> dict[tuple[str, str], Fit]:
    """{(method, phase): Fit with params a (s), b (s/element)} for "encode", "decode" and any
    further `phases` (columns ``<phase>_s``; such a phase is left out for a method without
    measured values, e.g. "middle" for a one-round method), by `robust_line`. Judge each
    with `fit_problem` before pricing with it. Times must be positive (or empty), counts
    whole, and no measurement (`key_columns`) stored twice (`common.columns`)."""
    _columns(table, ("method", "numel", *(f"{p}_s" for p in phases)), "compress-bench")
    check_values(table, "compress-bench", counts=("numel",),
                 optional_times=tuple(f"{p}_s" for p in phases))
    check_unique(table, "compress-bench", key_columns)
    fits = {}
    for method, rows in table.groupby("method", sort=False):
        for phase in phases:
            ok = rows[np.isfinite(rows[f"{phase}_s"].to_numpy(float))]
            if ok.empty and phase not in ("encode", "decode"):
                continue
            fits[method, phase] = robust_line({"method": method, "phase": phase},
                                              ok["numel"].to_numpy(float),
                                              ok[f"{phase}_s"].to_numpy(float))
    return fits


def fit_status(fit: Fit) -> str:
    """"unused" (method none: the identity, which the model prices free), "ok" (R^2 >=
    `R2_MIN` and every point used within `OK_WITHIN` of the line), "rough" (R^2 >= `R2_MIN`
    but a point further off: the cost bends away from a line, e.g. past a cache size or
    where load slows long calls more than short ones; used, with its worst point said),
    "flat" (lower R^2, but every point within `FLAT_WITHIN` of the line: a cost that hardly
    grows with size, where R^2 has nothing to explain; used), "rough" also for a lower R^2
    with every point within `OK_WITHIN` (a flat cost measured with noise) or "excluded"
    (`fit_problem`)."""
    if fit.label.get("method") == "none":
        return "unused"
    if fit.r2 >= R2_MIN:
        return "ok" if fit.worst_rel <= OK_WITHIN else "rough"
    if fit.worst_rel <= FLAT_WITHIN:
        return "flat"
    return "rough" if fit.worst_rel <= OK_WITHIN else "excluded"


def fit_problem(fit: Fit) -> str | None:
    """Why a codec fit is too poor to price with (None when `fit_status` is not
    "excluded")."""
    if fit_status(fit) != "excluded":
        return None
    return (f"R^2 {fit.r2:.2f} < {R2_MIN:g}, a point {fit.worst_rel:.0%} off the line"
            + (f" (outliers dropped at {', '.join(f'{v:,}' for v in fit.dropped)} "
               "elements)" if fit.dropped else ""))


def poor_fits(fits: dict) -> dict[str, str]:
    """{method: why} for the methods of `fit_codec` with any phase's fit poor."""
    poor = {}
    for (method, phase), fit in fits.items():
        why = fit_problem(fit)
        if why:
            poor[method] = "; ".join(filter(None, (poor.get(method), f"{phase}: {why}")))
    return poor


def codec_costs(fits: dict, usable_only: bool = False
                ) -> dict[str, tuple[tuple[float, float], ...]]:
    """{method: ((a_enc, b_enc), (a_dec, b_dec))} from `fit_codec`, for `methods.resolve`,
    with a third (a_mid, b_mid) where a "middle" phase was fitted; `usable_only`: without
    the methods of `poor_fits`, nor none (priced free)."""
    poor = {**poor_fits(fits), "none": "the identity"} if usable_only else {}
    methods = {m for m, _ in fits if m not in poor}
    return {m: tuple((fits[m, p].params["a"], fits[m, p].params["b"])
                     for p in ("encode", "decode", "middle") if (m, p) in fits)
            for m in methods}


def fit_hook_path(table: pd.DataFrame) -> dict[tuple[str, str], Fit]:
    """`fit_codec` of a hook-path bench table (`benches.hookpath`): encode, decode and
    middle. Its decode is the whole bucket's, of `world_size` payloads; the timeline decodes
    an all-gather's p payloads one by one, so an all-gather method's decode is divided by
    the table's world size."""
    _columns(table, ("method", "aggregation", "world_size", "numel", "encode_s", "middle_s",
                     "decode_s"), "hook-path bench")
    gathered = (table["aggregation"] == "allgather").to_numpy()
    decode = table["decode_s"].to_numpy(float)
    per_payload = np.where(gathered, decode / table["world_size"].to_numpy(float), decode)
    return fit_codec(table.assign(decode_s=per_payload), ("encode", "decode", "middle"), ())


def hook_costs(table: pd.DataFrame, usable_only: bool = False
               ) -> dict[str, tuple[tuple[float, float], ...]]:
    """{method: `PerBucket` (encode, decode[, middle])} from a hook-path bench table, for
    `methods.resolve` (`fit_hook_path`; `usable_only` as in `codec_costs`): what the hook
    computes per bucket, priced once per bucket (`per_bucket_costs`)."""
    return per_bucket_costs(fit_hook_path(table), usable_only)


def per_bucket_costs(fits: dict, usable_only: bool = False) -> dict[str, PerBucket]:
    """{method: `PerBucket` of `Measured` phases} of hook-path fits (`fit_hook_path`;
    `usable_only` as in `codec_costs`): each phase priced where the bench measured it (the
    median of a size's points), its fitted line for what reads a line (and alone where a fit
    keeps no points, e.g. a scaled one)."""
    def measured(fit: Fit, line):
        at = pd.DataFrame(list(fit.points), columns=["n", "t"]).groupby("n")["t"].median()
        return Measured(line, at.index.tolist(), at.tolist()) if len(at) > 1 else line

    return {m: PerBucket(measured(fits[m, p], line) for p, line in
                         zip([p for p in ("encode", "decode", "middle") if (m, p) in fits], c))
            for m, c in codec_costs(fits, usable_only).items()}


def fsdp_codec_costs(table: pd.DataFrame) -> dict[str, tuple[tuple[float, float], ...]]:
    """{method: (encode, decode)} from an FSDP codec bench table (`benches.fsdp_codec`), for
    `methods.resolve` and `fsdp.predict_fsdp`: encode `a + b n` of a unit's n values, decode
    `a + b n` of one payload of n / p values (the table's decode is all p payloads'), each by
    `robust_line`."""
    _columns(table, ("method", "world_size", "numel", "encode_s", "decode_s"), "FSDP codec")
    costs = {}
    for method, rows in table.groupby("method", sort=False):
        p = rows["world_size"].to_numpy(float)
        n = rows["numel"].to_numpy(float)
        encode = robust_line({"method": method, "phase": "encode"}, n, rows["encode_s"])
        decode = robust_line({"method": method, "phase": "decode"}, n / p,
                             rows["decode_s"].to_numpy(float) / p)
        costs[method] = tuple((f.params["a"], f.params["b"]) for f in (encode, decode))
    return costs


def as_costs(costs) -> dict:
    """{method: (encode, decode)} from a compress-bench DataFrame (fitted), such a dict (as
    is) or None (empty)."""
    if costs is None:
        return {}
    return codec_costs(fit_codec(costs), usable_only=True) if isinstance(costs, pd.DataFrame) \
        else dict(costs)


def _design(collective: str, p: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """Columns (latency steps, bytes factor * nbytes) of a flat ring (`ring_factors`)."""
    lat, bw = np.vectorize(lambda w: ring_factors(collective, int(w)), otypes=[float, float])(p)
    return np.column_stack([lat, bw * nbytes])


def fit_collectives(table: pd.DataFrame, column: str = "time_s") -> dict[str, Fit]:
    """{collective: Fit with params alpha_s, beta_s_per_byte, bandwidth_bps (= 8/beta)} to the
    times in `column` (the median per size; "time_mean_s": the mean)."""
    _columns(table, ("collective", "world_size", "nbytes", column), "collective-bench")
    check_values(table, "collective-bench", counts=("nbytes",), workers=("world_size",),
                 optional_times=(column,))
    check_unique(table, "collective-bench", COLLECTIVE_KEY)
    fits = {}
    for collective, rows in table.groupby("collective", sort=False):
        if collective not in COLLECTIVES:
            raise ValueError(f"collective={collective!r} is not allowed: choose one of "
                             f"{', '.join(map(repr, COLLECTIVES))}")
        rows = rows[(rows["world_size"] > 1) & np.isfinite(rows[column].to_numpy(float))]
        X = _design(collective, rows["world_size"].to_numpy(float),
                    rows["nbytes"].to_numpy(float))
        fit = _lstsq({"collective": collective}, X, rows[column].to_numpy(float),
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


def fit_slowdown(measured, predicted_at, levels: int = 5, points: int = 9) -> Fit:
    """The compute slowdown lambda in [1, 3] (MLSys 2022, Agarwal et al., "On the utility of
    gradient compression in distributed training systems": 1.04-1.1 there) minimising the
    squared relative errors of `predicted_at(lambda)` (the model's iteration times with
    `Network.compute_slowdown` lambda) against the `measured` ones, by `_grid_min`."""
    measured = np.asarray(measured, float)

    def loss(params):
        predicted = np.asarray(predicted_at(params["compute_slowdown"]), float)
        return float(np.sum((predicted / measured - 1) ** 2))

    best = _grid_min(loss, {"compute_slowdown": (1.0, 3.0)}, levels, points)
    fitted = np.asarray(predicted_at(best["compute_slowdown"]), float)
    return Fit({"runs": len(measured)}, best, _r2(measured, fitted), measured - fitted,
               len(measured))


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
    """One row per fit: its label, parameters, R^2, n and RMSE of the residuals; for codec
    fits also the worst |relative residual|, the sizes dropped as outliers and the
    `fit_problem` ("" when usable)."""
    rows = []
    for f in fits.values():
        row = {**f.label, **f.params, "r2": f.r2, "n": f.n, "rmse": f.rmse}
        if "phase" in f.label:
            row.update(worst_rel_residual=f.worst_rel,
                       dropped=" ".join(map(str, f.dropped)), status=fit_status(f),
                       problem=fit_problem(f) or "")
        rows.append(row)
    return pd.DataFrame(rows)
