"""How the testbed's shared cores slow its ranks: the compute slowdown and the codec's price.

The compute slowdown lambda (`Network.compute_slowdown`, MLSys 2022's) of a validation
sweep, fitted so that no run is predicted with a lambda fitted to itself: each rate's from the
uncompressed runs (ddp, none) of the sweep's OTHER rates (leave-one-rate-out). Validated in
``benchmarks/results/slowdown-validation`` (the compressed methods' median |error| over the
testbed folders 7.5% -> 5.0% this way). Or, where lambda varies with the rate
(`fit_at_rate`), each rate's from the uncompressed runs AT that rate, theirs from the other
methods' there (leave-one-method-out).

The codec's price where the ranks outnumber the cores (4 ranks on 2 here; `codec_share`,
`shared_prediction`). The hook-path bench times each codec phase two ways: on every rank at
once (`t_all`: N ranks on C cores) and on one rank while the others wait at a barrier
(`t_alone`). Training sits in between. A rank computes (forward, backward, optimizer, its
codec) for a fraction u of its iteration (`timeline.busy_s` / t_iter) and waits on the
exchange for the rest; with the ranks out of step, a codec phase meets n = 1 + (N - 1) u
computing ranks on average and runs at t_alone max(1, n / C). Between the bench's two ends
(t_all = t_alone N / C when the cores are shared evenly) that is

    t = t_alone + share (t_all - t_alone),   share = clip((n - C) / (N - C), 0, 1),

and share = 1 where N <= C (no rank waits for a core: both ends agree). u depends on the
codec's price, so the price is a fixed point, from share = 1 (every rank at once).

Measured (`benchmarks/results/codec-critical-path-2026-11-28`, ranks.csv, flat, 4 ranks on
2 cores): the ranks computing during int8's encode / decode were 1.35 / 1.25 at 100 Mbit/s,
2.72 / 3.01 at 1 Gbit/s and 2.68 / 3.32 at 2.5 Gbit/s; 1 + 3u from the same runs gives 1.37,
2.81 and 3.11. Validated on a sweep measured afterwards
(``benchmarks/results/testbed-two-tier-2026-11-29-codec-share``, the same runs priced both
ways): median |error| flat 10.9% -> 6.3%, hierarchical 5.8% -> 4.7%."""
from __future__ import annotations

from typing import Callable

import pandas as pd

from ..analyses.cluster_fit import UNCOMPRESSED
from ..common.units import format_rate
from ..model.fit import fit_slowdown
from ..model.methods import Measured, PerBucket
from ..model.timeline import Prediction, busy_s

ASSUMED = "assumed: no other rate's uncompressed run to fit it on"
ROUNDS = 8  # the codec price's fixed-point iterations at most
CONVERGED = 0.005  # a codec share that moves less than this is settled

#: Layouts whose lambda is fitted at each rate (`fit_at_rate`), not on the uncompressed runs
#: of the other rates: the hierarchical layout's varies with the rate (its loopback exchange's
#: copies take CPU from the other ranks' compute): 1.24, 1.44-1.46, 1.18-1.19 at 100 Mbit/s,
#: 1 Gbit/s, 2.5 Gbit/s in testbed-two-tier-2026-11-28-repeats, where the other rates' fit gave
#: 1.26, 1.18, 1.43 (median |error| 9.0% -> 3.5%). Flat's hardly varies (1.01 at each rate
#: there), and a fit at the rate raised flat's median in 3 of 4 two-tier folders.
AT_RATE = ("hierarchical",)


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


def fit_at_rate(rates, predict_at: Callable[[float, float, dict], pd.DataFrame],
                planned: dict, plain: dict, baselines=UNCOMPRESSED, runs: str = ""
                ) -> dict[tuple[float, str], tuple[float, str]]:
    """Per rate of `rates` and method of its table: (lambda, where it comes from).
    `predict_at(rate, lambda, keys)` is the validation table of a rate's runs of `keys`
    (columns method, measured, predicted; NaN where a method has no prediction; `planned`:
    the keys of every run, `plain`: of the `baselines`' alone, cheaper to price). Each
    method's lambda is `fit.fit_slowdown`'s on the rows of the uncompressed `baselines` at the
    same rate (what a user measures anyway: an uncompressed run at the rate), a baseline's on
    the other baselines' there or, with none, on every other method's: no run is predicted
    from its own method's times; 1.0 (`ASSUMED`) where there is no other. `runs` qualifies
    them in the source named (e.g. " of both layouts")."""
    fitted = {}
    for rate in rates:
        tables, fits = {}, {}

        def at(slowdown: float, keys: dict, rate=rate, tables=tables) -> pd.DataFrame:
            if (slowdown, id(keys)) not in tables:  # the fits try many of the same lambdas
                tables[slowdown, id(keys)] = predict_at(rate, slowdown, keys)
            return tables[slowdown, id(keys)]

        every, alone = at(1.0, planned), at(1.0, plain)
        for method in dict.fromkeys(every["method"]):
            on_plain = ((alone["method"] != method) & alone["method"].isin(baselines)
                        & alone["predicted"].notna()).to_numpy()
            keys, rows = (plain, on_plain) if on_plain.any() else (
                planned, ((every["method"] != method) & every["predicted"].notna()).to_numpy())
            if not rows.any():
                fitted[rate, method] = (1.0, ASSUMED)
                continue
            table = at(1.0, keys)
            if (id(keys), rows.tobytes()) not in fits:  # the compressed methods share one
                fits[id(keys), rows.tobytes()] = fit_slowdown(
                    table["measured"].to_numpy()[rows],
                    lambda s, keys=keys, rows=rows: at(s, keys)["predicted"].to_numpy()[rows])
            names = (" and ".join(dict.fromkeys(table["method"][rows])) if keys is plain
                     else "other methods'")
            fitted[rate, method] = (
                fits[id(keys), rows.tobytes()].params["compute_slowdown"],
                ("" if keys is plain or method not in baselines else f"{method}'s: ")
                + f"fitted to the {names} runs{runs} at {format_rate(rate)}")
    return fitted


