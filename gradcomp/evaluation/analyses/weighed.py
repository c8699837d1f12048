"""The verdict's tables weighed, for the report and `gradcomp advise` alike: the `advise` ranking
(on a network, a cluster or a topology), the FSDP timeline's (`fsdp.advise_fsdp`) and the
`time_to_accuracy` table with the intervals of `evidence.weigh`, and where, within 2x of the
question's workers and bandwidth, the recommendation flips (`evidence.flips`, the
recommendation of `recommend.best_safe` or `recommend.choose` at each point searched), and
where a `whatif` answer (a method faster than none) does; the `whatif` bandwidth sweep with
each point's interval (`sweep`).
"""
from __future__ import annotations

import pandas as pd

from ..model.cost_tables import CostTable
from ..model.topology import BUILTINS
from ..profiles.profiles import load_profile
from .advise import advise, check_options, reference_algorithm
from .evidence import STEPS, Evidence, flips, weigh
from .fsdp import advise_fsdp
from .time_to_accuracy import Variants, variants
from .recommend import (FSDP, SAFE, best_safe, candidates, choose, method_name,
                        priced_ranking, ranked, sixteen_bit)
from . import whatif
from .whatif import scenario


#: Points per doubling of the flip search on a topology: each point packs its forest anew
#: (seconds on a random mesh), so 2 (at 2^0.5 and 2 of the question) rather than `STEPS`.
TOPOLOGY_STEPS = 2
#: The interval fields of a weighed row (`evidence.weigh`) that an answer about one method
#: carries beside its point values: the time's, both speedups', the codec spread behind them.
INTERVALS = ("t_iter_low_s", "t_iter_high_s", "speedup_low", "speedup_high", "vs_16bit",
             "vs_16bit_low", "vs_16bit_high", "codec_spread")


def _device(profile, device: str | None) -> str:
    return load_profile(profile).device if device is None else device


def ranking(profile, net: dict, table: CostTable, evidence: Evidence, methods=None,
            device: str | None = None, bucketing: str = "ddp", topology=None,
            algorithms=None, task=None, target=None, central=None) -> pd.DataFrame:
    """The `advise` ranking of `methods` priced by `table` (`recommend.priced_ranking`) on
    the network keywords `net`, weighed (`evidence.weigh`); `device`: the question's GPU
    (None: the profile's); the other keywords as `advise` takes them (and refuses);
    `central`: that ranking's method, t_iter_s and speedup when already predicted."""
    device = _device(profile, device)
    chosen = None if methods is None else ranked(methods, device, table)

    def ask(costs, at):
        return priced_ranking(advise(profile, methods=chosen, costs=costs, bucketing=bucketing,
                                     topology=topology, algorithms=algorithms, device=device,
                                     task=task, target=target, **at), table)

    return weigh(ask, net, table.costs, evidence, sixteen_bit(device),
                 reference_algorithm(algorithms), central)


