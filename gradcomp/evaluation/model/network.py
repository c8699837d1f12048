"""The network: p workers, and what one collective costs on it (the alpha-beta model).

The cluster: `nodes` x `gpus_per_node` workers; across nodes `rails` NICs per node, each of
`bandwidth_bps` (one NIC's line rate) at `efficiency` of it, with per-step latency
`latency_s`; inside a node `intra_bandwidth_bps` per GPU at `intra_efficiency`, latency
`intra_latency_s`. The formulas, for every collective and `algorithm` (ring, hierarchical,
tree, auto: the cheapest NCCL runs), are `gradcomp.collectives.costs`'s; with one GPU per
node and one rail (the default) they are the flat ring's, with S the bytes of one worker's
payload and B = efficiency * bandwidth / 8 bytes/s:

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
  (`gradcomp.collectives.blocksparse`, `model.blocksparse`); on two tiers at the slowest hop of a
  ring over all GPUs (`Tiers.slowest_hop`), an approximation not checked by the simulator.

The flat formulas are validated on the testbed; the two-tier ones against the link-matrix
simulator (`tiers.two_tier`) and, for 2 nodes x 2 ranks on gloo, on the two-tier testbed
(`testbed.validate_tiers`; docs/evaluation.md), not on a GPU cluster. `compute_slowdown` (>= 1) is how much slower a distributed worker computes than
a single one: the timelines multiply forward, backward and optimizer by it.

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

from ...checks import check_choice, check_int, check_number
from ...collectives import costs
from ...collectives import blocksparse
from ..common.units import parse_rate
from .blocksparse import expected_traffic

#: All-reduce algorithms a `Network` on a topology can run (see `topology.Topology`).
ALGORITHMS = ("ring", "tree", "ps", "forest")
#: How collectives run on a cluster without a topology (`collectives.costs`).
CLUSTER_ALGORITHMS = costs.ALGORITHMS

COLLECTIVES = costs.COLLECTIVES


@dataclass(frozen=True)
class Network:
    """`workers` data-parallel workers, `gpus_per_node` to a node, joined at `bandwidth_bps`
    per NIC (bits/s, or a string such as "10gbit"), `rails` NICs per node, with per-step
    latency `latency_s`; inside a node `intra_bandwidth_bps` per GPU (module docstring).
    `algorithm` None: "auto" on two tiers (several GPUs or rails per node), else "ring"."""

    workers: int
    bandwidth_bps: float
    latency_s: float | Mapping[str, float] = 0.0
    efficiency: float | Mapping[str, float] = 1.0
    reduce_bytes_per_s: float | None = None
    topology: object | None = None
    algorithm: str | None = None
    gpus_per_node: int = 1
    rails: int = 1
    intra_bandwidth_bps: float | str | None = None
    intra_latency_s: float = 0.0
    intra_efficiency: float = 1.0
    compute_slowdown: float = 1.0

    def __post_init__(self):
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) \
                or self.workers < 1:
            raise ValueError(f"workers={self.workers!r} is not allowed: it must be an integer "
                             ">= 1")
        object.__setattr__(self, "bandwidth_bps", parse_rate(self.bandwidth_bps, "bandwidth"))
        self._check_tiers()
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
            if self.two_tier:
                raise ValueError(f"gpus_per_node={self.gpus_per_node!r}, rails={self.rails!r}"
                                 " are not allowed with a topology (it has its own links): "
                                 "leave both 1")
            check_choice(self.algorithm, "algorithm", ALGORITHMS)
            if self.topology.workers != self.workers:
                raise ValueError(f"workers={self.workers!r} is not allowed with a topology of "
                                 f"{self.topology.workers} workers")
        else:
            check_choice(self.algorithm, "algorithm", CLUSTER_ALGORITHMS)

    def _check_tiers(self):
        check_int(self.gpus_per_node, "gpus_per_node", 1)
        check_int(self.rails, "rails", 1)
        if self.workers % self.gpus_per_node:
            raise ValueError(f"gpus_per_node={self.gpus_per_node!r} is not allowed with "
                             f"workers={self.workers!r}: workers must be a multiple of it "
                             "(whole nodes)")
        if self.intra_bandwidth_bps is not None:
            object.__setattr__(self, "intra_bandwidth_bps",
                               parse_rate(self.intra_bandwidth_bps, "intra_bandwidth"))
        elif self.gpus_per_node > 1:
            raise ValueError(f"intra_bandwidth_bps=None is not allowed with gpus_per_node="
                             f"{self.gpus_per_node}: give the per-GPU bandwidth inside a node "
                             "(NVLink, PCIe), e.g. '300gbyte'")
        check_number(self.intra_latency_s, "intra_latency_s", 0)
        check_number(self.intra_efficiency, "intra_efficiency", 0, above=True)
        check_number(self.compute_slowdown, "compute_slowdown", 1)
        if self.algorithm is None:
            object.__setattr__(self, "algorithm", "auto" if self.two_tier else "ring")

    @property
    def nodes(self) -> int:
        return self.workers // self.gpus_per_node

    @property
    def two_tier(self) -> bool:
        """Several GPUs or NICs (rails) per node."""
        return self.gpus_per_node > 1 or self.rails > 1

    def node_tiers(self) -> tuple["Network", "Network"]:
        """The tiers apart, as a hierarchical hook uses them: (inside a node: its G GPUs at
        the intra bandwidth, latency and efficiency; across nodes: the N ranks of one local
        rank, each local rank's ring with a 1/G share of its node's rails, as the G rings
        cross the NICs at once). Both ring networks, at this network's slowdown."""
        g, share = self.gpus_per_node, self.rails / self.gpus_per_node
        inside = Network(g, self.intra_bandwidth_bps or self.bandwidth_bps, self.intra_latency_s,
                         self.intra_efficiency, self.reduce_bytes_per_s, algorithm="ring",
                         compute_slowdown=self.compute_slowdown)
        across = Network(self.nodes, self.bandwidth_bps, self.latency_s,
                         {c: self.efficiency_of(c) * share for c in COLLECTIVES},
                         self.reduce_bytes_per_s, algorithm="ring",
                         compute_slowdown=self.compute_slowdown)
        return inside, across

    def tiers(self, collective: str) -> costs.Tiers:
        """The cluster at `collective`'s latency and efficiency, for `collectives.costs`."""
        intra = (math.inf if self.intra_bandwidth_bps is None
                 else self.intra_efficiency * self.intra_bandwidth_bps / 8)
        return costs.Tiers(self.nodes, self.gpus_per_node, self.alpha(collective),
                           self.bytes_per_s(collective), self.rails, self.intra_latency_s,
                           intra)

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
             add_time: Callable[[float], float | None] | None = None,
             priced_as: str | None = None) -> float:
        """Seconds for `collective` of an `nbytes` payload per worker; `add_time(n)` prices one
        element-wise add of n bytes (an all-reduce's reductions), e.g. `Profile.add_time`;
        `priced_as`: the collective whose latency and efficiency to take (default its own)."""
        check_choice(collective, "collective", COLLECTIVES)
        priced_as = check_choice(priced_as or collective, "priced_as", COLLECTIVES)
        if self.workers == 1 or nbytes <= 0:
            return 0.0
        if self.topology is not None:
            alpha, eff = self.alpha(priced_as), self.efficiency_of(priced_as)
            if collective == "allreduce":
                return self.topology.allreduce_time(self.algorithm, nbytes, alpha, eff)
            return self.topology.ring_time(collective, nbytes, alpha, eff)
        return costs.cost(collective, self.tiers(priced_as), nbytes, self.algorithm,
                          self._adder(add_time))

    def _adder(self, add_time) -> Callable[[float], float] | None:
        """Seconds of one element-wise add of n bytes (None: free)."""
        if self.reduce_bytes_per_s is not None:
            return lambda n: n / self.reduce_bytes_per_s
        if add_time is not None:
            return lambda n: add_time(n) or 0.0
        return None

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
        alpha, bw = self.tiers("allgather").slowest_hop()
        nbytes = numel * element_bytes
        traffic = expected_traffic(p, numel, element_bytes, block_size, density,
                                   union_density)
        first = blocksparse.sparse_seconds(p, blocksparse.Traffic(traffic.bitmap_bytes, 0, 0),
                                           alpha, bw)
        sparse = blocksparse.sparse_seconds(p, traffic, alpha, bw, bitmaps=False)
        if sparse < blocksparse.dense_seconds(p, nbytes, alpha, bw):
            chunk = density * nbytes / p
            adder = self._adder(add_time)
            add = adder(chunk) if adder is not None else 0.0
            return (first + sparse + (p - 1) * add,
                    traffic.bitmap_bytes + traffic.exchange_bytes + traffic.shard_bytes)
        return first + self.cost("allreduce", nbytes, add_time), traffic.bitmap_bytes + nbytes
