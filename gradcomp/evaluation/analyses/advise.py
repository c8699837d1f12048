"""Advice: rank compression methods by predicted iteration time on the user's network, and say
plainly whether compression is worth it.

Encode / decode costs come from a measured compress-bench table when given (`costs`, columns
method, numel, encode_s, decode_s; fitted per method by `fit.fit_codec`); methods missing from
it, and all methods when no table is given, get the stated memory-bound floors of
`methods.assumed_costs` (20 us per application plus the bytes moved at 800 GB/s), which
flatter slow kernels such as top-k: measure before trusting a close call.
Without convergence data the ranking is by time per iteration only; with a convergence
benchmark's table it is by predicted time to the target accuracy (`time_to_accuracy`).
"""
from __future__ import annotations

import math

import pandas as pd

from ...compressors import names
from ..model.fit import as_costs
from ..model.methods import MethodCost, resolve
from ..model.network import Network
from ..model.timeline import codec_seconds, predict
from ..model.topology import ALGORITHMS, network_on
from ..profiles.profiles import load_profile
from .recommend import ranked
from .time_to_accuracy import time_to_accuracy, tta_verdict

WORTH = 0.05  # a method is worth it when it saves at least this fraction of the iteration


def reference_algorithm(algorithms=None) -> str:
    """The all-reduce algorithm on a topology whose uncompressed run the speedups are
    against: ring when ranked (None: every algorithm), else the first of `algorithms`."""
    return "ring" if not algorithms or "ring" in algorithms else algorithms[0]


def check_options(convergence, topology, task=None, target=None, algorithms=None) -> None:
    """Refuse the options `advise` does not combine (a ValueError naming them)."""
    if convergence is not None and topology is not None:
        raise ValueError("convergence is not allowed with topology (--convergence with "
                         "--topology): time to accuracy is priced on one bandwidth; drop one")
    for name, value, needs in (("task", task, "convergence"), ("target", target, "convergence"),
                               ("algorithms", algorithms, "topology")):
        if value is not None and (convergence if needs == "convergence" else topology) is None:
            raise ValueError(f"{name}={value!r} is not allowed without {needs} (--{name} needs "
                             f"--{needs}): it would be ignored")


def advise(profile, workers: int | None, bandwidth, methods=None, costs=None,
           bucketing="ddp", latency_s: float | None = None, efficiency: float = 1.0,
           contention: float = 1.0, convergence=None, task=None,
           target=None, topology=None, algorithms=None, tiers=None,
           device: str | None = None) -> pd.DataFrame:
    """One row per method (default: every registered gradcomp method with its defaults; the
    baselines none and the profile's GPU's 16-bit all-reduce, `recommend.sixteen_bit`,
    always; bf16 never on a GPU without it, `recommend.unsupported`: `recommend.ranked`),
    fastest first: predicted t_iter, SF, speedup vs none, compression, the per-iteration
    encode + decode time and where the costs came from. `device`: the GPU the question runs
    on, for its 16-bit baseline (None: the profile's).

    With `convergence` (a `bench converge` summary table, one `task` and `target` of it, or
    its `time_to_accuracy.Variants`): one row per measured variant instead, ranked by
    predicted time to the target (`time_to_accuracy`), those that did not reach it last.

    With a `topology` (`topology.load_topology`: a built-in name or a bandwidth-matrix file,
    built for `workers` and `bandwidth`): one row per method and all-reduce algorithm of
    `algorithms` (default: ring, tree, ps, forest), column `algorithm`; speedups are against
    uncompressed ring all-reduce (the first of `algorithms` where ring is not among them:
    `reference_algorithm`). `workers` None: the topology file's (else a file of another
    count is a ValueError); `latency_s` None: the topology's, else 0. `convergence` and
    `topology` do not combine (ValueError). `tiers`: the two-tier fields of a `Network` (a
    `cluster.Cluster`'s `tiers()`; None: one GPU per node)."""
    check_options(convergence, topology, task, target, algorithms)
    if topology is None and latency_s is None:
        latency_s = 0.0
    if convergence is not None:
        return time_to_accuracy(convergence, profile, workers, bandwidth, costs, bucketing,
                                latency_s, efficiency, contention, task, target, methods,
                                tiers)
    profile = load_profile(profile)
    if topology is None:
        networks = {None: Network(workers, bandwidth, latency_s, efficiency, **(tiers or {}))}
    else:
        networks = {a: network_on(topology, a, latency_s, efficiency, workers, bandwidth)
                    for a in (algorithms or ALGORITHMS)}
    fitted = as_costs(costs)
    device = profile.device if device is None else device
    chosen = ranked(names() if methods is None else methods, device)
    base = predict(profile, next(iter(networks.values())) if topology is None else
                   network_on(topology, reference_algorithm(algorithms), latency_s, efficiency,
                              workers, bandwidth),
                   "none", bucketing, contention).t_iter_s
    rows = []
    for (algorithm, network), m in ((n, m) for n in networks.items() for m in chosen):
        method = resolve(m, fitted)
        origin = ("given" if isinstance(m, (MethodCost, int, float)) else
                  "none" if m == "none" else
                  "assumed" if not (method.priced_by or m in fitted) else
                  f"fitted: {method.priced_by}'s default options" if method.costs_note else
                  "fitted")
        pred = predict(profile, network, method, bucketing, contention, base)
        codec = codec_seconds(pred)
        rows.append({"method": method.name, "aggregation": method.aggregation,
                     "t_iter_s": pred.t_iter_s, "sf": pred.sf, "speedup": pred.speedup,
                     "compression": pred.compression, "exposed_comm_s": pred.exposed_comm_s,
                     "codec_s": codec, "costs": origin, "bucketing": pred.bucketing,
                     "workers": pred.workers, "bandwidth_bps": pred.bandwidth_bps,
                     **({} if algorithm is None else {"algorithm": algorithm})})
    table = pd.DataFrame(rows).sort_values("t_iter_s", kind="stable").reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    return table


def verdict(table: pd.DataFrame, worth: float = WORTH) -> str:
    """A plain answer from an `advise` table: is compression worth it, and by how much."""
    if "time_to_target_s" in table.columns:
        return tta_verdict(table)
    none = table[table["method"] == "none"].iloc[0]
    best = table.iloc[0]
    system = f"uncompressed {'DDP' if none['bucketing'] == 'ddp' else 'Horovod'}"
    if "algorithm" in table.columns:
        system += f" with {none['algorithm']} all-reduce"
        if best["method"] != "none":
            best = best.copy()
            best["method"] = f"{best['method']} with {best['algorithm']} all-reduce"
    if best["method"] == "none":
        runner = table.iloc[1] if len(table) > 1 else None
        tail = "" if runner is None else (
            f"; the closest, {runner['method']}, would be "
            f"{(runner['t_iter_s'] / none['t_iter_s'] - 1):.1%} slower")
        return f"No: no method beats {system} (SF {none['sf']:.2f}){tail}."
    saving = 1 - best["t_iter_s"] / none["t_iter_s"]
    if saving < worth:
        return (f"No: {system} already reaches SF {none['sf']:.2f}; the best method, "
                f"{best['method']}, would save {saving:.1%} of the iteration time.")
    ratio = "" if not math.isfinite(best["compression"]) else \
        f", {best['compression']:.3g}x less traffic"
    return (f"Yes: {best['method']} is {none['t_iter_s'] / best['t_iter_s']:.2f}x faster "
            f"than {system} (SF "
            f"{none['sf']:.2f} -> {best['sf']:.2f}{ratio}). Time per iteration only; "
            f"convergence is not modelled.")