def sweep(profile, net: dict, table: CostTable, evidence: Evidence, methods,
          device: str | None = None, bucketing: str = "ddp", bandwidths=None) -> pd.DataFrame:
    """`whatif.sweep` of `methods` priced by `table` over `bandwidths` (bit/s; None:
    `whatif.default_bandwidths`) on `net`'s workers and other network keywords, each row with
    the `INTERVALS` of its method in the `ranking` weighed at its bandwidth (NaN where that
    ranking lacks it: not priced); `device` as for `ranking`. Each ranking's own point
    (its central prices) is read from the sweep, which predicts the ranked baselines too."""
    bandwidths = whatif.default_bandwidths() if bandwidths is None else bandwidths
    device = _device(profile, device)
    rest = {k: v for k, v in net.items() if k not in ("workers", "bandwidth")}
    kept = ranked(methods, device, table)  # what each point's `ranking` ranks
    swept = [*methods, *(b for b in kept if b not in methods)]  # one row each, in order
    points = whatif.sweep(profile, bandwidths, int(net["workers"]), swept, costs=table.costs,
                          bucketing=bucketing, **rest)
    points = points.assign(point=[i // len(swept) for i in range(len(points))])
    asked = [m for _ in bandwidths for m in swept]
    central = points[[m in kept for m in asked]][["point", "method", "t_iter_s", "speedup"]]
    bounds = pd.concat([ranking(profile, {**net, "bandwidth": bw}, table, evidence, methods,
                                device, bucketing,
                                central=central[central["point"] == i].drop(columns="point")
                                ).assign(point=i)
                        for i, bw in enumerate(bandwidths)])
    keyed = points[[m in methods for m in asked]].reset_index(drop=True)
    return keyed.merge(bounds[["point", "method", *INTERVALS]], how="left",
                       on=["point", "method"], validate="one_to_one").drop(columns="point")


def ranking_flips(profile, net: dict, table: CostTable, device: str | None = None,
                  bucketing: str = "ddp") -> str:
    """Where `recommend.best_safe` (the answer without convergence runs) changes within 2x
    of `net`'s workers and bandwidth (`evidence.flips`)."""
    device = _device(profile, device)
    return _safe_flips(lambda safe, at: advise(profile, methods=safe, costs=table.costs,
                                               bucketing=bucketing, device=device, **at),
                       net, table, device)


def topology_flips(profile, net: dict, table: CostTable, topology: str,
                   device: str | None = None, bucketing: str = "ddp",
                   algorithms=None) -> str:
    """Where the answer on a built-in `topology` (`recommend.best_safe`, each method on its
    fastest all-reduce algorithm of `algorithms`) changes within 2x of `net`'s workers (an
    int: the topology's) and bandwidth, the topology built anew at each point
    (`evidence.flips`; 2 workers at the fewest; `TOPOLOGY_STEPS` points per doubling, as
    each point packs a forest anew). A topology file fixes its workers and links: the
    sentence says that nothing was searched."""
    if not _searchable(topology):
        return _UNSEARCHED.format(topology)
    device = _device(profile, device)

    def rank(safe, at):
        return advise(profile, methods=safe, costs=table.costs, bucketing=bucketing,
                      topology=topology, algorithms=algorithms, device=device, **at)

    return _safe_flips(rank, net, table, device, lambda row: (row["method"], row["algorithm"]),
                       lambda answer: f"{method_name(answer[0])} on the {answer[1]} algorithm",
                       fewest=2, steps=TOPOLOGY_STEPS)


def whatif_flips(profile, net: dict, method="none", ratio: float | None = None, costs=None,
                 bucketing: str = "ddp", topology=None, algorithm: str | None = None) -> str:
    """Where `whatif.scenario`'s answer, whether `method` (or a bare compression `ratio`) is
    faster than no compression, changes within 2x of `net`'s workers and bandwidth
    (`evidence.flips`; on a built-in `topology`, rebuilt at each point as `topology_flips`
    does; a file: not searched)."""
    if not _searchable(topology):
        return _UNSEARCHED.format(topology)
    label = f"{ratio:g}x compression" if ratio is not None else getattr(method, "name", method)

    def decide(at) -> bool:
        return scenario(profile, method=method, ratio=ratio, costs=costs, bucketing=bucketing,
                        topology=topology, algorithm=algorithm, **at).speedup > 1 + 1e-9

    return flips(decide, net, lambda faster: f"{label} {'' if faster else 'no '}faster than "
                 "none", *((1, STEPS) if topology is None else (2, TOPOLOGY_STEPS)))


_UNSEARCHED = ("Where the answer flips is not searched: topology file {} fixes its workers and "
               "link rates.")


def _searchable(topology) -> bool:
    """Whether the flip search can rebuild `topology` at other workers and bandwidths: none,
    or a built-in name (`topology.BUILTINS`), not a file."""
    return topology is None or str(topology).partition(":")[0] in BUILTINS


def fsdp_ranking(profile, net: dict, table: CostTable, evidence: Evidence, methods=None,
                 device: str | None = None) -> pd.DataFrame:
    """The `fsdp.advise_fsdp` ranking of `methods` priced by `table` on the network keywords
    `net` (`recommend.priced_ranking`: nothing unpriced is ranked), weighed
    (`evidence.weigh`) as `ranking` is; `device` as for `ranking`."""
    device = _device(profile, device)
    chosen = None if methods is None else ranked(methods, device, table)

    def ask(costs, at):
        return priced_ranking(advise_fsdp(profile, methods=chosen, costs=costs, device=device,
                                          **at), table)

    return weigh(ask, net, table.costs, evidence, sixteen_bit(device))


def fsdp_flips(profile, net: dict, table: CostTable, device: str | None = None) -> str:
    """Where the FSDP timeline's answer (`recommend.best_safe` of `fsdp_ranking`) changes
    within 2x of `net`'s workers and bandwidth (`evidence.flips`)."""
    device = _device(profile, device)
    return _safe_flips(lambda safe, at: advise_fsdp(profile, methods=safe, costs=table.costs,
                                                    device=device, **at),
                       net, table, device, name=lambda m: method_name(m, FSDP))


def _safe_flips(rank, net: dict, table: CostTable, device: str,
                answer=lambda row: row["method"], name=method_name, fewest: int = 1,
                steps: int = STEPS) -> str:
    """`evidence.flips` of the answer without convergence runs: `answer` of the
    `recommend.best_safe` row of `rank(methods, at)` (a ranking of the `SAFE` methods
    `table` prices, runnable on `device`, at network keywords `at`), read by `name`."""
    safe = ranked(SAFE, device, table)

    def decide(at):
        return answer(best_safe(priced_ranking(rank(safe, at), table), table, device))

    return flips(decide, net, name, fewest, steps)


def accuracy(summary, profile, net: dict, table: CostTable, evidence: Evidence,
             device: str | None = None, bucketing: str = "ddp", task=None, target=None,
             methods=None, topology=None) -> pd.DataFrame:
    """The `time_to_accuracy` table of convergence `summary` (or its `Variants`) on `net`
    priced by `table` (`advise` with it, which refuses a `topology`), weighed
    (`evidence.weigh`): the summary's variants made once for every pricing."""
    check_options(summary, topology, task, target)  # before the summary is read
    device = _device(profile, device)
    chosen = summary if isinstance(summary, Variants) else \
        variants(summary, task, target, methods)

    def ask(costs, at):
        return advise(profile, costs=costs, bucketing=bucketing, convergence=chosen,
                      topology=topology, device=device, **at)

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
    chosen = variants(rows, task, target)  # once for every point searched

    def decide(at) -> str:
        weighed = accuracy(chosen, profile, at, table, evidence, device, bucketing)
        row = choose(weighed, table, device).row
        return "no recommendation" if row is None else row["variant"]

    return flips(decide, net, method_name)
