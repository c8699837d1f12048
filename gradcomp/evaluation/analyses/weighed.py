"""The verdict's tables weighed, for the report and `gradcomp advise` alike: the `advise` ranking
and the `time_to_accuracy` table with the intervals of `evidence.weigh`, and where, within
2x of the question's workers and bandwidth, the recommendation flips (`evidence.flips`, the
recommendation of `recommend.best_safe` or `recommend.choose` at each point searched).
"""
from __future__ import annotations

import pandas as pd

from ..model.cost_tables import CostTable
from ..profiles.profiles import load_profile
from .advise import advise
from .evidence import Evidence, flips, weigh
from .recommend import (SAFE, best_safe, candidates, choose, method_name, priced_ranking,
                        sixteen_bit, unsupported)


def _device(profile, device: str | None) -> str:
    return load_profile(profile).device if device is None else device


def ranking(profile, net: dict, table: CostTable, evidence: Evidence, methods=None,
            device: str | None = None, bucketing: str = "ddp", topology=None,
            algorithms=None, task=None, target=None) -> pd.DataFrame:
    """The `advise` ranking of `methods` priced by `table` (`recommend.priced_ranking`) on
    the network keywords `net`, weighed (`evidence.weigh`); `device`: the question's GPU
    (None: the profile's); the other keywords as `advise` takes them (and refuses)."""
    device = _device(profile, device)
    chosen = None if methods is None else [m for m in methods if table.priced(m)]

    def ask(costs, at):
        return priced_ranking(advise(profile, methods=chosen, costs=costs, bucketing=bucketing,
                                     topology=topology, algorithms=algorithms, device=device,
                                     task=task, target=target, **at), table)

    return weigh(ask, net, table.costs, evidence, sixteen_bit(device))


def ranking_flips(profile, net: dict, table: CostTable, device: str | None = None,
                  bucketing: str = "ddp") -> str:
    """Where `recommend.best_safe` (the answer without convergence runs) changes within 2x
    of `net`'s workers and bandwidth (`evidence.flips`)."""
    device = _device(profile, device)
    safe = [m for m in SAFE if table.priced(m) and not unsupported(m, device)]

    def decide(at) -> str:
        rows = priced_ranking(advise(profile, methods=safe, costs=table.costs,
                                     bucketing=bucketing, device=device, **at), table)
        return best_safe(rows, table, device)["method"]

    return flips(decide, net, method_name)


def accuracy(summary: pd.DataFrame, profile, net: dict, table: CostTable, evidence: Evidence,
             device: str | None = None, bucketing: str = "ddp", task=None, target=None,
             methods=None, topology=None) -> pd.DataFrame:
    """The `time_to_accuracy` table of convergence `summary` on `net` priced by `table`
    (`advise` with `summary`, which refuses a `topology`), weighed (`evidence.weigh`)."""
    device = _device(profile, device)

    def ask(costs, at):
        return advise(profile, methods=methods, costs=costs, bucketing=bucketing,
                      convergence=summary, task=task, target=target, topology=topology,
                      device=device, **at)

    return weigh(ask, net, table.costs, evidence, sixteen_bit(_device(profile, device)))


def accuracy_flips(summary: pd.DataFrame, tta: pd.DataFrame, profile, net: dict,
                   table: CostTable, evidence: Evidence, device: str | None = None,
                   bucketing: str = "ddp", task=None, target=None) -> str:
    """Where `recommend.choose` changes within 2x of `net`'s workers and bandwidth
    (`evidence.flips`), searched over the variants of the weighed `tta` (`accuracy`) that
    may be recommended (`recommend.candidates`)."""
    device = _device(profile, device)
    keep = {(m, o, bool(e)) for m, o, e in
            candidates(tta, table, device)[["method", "options", "error_feedback"]]
            .itertuples(index=False)}
    rows = summary[[(m, o, bool(e)) in keep for m, o, e in
                    zip(summary["method"], summary["options"], summary["error_feedback"])]]
    if rows.empty:
        return ""

    def decide(at) -> str:
        weighed = accuracy(rows, profile, at, table, evidence, device, bucketing, task, target)
        row = choose(weighed, table, device).row
        return "no recommendation" if row is None else row["variant"]

    return flips(decide, net, method_name)
