"""The compute slowdown lambda (`Network.compute_slowdown`, MLSys 2022's) of a validation
sweep, fitted so that no run is predicted with a lambda fitted to itself: each rate's from the
uncompressed runs (ddp, none) of the sweep's OTHER rates (leave-one-rate-out). Validated in
``benchmarks/results/slowdown-validation`` (the compressed methods' median |error| over the
testbed folders 7.5% -> 5.0% this way)."""
from __future__ import annotations

from typing import Callable

import pandas as pd

from ..analyses.cluster_fit import UNCOMPRESSED
from ..common.units import format_rate
from ..model.fit import fit_slowdown

ASSUMED = "assumed: no other rate's ddp or none run to fit it on"


def fit_slowdowns(rates, predict_at: Callable[[float, float], pd.DataFrame]
                  ) -> dict[float, tuple[float, str]]:
    """Per rate of `rates`: (lambda, where it comes from). `predict_at(rate, lambda)` is the
    validation table of a rate (columns method, measured, predicted) predicted with that
    lambda (rows of other methods are ignored: it may leave them out); each rate's lambda is
    `fit.fit_slowdown`'s on the ddp and none rows of the other rates, 1.0 (`ASSUMED`) where
    they have none."""
    def uncompressed(others, slowdown: float) -> pd.DataFrame:
        tables = [predict_at(r, slowdown) for r in others]
        table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
        return table[table["method"].isin(UNCOMPRESSED)] if len(table) else table

    fitted = {}
    for rate in rates:
        others = [r for r in rates if r != rate]
        runs = uncompressed(others, 1.0)
        if runs.empty:
            fitted[rate] = (1.0, ASSUMED)
            continue
        fit = fit_slowdown(runs["measured"], lambda s: uncompressed(others, s)["predicted"])
        fitted[rate] = (fit.params["compute_slowdown"], "fitted to the ddp and none runs at "
                        + ", ".join(format_rate(r) for r in others))
    return fitted


def slowdown_line(table: pd.DataFrame) -> str:
    """One line: the lambda each rate of a validation table (columns rate_bps, rate,
    compute_slowdown, slowdown_source) was predicted with, and where it came from."""
    per_rate = table.drop_duplicates("rate_bps").sort_values("rate_bps")
    return "Compute slowdown lambda, applied to every method: " + "; ".join(
        f"{r['rate']} {r['compute_slowdown']:.3f} ({r['slowdown_source']})"
        for _, r in per_rate.iterrows()) + "."
