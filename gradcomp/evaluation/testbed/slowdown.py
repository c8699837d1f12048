"""The compute slowdown lambda (`Network.compute_slowdown`, MLSys 2022's) of a validation
sweep, fitted so that no run is predicted with a lambda fitted to itself: each rate's from the
uncompressed runs (ddp, none) of the sweep's OTHER rates (leave-one-rate-out). Validated in
``benchmarks/results/slowdown-validation`` (the compressed methods' median |error| over the
testbed folders 7.5% -> 5.0% this way). Or, where lambda varies with the rate
(`fit_per_method`), each run's from every OTHER method's runs at its own rate
(leave-one-method-out)."""
from __future__ import annotations

from typing import Callable

import pandas as pd

from ..analyses.cluster_fit import UNCOMPRESSED
from ..common.units import format_rate
from ..model.fit import fit_slowdown

ASSUMED = "assumed: no other rate's uncompressed run to fit it on"

#: Layouts whose lambda is fitted per rate and method (`fit_per_method`), not on the
#: uncompressed runs of the other rates: the hierarchical layout's varies with the rate (its
#: loopback exchange's copies take CPU from the other ranks' compute; per method 1.19-1.26,
#: 1.44-1.48, 1.17-1.20 at 100 Mbit/s, 1 Gbit/s, 2.5 Gbit/s in testbed-two-tier-2026-11-28-
#: repeats: median |error| 9.0% -> 3.7%); flat's does not, and per method it raised flat's
#: median in each two-tier folder (4.2% -> 4.5% there): the other methods' errors add noise.
PER_METHOD = ("hierarchical",)


def fit_slowdowns(rates, predict_at: Callable[[float, float], pd.DataFrame],
                  baselines=UNCOMPRESSED, runs: str = "") -> dict[float, tuple[float, str]]:
    """Per rate of `rates`: (lambda, where it comes from). `predict_at(rate, lambda)` is the
    validation table of a rate (columns method, measured, predicted) predicted with that
    lambda (rows of other methods are ignored: it may leave them out); each rate's lambda is
    `fit.fit_slowdown`'s on the rows of the uncompressed `baselines` (DDP's: ddp and none;
    FSDP's: fsdp and none) of the other rates, 1.0 (`ASSUMED`) where they have none. `runs`
    qualifies them in the source named (e.g. " of both layouts")."""
    def uncompressed(others, slowdown: float) -> pd.DataFrame:
        tables = [predict_at(r, slowdown) for r in others]
        table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
        return table[table["method"].isin(baselines)] if len(table) else table

    fitted = {}
    for rate in rates:
        others = [r for r in rates if r != rate]
        fitted_on = uncompressed(others, 1.0)
        if fitted_on.empty:
            fitted[rate] = (1.0, ASSUMED)
            continue
        fit = fit_slowdown(fitted_on["measured"],
                           lambda s: uncompressed(others, s)["predicted"])
        fitted[rate] = (fit.params["compute_slowdown"],
                        f"fitted to the {' and '.join(dict.fromkeys(fitted_on['method']))}"
                        f" runs{runs} at "
                        + ", ".join(format_rate(r) for r in others))
    return fitted


def predict_with_slowdowns(rates, predict_at: Callable[[float, float, dict], pd.DataFrame],
                           planned: dict, plain: dict, baselines=UNCOMPRESSED,
                           runs: str = "") -> pd.DataFrame:
    """Every rate's validation table `predict_at(rate, lambda, planned)` (`planned`: the
    table keys of every run), predicted with the rate's lambda, which `fit_slowdowns` fits
    on `predict_at(rate, lambda, plain)` (`plain`: the keys of the `baselines`' runs alone),
    stated in the columns ``compute_slowdown`` and ``slowdown_source``."""
    slowdowns = fit_slowdowns(rates, lambda rate, slowdown: predict_at(rate, slowdown, plain),
                              baselines, runs)
    return pd.concat([predict_at(rate, slowdowns[rate][0], planned).assign(
        compute_slowdown=slowdowns[rate][0], slowdown_source=slowdowns[rate][1])
        for rate in rates], ignore_index=True)