def predict_at_rate(rates, predict_at: Callable[[float, float, dict], pd.DataFrame],
                    planned: dict, plain: dict, baselines=UNCOMPRESSED, runs: str = ""
                    ) -> pd.DataFrame:
    """Every rate's validation table `predict_at(rate, lambda, planned)`, each method's rows
    predicted with its lambda (`fit_at_rate`, on `plain`'s and `planned`'s rows), stated in
    the columns ``compute_slowdown`` and ``slowdown_source``."""
    slowdowns = fit_at_rate(rates, predict_at, planned, plain, baselines, runs)
    tables = []
    for rate in rates:
        priced = {}  # per lambda: the methods but the baselines share one
        parts = []
        for method in dict.fromkeys(predict_at(rate, 1.0, planned)["method"]):
            slowdown, source = slowdowns[rate, method]
            if slowdown not in priced:
                priced[slowdown] = predict_at(rate, slowdown, planned)
            table = priced[slowdown]
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
    predicted with (each where methods have their own), and where it came from."""
    config = [c for c in ("layout", "rate_bps") if c in table]
    parts, shared = [], True
    for _, rows in table.groupby(config, sort=True):
        r = rows.iloc[0]
        pairs = rows.drop_duplicates(["compute_slowdown", "slowdown_source"])
        shared = shared and len(pairs) == 1
        parts.append(("" if "layout" not in r else f"{r['layout']} ") + f"{r['rate']} "
                     + ", ".join(f"{p['compute_slowdown']:.3f} ({p['slowdown_source']})"
                                 for _, p in pairs.iterrows()))
    return ("Compute slowdown lambda" + (", applied to every method: " if shared else ": ")
            + "; ".join(parts) + ".")


def codec_share(workers: int, cores: int, busy: float) -> float:
    """Where a codec phase sits between `t_alone` (0) and `t_all` (1) when each of `workers`
    ranks on `cores` cores computes for the fraction `busy` of its iteration."""
    if workers <= cores:
        return 1.0
    meets = 1 + (workers - 1) * min(max(busy, 0.0), 1.0)
    return min(max((meets - cores) / (workers - cores), 0.0), 1.0)


def blend(together, alone, share: float):
    """A codec cost (`Measured`, a fitted (a, b) line, or a `PerBucket` of those) at `share`
    between `alone` (0) and `together` (1): each measured size's seconds and the line's
    parameters weighted alike."""
    if isinstance(together, PerBucket):
        return PerBucket(blend(t, a, share) for t, a in zip(together, alone))
    line = tuple(a + share * (t - a) for t, a in zip(together, alone))
    if not isinstance(together, Measured):
        return line
    sizes = sorted({*together.sizes, *getattr(alone, "sizes", ())})
    return Measured(line, sizes, [alone_s + share * (together(n) - alone_s)
                                  for n, alone_s in ((n, _at(alone, n)) for n in sizes)])


def _at(cost, numel: float) -> float:
    return cost(numel) if isinstance(cost, Measured) else cost[0] + cost[1] * numel


def blended_costs(together: dict, alone: dict, share: float) -> dict:
    """`together`'s costs ({method: cost}), each method that `alone` also prices at `share`
    (`blend`)."""
    return {m: blend(c, alone[m], share) if m in alone else c for m, c in together.items()}


def shared_prediction(predict_at: Callable[[float], Prediction], workers: int, cores: int
                      ) -> tuple[Prediction, float]:
    """The fixed point of (module docstring): `predict_at(share)`'s prediction with its codec
    priced at `share`, whose busy fraction gives that share again; (prediction, share)."""
    share = 1.0
    pred = predict_at(share)
    for _ in range(ROUNDS):
        settled = codec_share(workers, cores, busy_s(pred) / pred.t_iter_s)
        if abs(settled - share) < CONVERGED:
            break
        share = settled
        pred = predict_at(share)
    return pred, share
