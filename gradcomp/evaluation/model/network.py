"""The network: p workers in a ring of links with bandwidth B and latency alpha, and what one
collective costs on it (the alpha-beta model).

With S the bytes of one worker's payload and B = efficiency * bandwidth / 8 bytes/s:

* ring all-reduce: ``2(p-1) alpha + 2(p-1)/p * S/B + (p-1) * add(S/p)``, where ``add(n)`` is
  one element-wise add of n-byte vectors (the reduce-scatter's reductions): ``n /
  reduce_bytes_per_s`` when that is set, else the profile's vec-add table, else free;
* ring all-gather: ``(p-1) alpha + (p-1) * S/B``;
* pipelined (ring) broadcast: ``(p-1) alpha + S/B``;
* reduce-scatter of a worker's S bytes (each keeps S/p): ``(p-1) alpha + (p-1)/p * S/B + (p-1)
  * add(S/p)``; all-to-all of S bytes (S/p to each worker): ``(p-1) alpha + (p-1)/p * S/B``
  (FSDP's collectives: `model.fsdp`);
* block-sparse all-reduce (`block_sparse_cost`): bitmaps, then upstream non-zero blocks per
  worker and the downstream union, with the all-gather's alpha and B
  (`gradcomp.comm.blocksparse`, `model.blocksparse`).

With a `topology` (`topology.Topology`: a matrix of dedicated links between pairs of workers,
optionally per-worker NICs; see its module), all-reduce costs what
its simulator gives for `algorithm` (ring, tree, ps, forest), all-gather and broadcast what a
ring in rank order costs on it (`Topology.ring_time`), at the latency and efficiency here
(reductions not priced); `bandwidth_bps` is then the algorithm's bus bandwidth
(`topology.network_on`).

p = 1 and empty payloads cost 0. `latency_s` and `efficiency` are one number or a mapping
collective -> value (missing collectives: latency 0, efficiency 1), as
`fit.network_from_fit` produces.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

from ...checks import check_choice
from ...comm import blocksparse
from ..common.units import parse_rate
from .blocksparse import expected_traffic

#: All-reduce algorithms a `Network` on a topology can run (see `topology.Topology`).
ALGORITHMS = ("ring", "tree", "ps", "forest")

COLLECTIVES = ("allreduce", "allgather", "broadcast", "reducescatter", "alltoall")



@dataclass(frozen=True)
class Network:
    """`workers` data-parallel workers joined at `bandwidth_bps` (bits/s, or a string such as
    "10gbit") with per-step latency `latency_s`."""

    workers: int
    bandwidth_bps: float
    latency_s: float | Mapping[str, float] = 0.0
    efficiency: float | Mapping[str, float] = 1.0
    reduce_bytes_per_s: float | None = None
    topology: object | None = None
    algorithm: str = "ring"

    def __post_init__(self):
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) \
                or self.workers < 1:
            raise ValueError(f"workers={self.workers!r} is not allowed: it must be an integer "
                             ">= 1")
        object.__setattr__(self, "bandwidth_bps", parse_rate(self.bandwidth_bps, "bandwidth"))
        for option, lo in (("latency_s", 0.0), ("efficiency", None)):
            value = getattr(self, option)
            values = value.items() if isinstance(value, Mapping) else [(None, value)]
            for collective, v in values:
                if collective is not None:
                    check_choice(collective, f"{option} key", COLLECTIVES)
                ok = isinstance(v, (int, float)) and math.isfinite(v)
                if not ok or (v < lo if lo is not None else v <= 0):
                    rule = ">= 0" if lo is not None else "> 0"
                    raise ValueError(f"{option}={value!r} is not allowed: values must be "
                                     f"finite and {rule}")
        if self.reduce_bytes_per_s is not None and not self.reduce_bytes_per_s > 0:
            raise ValueError(f"reduce_bytes_per_s={self.reduce_bytes_per_s!r} is not allowed: "
                             "it must be > 0 (or None)")
        if self.topology is not None:
            check_choice(self.algorithm, "algorithm", ALGORITHMS)
            if self.topology.workers != self.workers:
                raise ValueError(f"workers={self.workers!r} is not allowed with a topology of "
                                 f"{self.topology.workers} workers")

    def alpha(self, collective: str) -> float:
        lat = self.latency_s
        return float(lat.get(collective, 0.0) if isinstance(lat, Mapping) else lat)

    def prices(self, collective: str) -> bool:
        """Whether `collective` has a latency and efficiency of its own here (one number for
        every collective, or the mapping names it) rather than the defaults."""
        return all(not isinstance(v, Mapping) or collective in v
                   for v in (self.latency_s, self.efficiency))

    def efficiency_of(self, collective: str) -> float:
        eff = self.efficiency
        return float(eff.get(collective, 1.0) if isinstance(eff, Mapping) else eff)

    def bytes_per_s(self, collective: str) -> float:
        """Effective bandwidth B of `collective`, bytes/s."""
        return self.efficiency_of(collective) * self.bandwidth_bps / 8

    def cost(self, collective: str, nbytes: float,
             add_time: Callable[[float], float | None] | None = None) -> float:
        """Seconds for `collective` of an `nbytes` payload per worker; `add_time(n)` prices one
        element-wise add of n bytes (an all-reduce's reductions), e.g. `Profile.add_time`."""
        check_choice(collective, "collective", COLLECTIVES)
        p = self.workers
        if p == 1 or nbytes <= 0:
            return 0.0
        alpha, bw = self.alpha(collective), self.bytes_per_s(collective)
        if self.topology is not None:
            eff = self.efficiency_of(collective)
            if collective == "allreduce":
                return self.topology.allreduce_time(self.algorithm, nbytes, alpha, eff)
            return self.topology.ring_time(collective, nbytes, alpha, eff)
        if collective == "allgather":
            return (p - 1) * alpha + (p - 1) * nbytes / bw
        if collective == "broadcast":
            return (p - 1) * alpha + nbytes / bw
        chunk = nbytes / p
        if collective == "alltoall":
            return (p - 1) * alpha + (p - 1) * chunk / bw
        add = 0.0
        if self.reduce_bytes_per_s is not None:
            add = chunk / self.reduce_bytes_per_s
        elif add_time is not None:
            add = add_time(chunk) or 0.0
        rounds = 2 if collective == "allreduce" else 1
        return rounds * (p - 1) * (alpha + chunk / bw) + (p - 1) * add

    def block_sparse_cost(self, numel: int, element_bytes: int, block_size: int,
                          density: float, union_density: float,
                          add_time: Callable[[float], float | None] | None = None
                          ) -> tuple[float, float]:
        """(seconds, bytes one worker sends) of a block-sparse all-reduce of `numel`
        elements with a fraction `density` of non-zero blocks per worker and `union_density`
        non-zero on some worker: bitmaps, then the sparse rounds (an owner adds the p-1
        others' blocks of its shard, priced like `cost`'s reductions), or the dense
        all-reduce where that is faster, as the implementation decides."""
        p = self.workers
        if p == 1 or numel <= 0:
            return 0.0, 0.0
        alpha, bw = self.alpha("allgather"), self.bytes_per_s("allgather")
        nbytes = numel * element_bytes
        traffic = expected_traffic(p, numel, element_bytes, block_size, density,
                                   union_density)
        first = blocksparse.sparse_seconds(p, blocksparse.Traffic(traffic.bitmap_bytes, 0, 0),
                                           alpha, bw)
        sparse = blocksparse.sparse_seconds(p, traffic, alpha, bw, bitmaps=False)
        if sparse < blocksparse.dense_seconds(p, nbytes, alpha, bw):
            chunk = density * nbytes / p
            add = (chunk / self.reduce_bytes_per_s if self.reduce_bytes_per_s is not None
                   else (add_time(chunk) or 0.0) if add_time is not None else 0.0)
            return (first + sparse + (p - 1) * add,
                    traffic.bitmap_bytes + traffic.exchange_bytes + traffic.shard_bytes)
        return first + self.cost("allreduce", nbytes, add_time), traffic.bitmap_bytes + nbytes
