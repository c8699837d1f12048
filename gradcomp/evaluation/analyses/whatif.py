"""What-if analyses on the performance model: the scaling factor of a profile for a given
network, method or compression ratio and bucketing; sweeps into tidy DataFrames; the
compression ratio needed to reach a target SF; the bandwidth below which a method pays.

A bare compression ratio c is the NetAI 2020 question: every bucket's all-reduce carries 1/c
of its bytes, with no encode / decode cost. `profile` is a Profile or a name / path for
`load_profile`; bandwidths are bit/s or strings for `units.parse_rate`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..model.fit import as_costs
from ..model.methods import MethodCost, resolve
from ..model.network import Network
from ..model.timeline import Prediction, predict
from ..model.topology import network_on
from ..profiles.profiles import load_profile

# The question asked when none is given (`gradcomp whatif`, `advise`, `run`, `report`):
# ResNet-50 trained data-parallel on 8 workers at 10 Gbit/s each.
PROFILE, WORKERS, BANDWIDTH = "resnet50", 8, "10gbit"


def default_bandwidths(points: int = 25) -> np.ndarray:
    """Log-spaced bandwidths from 1 to 400 Gbit/s, bit/s."""
    return np.logspace(9, math.log10(400e9), points)


def scenario(profile, workers: int | None, bandwidth, method="none", ratio: float | None = None,
           bucketing="ddp", latency_s: float | None = None, efficiency: float = 1.0,
           contention: float = 1.0, aggregation: str = "allreduce", topology=None,
           algorithm: str | None = None, costs=None, tiers=None) -> Prediction:
    """The modelled iteration for `method` (a name, MethodCost or ratio), or for a bare
    compression `ratio` sent by `aggregation` when given. With a `topology` (see
    `topology.network_on`, built for `workers` and `bandwidth`; a file's worker count must
    match `workers`, or give None), all-reduces run `algorithm` on it (None: forest).
    `latency_s` None: the topology's, else 0. `costs`: encode / decode costs as for `sweep`
    (None: the assumed floors). `tiers`: the two-tier fields of a `Network` (a
    `cluster.Cluster`'s `tiers()`; None: one GPU per node). A `ratio` replaces the method,
    so a `method` other than "none" beside it, or an `algorithm` without a `topology`, is a
    ValueError."""
    if ratio is not None and not (isinstance(method, str) and method == "none"):
        raise ValueError(f"method={getattr(method, 'name', method)!r} with ratio={ratio!r} is "
                         "not allowed (--method with --compression): a bare compression ratio "
                         "replaces the method; give one of them")
    if algorithm is not None and topology is None:
        raise ValueError(f"algorithm={algorithm!r} is not allowed without a topology "
                         "(--algorithm needs --topology): one bandwidth has no algorithm to "
                         "choose")
    if ratio is not None:
        method = MethodCost.fixed_ratio(ratio, aggregation)
    method = resolve(method, as_costs(costs))
    if topology is None:
        network = Network(workers, bandwidth, 0.0 if latency_s is None else latency_s,
                          efficiency, **(tiers or {}))
    else:
        chosen = {} if algorithm is None else {"algorithm": algorithm}
        network = network_on(topology, latency_s=latency_s, efficiency=efficiency,
                             workers=workers, bandwidth=bandwidth, **chosen)
    return predict(profile, network, method, bucketing, contention)


def sweep(profile, bandwidths=None, workers=(8,), methods=("none",), ratios=(),
          bucketing="ddp", latency_s: float = 0.0, efficiency: float = 1.0,
          contention: float = 1.0, costs=None, tiers=None) -> pd.DataFrame:
    """One row per (workers, bandwidth, method): every named method (with the encode /
    decode costs of `costs`, a compress-bench DataFrame or `fit.codec_costs` dict, else the
    assumed ones) and every bare compression ratio in `ratios` (column `ratio`); `tiers` as
    for `scenario` (workers then count GPUs, a multiple of its gpus_per_node)."""
    profile = load_profile(profile)
    bandwidths = default_bandwidths() if bandwidths is None else bandwidths
    fitted = as_costs(costs)
    chosen = [(resolve(m, fitted), math.nan) for m in methods]
    chosen += [(MethodCost.fixed_ratio(r), float(r)) for r in ratios]
    rows = []
    for p in ([workers] if isinstance(workers, int) else workers):
        for bw in bandwidths:
            network = Network(int(p), bw, latency_s, efficiency, **(tiers or {}))
            base = predict(profile, network, "none", bucketing, contention).t_iter_s
            for method, ratio in chosen:
                pred = predict(profile, network, method, bucketing, contention, base)
                rows.append({"profile": profile.name, **pred.as_row(), "ratio": ratio})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Requirement:
    """The smallest compression ratio reaching `target_sf` (1.0: none needed; inf: not
    reachable by compression, `reason` says why)."""

    ratio: float
    target_sf: float
    sf_uncompressed: float
    sf_at_ratio: float
    reason: str


def required_compression(profile, workers: int | None, bandwidth, target_sf: float = 0.9,
                         bucketing="ddp", latency_s: float | None = None,
                         efficiency: float = 1.0,
                         contention: float = 1.0, aggregation: str = "allreduce",
                         max_ratio: float = 1e6, rtol: float = 1e-3, topology=None,
                         algorithm: str | None = None, tiers=None) -> Requirement:
    """Bisection (on log ratio, to relative precision `rtol`) for the smallest bare
    compression ratio whose SF reaches `target_sf`; SF does not decrease with the ratio."""
    if not 0 < target_sf:
        raise ValueError(f"target_sf={target_sf!r} is not allowed: it must be > 0")

    def sf(ratio):
        return scenario(profile, workers, bandwidth, ratio=ratio, bucketing=bucketing,
                      latency_s=latency_s, efficiency=efficiency, contention=contention,
                      aggregation=aggregation, topology=topology, algorithm=algorithm,
                      tiers=tiers).sf

    base = sf(1.0)
    if base >= target_sf:
        return Requirement(1.0, target_sf, base, base, f"uncompressed already reaches SF "
                                                        f"{base:.3f}")
    best = sf(max_ratio)
    if best < target_sf:
        why = ("SF cannot exceed 1" if target_sf > 1 else
               "what remains is not bandwidth: compute that cannot overlap, latency, "
               "reduction work")
        return Requirement(math.inf, target_sf, base, best,
                           f"unreachable: even {max_ratio:g}x compression gives SF {best:.3f} "
                           f"< {target_sf:g} ({why})")
    lo, hi = 1.0, float(max_ratio)
    while hi / lo > 1 + rtol:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if sf(mid) >= target_sf else (mid, hi)
    return Requirement(hi, target_sf, base, sf(hi), f"{hi:.3g}x compression reaches SF "
                                                    f"{target_sf:g} (uncompressed {base:.3f})")


def break_even_bandwidth(profile, workers: int, method, bucketing="ddp",
                         latency_s: float = 0.0, efficiency: float = 1.0,
                         contention: float = 1.0, costs=None, lo: float = 1e6,
                         hi: float = 1e13, rtol: float = 1e-3, tiers=None) -> float:
    """The bandwidth (bit/s) below which `method` is faster than `none` (assumed a single
    crossing): math.inf if it is faster even at `hi`, 0.0 if not even at `lo`. `costs` and
    `tiers` as for `sweep`; the bandwidth is one NIC's."""
    method = resolve(method, as_costs(costs))

    def wins(bw):
        pred = predict(profile, Network(workers, bw, latency_s, efficiency, **(tiers or {})),
                       method, bucketing, contention)
        return pred.speedup > 1 + 1e-9

    if wins(hi):
        return math.inf
    if not wins(lo):
        return 0.0
    while hi / lo > 1 + rtol:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if wins(mid) else (lo, mid)
    return lo