def fit_per_method(rates, predict_at: Callable[[float, float], pd.DataFrame], runs: str = ""
                   ) -> dict[tuple[float, str], tuple[float, str]]:
    """Per rate of `rates` and method of its table: (lambda, where it comes from).
    `predict_at(rate, lambda)` is the validation table of a rate (columns method, measured,
    predicted; NaN where a method has no prediction); each method's lambda is
    `fit.fit_slowdown`'s on the rows of every other method at the same rate (leave-one-method-
    out: no run is predicted from its own method's times), 1.0 (`ASSUMED`) where there is no
    other. `runs` qualifies them in the source named (e.g. " of both layouts")."""
    fitted = {}
    for rate in rates:
        tables = {}

        def at(slowdown: float, rate=rate, tables=tables) -> pd.DataFrame:
            if slowdown not in tables:  # each method's fit tries many of the same lambdas
                tables[slowdown] = predict_at(rate, slowdown)
            return tables[slowdown]

        base = at(1.0)
        for method in dict.fromkeys(base["method"]):
            others = ((base["method"] != method) & base["predicted"].notna()).to_numpy()
            if not others.any():
                fitted[rate, method] = (1.0, ASSUMED)
                continue
            fit = fit_slowdown(base["measured"].to_numpy()[others],
                               lambda s: at(s)["predicted"].to_numpy()[others])
            fitted[rate, method] = (fit.params["compute_slowdown"],
                                    f"fitted per method to the other methods' runs{runs} at "
                                    f"{format_rate(rate)}")
    return fitted


def predict_per_method(rates, predict_at: Callable[[float, float, dict], pd.DataFrame],
                       planned: dict, runs: str = "") -> pd.DataFrame:
    """Every rate's validation table `predict_at(rate, lambda, planned)`, each method's rows
    predicted with its own lambda (`fit_per_method`), stated in the columns
    ``compute_slowdown`` and ``slowdown_source``."""
    slowdowns = fit_per_method(rates, lambda rate, slowdown: predict_at(rate, slowdown, planned),
                               runs)
    tables = []
    for rate in rates:
        parts = []
        for method in dict.fromkeys(predict_at(rate, 1.0, planned)["method"]):
            slowdown, source = slowdowns[rate, method]
            table = predict_at(rate, slowdown, planned)
            parts.append(table[table["method"] == method].assign(
                compute_slowdown=slowdown, slowdown_source=source))
        tables.append(pd.concat(parts).sort_index())  # the table's order
    return pd.concat(tables, ignore_index=True)


def read_once(read: Callable[[float, dict], object]) -> Callable[[float, dict], object]:
    """`read(rate, keys)` (what a rate's prediction reads from the tables and fits) read once
    per rate and keys (a dict of table keys, as `predict_with_slowdowns` passes): the fit of
    lambda prices every rate some 50 times, at other lambdas, from the same tables."""
    seen = {}

    def remembered(rate: float, keys: dict):
        key = (rate, id(keys))
        if key not in seen:
            seen[key] = (keys, read(rate, keys))  # keys held: its id stays its own
        return seen[key][1]
    return remembered


def slowdown_line(table: pd.DataFrame) -> str:
    """One line: the lambda each rate (and layout, where the table has a ``layout`` column)
    of a validation table (columns rate_bps, rate, compute_slowdown, slowdown_source) was
    predicted with (its range where each method has its own), and where it came from."""
    config = [c for c in ("layout", "rate_bps") if c in table]
    parts, shared = [], True
    for _, rows in table.groupby(config, sort=True):
        r, low, high = rows.iloc[0], rows["compute_slowdown"].min(), rows["compute_slowdown"].max()
        shared = shared and low == high
        value = f"{low:.3f}" if low == high else f"{low:.3f}-{high:.3f} per method"
        parts.append(("" if "layout" not in r else f"{r['layout']} ") + f"{r['rate']} "
                     f"{value} ({r['slowdown_source']})")
    return ("Compute slowdown lambda" + (", applied to every method: " if shared else ": ")
            + "; ".join(parts) + ".")
