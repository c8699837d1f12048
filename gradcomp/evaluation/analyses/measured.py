"""Measured beside modelled: the performance model's iteration time for each run of a `bench
train` table, in the same setting (the method, the workers, DDP's bucket cap), from the
workload's measured profile, a network and the encode/decode costs, next to the measured time
and the relative error, so that a user can check the model on their own cluster before
trusting its extrapolation to other bandwidths or worker counts.

The network is either a `bench collective` table's fits (alpha and fitted bandwidth per
collective; `train_predictions`) or a stated bandwidth and latency (`measured_vs_predicted`).
"ddp" runs (DDP without a hook) are modelled as method none; no value is fitted to the runs.
"""
from __future__ import annotations

import math

import pandas as pd

from ..benches.converge import compressor_options
from ..common.columns import check_values
from ..common.units import format_rate
from ..model.bucketing import DDP
from ..model.fit import as_costs, fit_collectives, network_from_fit, validate
from ..model.methods import resolve
from ..model.network import Network
from ..model.timeline import predict
from ..profiles.profiles import load_profile

NOT_PREDICTED = "not predicted (auto chooses at run time)"
COLUMNS = ("method", "workers", "bucket_cap_mb", "measured", "predicted", "rel_error", "costs")


def predict_runs(train: pd.DataFrame, profile, network_of, costs: dict,
                 excluded=()) -> pd.DataFrame:
    """Per run of `train`: measured and predicted t_iter and the relative error, on
    `network_of(workers)`, with `costs` ({method: (encode, decode[, middle])}; others
    assumed, column costs says which: "assumed (fit excluded)" for the methods in
    `excluded`). An `auto` run has no prediction (NaN, costs `NOT_PREDICTED`)."""
    predicted, origin = [], []
    for row in train.itertuples():
        name = "none" if row.method == "ddp" else row.method
        if name == "auto":
            predicted.append(math.nan)
            origin.append(NOT_PREDICTED)
            continue
        # bench_train passes bucket_cap_mb to DDP, and torch then gives the first bucket
        # the same cap (the 1 MiB first bucket is for the default cap only).
        cap = float(row.bucket_cap_mb)
        method = resolve(name, costs, **_run_options(name, getattr(row, "options", "")))
        pred = predict(profile, network_of(int(row.world_size)), method,
                       DDP(cap, first_bucket_mb=cap), baseline_s=math.nan)
        predicted.append(pred.t_iter_s)
        origin.append("none" if name == "none" else "fitted" if method.priced_by else
                      "assumed (fit excluded)" if name in excluded else "assumed")
    check = validate(predicted, train["t_iter_s"])
    return check.table.assign(method=list(train["method"]), costs=origin,
                              workers=list(train["world_size"]),
                              bucket_cap_mb=list(train["bucket_cap_mb"]))


def _usable(collective_fits: dict) -> dict:
    """The all-reduce and all-gather fits with a positive, finite bandwidth; a ValueError
    when the all-reduce has none."""
    fits = {c: f for c, f in collective_fits.items()
            if c in ("allreduce", "allgather") and 0 < f.params["bandwidth_bps"] < math.inf}
    if "allreduce" not in fits:
        raise ValueError("the collective bench gave no usable all-reduce fit (bandwidth not "
                         "positive and finite): cannot model the training runs")
    return fits


def train_predictions(train: pd.DataFrame, profile, collective_fits: dict,
                      costs: dict, excluded=()) -> pd.DataFrame:
    """`predict_runs` on the network of `collective_fits` (`fit.fit_collectives`)."""
    fits = _usable(collective_fits)
    nominal = fits["allreduce"].params["bandwidth_bps"]
    return predict_runs(train, profile, lambda p: network_from_fit(fits, p, nominal), costs,
                        excluded)


def fitted_network(collectives: pd.DataFrame) -> dict:
    """The network of a `bench collective` table, as `advise` takes it: `bandwidth` (the
    all-reduce's fitted bandwidth), `latency_s` and `efficiency` per collective (the fitted
    alphas and bandwidths, `fit.network_from_fit`), and `label`, how a verdict names it."""
    fits = _usable(fit_collectives(collectives))
    nominal = fits["allreduce"].params["bandwidth_bps"]
    network = network_from_fit(fits, 2, nominal)
    return dict(bandwidth=nominal, latency_s=dict(network.latency_s),
                efficiency=dict(network.efficiency),
                label=f"the network fitted from the collective bench (all-reduce "
                      f"{format_rate(nominal)}, alpha "
                      f"{network.latency_s['allreduce'] * 1e6:.3g} us)")


def measured_vs_predicted(train: pd.DataFrame, profile, bandwidth=None, latency_s: float = 0.0,
                          collectives: pd.DataFrame | None = None,
                          costs=None, excluded=()) -> pd.DataFrame:
    """`COLUMNS` for every run of `train` (a `bench train` table of one workload), predicted
    from `profile` (that workload's, e.g. `bench train --profile-out`) on the network of a
    `collectives` table's fits when given, else of `bandwidth` and `latency_s`; `costs`: a
    `bench compress` table (fitted), a {method: costs} dict or None (assumed floors);
    `excluded`: the methods whose fits were too poor to use (marked in column costs)."""
    if train.empty:
        raise ValueError("measured: the bench train table holds no runs")
    missing = {"method", "world_size", "bucket_cap_mb", "t_iter_s", "params"} - set(train)
    if missing:
        raise ValueError(f"measured: not a `gradcomp bench train` table (no column(s) "
                         f"{', '.join(sorted(missing))})")
    check_values(train, "bench train", times=("t_iter_s",), workers=("world_size",),
                 counts=("params",), positive=("bucket_cap_mb",))
    profile = load_profile(profile)
    settings = train[[c for c in ("model", "batch_size", "autocast") if c in train]]
    if len(settings.drop_duplicates()) > 1:
        raise ValueError("measured: the table holds runs of several workloads or batch sizes "
                         f"({len(settings.drop_duplicates())}): give a table of one, the one "
                         "--profile was measured for")
    params = int(train["params"].iloc[0])
    if profile.numel != params:
        raise ValueError(f"measured: the runs trained {params:,} parameters but the profile "
                         f"{profile.name!r} has {profile.numel:,}: give the profile of the same "
                         "workload (bench train --profile-out)")
    fitted = as_costs(costs)
    if collectives is not None:
        table = train_predictions(train, profile, fit_collectives(collectives), fitted,
                                  excluded)
    else:
        if bandwidth is None:
            raise ValueError("measured: give a bandwidth or a bench collective table")
        table = predict_runs(train, profile, lambda p: Network(p, bandwidth, latency_s),
                             fitted, excluded)
    return table[list(COLUMNS)]


def error_summary(table: pd.DataFrame) -> str:
    """One line: the median and largest |relative error| over the runs predicted."""
    rel = table["rel_error"].abs().dropna()
    return (f"Predicted vs measured over {len(rel)} runs: median |error| {rel.median():.1%}, "
            f"max {rel.max():.1%}.")


def _run_options(name: str, options) -> dict:
    """The compressor options a `bench train` run was measured with (its JSON `options`;
    none where the table has no such column), so that it is priced as that variant."""
    return compressor_options(name, options) if isinstance(options, str) and options else {}
