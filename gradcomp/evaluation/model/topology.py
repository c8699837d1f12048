"""Network topologies as link-bandwidth matrices, and the completion time of an all-reduce on
them by ring, tree, parameter server and forest (`collectives.forest_packing`).

A `Topology` holds `bandwidth_bps[i][j]`, the capacity of the directed link from worker i to
worker j in bit/s (0: no link): a dedicated link per ordered pair, which other pairs' traffic
does not share; optionally each worker's NIC, `egress_bps[i]` and `ingress_bps[i]` (bit/s;
None: no NIC limit, only the links), which all of its links share; and a per-hop latency.
Optionally the workers sit in nodes (`node_of[i]`) whose NICs (`node_bps`, each way, all
rails together) carry all traffic between nodes; then a worker's own caps count only its
traffic inside its node (a GPU's bandwidth there; its traffic to other nodes goes to the
NIC). `tiers.two_tier` builds such a cluster, `tiers.simulate` runs NCCL's collectives
on it.
Traffic between workers without a direct link follows the widest path (largest bottleneck,
then fewest hops among those: a breadth-first search over the links at least that wide).
Every algorithm is a fluid flow: with `load` the bytes each directed link carries per byte of
gradient (and a worker's NIC the sum over its links, forwarded traffic included), its
bandwidth time is ``D * max(load / capacity)`` over links and NICs. For S = D bytes per
worker, p workers and alpha the per-hop latency (H: hops of the longest route used):

* ``ring``: the ring in rank order: 2(p-1) steps, each sending D/p to the next worker:
  ``2(p-1) (alpha H + D/p * max(load / capacity))``, load = routes crossing the link;
* ``tree``: one binary tree over the ranks (heap order, root 0), reduce up then broadcast
  down; ``ps``: one parameter server (the worker that makes it fastest) to which every
  worker pushes D and from which it pulls D; ``forest``: the packed forest, tree t of rate
  x_t carrying D x_t / X (X = sum x_t; tree edges are links). All three are pipelined in C
  chunks through s stages (2 x the height of the highest tree; 2 for the server):
  ``(C + s - 1) (T / C + alpha H)``, with T the bandwidth time (forest: D / X) and C the
  count that minimises it, sqrt((s - 1) T / (alpha H)), but chunks of at least `chunk_bytes`
  (64 KiB by default).

Built-in topologies (`load_topology`): ``two-racks`` (two halves, each a full mesh at the
given bandwidth, joined by one link at a tenth of it between their first workers; links only,
no NICs), ``random`` / ``random:SEED`` (a full mesh, every directed link uniform in
[bandwidth/10, bandwidth], seeded; links only, no NICs), ``homogeneous`` (a switched cluster:
every worker one NIC of the bandwidth each way, on a full mesh of links at the bandwidth; ring
all-reduce there takes the plain model's 2(p-1)/p S/B); or a JSON file (a matrix, or
{"bandwidth_bps": matrix, "latency_s": alpha, "egress_bps": ..., "ingress_bps": ...}, the NICs
one rate for all workers or one per worker) or CSV file (a matrix) with entries in bit/s or
rates such as "10gbit".
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from ...checks import check_int
from ...collectives.costs import TREE_CHUNK_BYTES, pipeline
from ...collectives.forest_packing import (CUT_LIMIT, PARTITION_LIMIT, Forest, check_bandwidth,
                                    check_connected, check_nics, pack_forest, two_way_cut)
from ..common.units import parse_rate
from .network import ALGORITHMS, Network

BUILTINS = ("two-racks", "random", "homogeneous")
DEFAULT_CHUNK_BYTES = TREE_CHUNK_BYTES


@dataclass(frozen=True, eq=False)
class Topology:
    """`bandwidth_bps`: n x n directed link capacities, bit/s (0: no link), one dedicated link
    per ordered pair; `latency_s`: per hop; `egress_bps`, `ingress_bps`: each worker's NIC,
    bit/s (one number for all, or n; None or inf: unlimited), shared by its links."""

    bandwidth_bps: np.ndarray
    latency_s: float = 0.0
    name: str = "custom"
    egress_bps: object = None
    ingress_bps: object = None
    node_of: object = None
    node_bps: float | None = None

    def __post_init__(self):
        matrix = check_bandwidth(self.bandwidth_bps, "topology")
        matrix.setflags(write=False)  # built-ins are shared (cached)
        object.__setattr__(self, "bandwidth_bps", matrix)
        if not (isinstance(self.latency_s, (int, float)) and math.isfinite(self.latency_s)
                and self.latency_s >= 0):
            raise ValueError(f"latency_s={self.latency_s!r} is not allowed: it must be a "
                             "finite number >= 0")
        check_connected(matrix, "topology")
        for option in ("egress_bps", "ingress_bps"):
            caps = check_nics(getattr(self, option), len(matrix), option)
            caps.setflags(write=False)
            object.__setattr__(self, option, caps)
        if self.node_of is not None:
            nodes = np.asarray(self.node_of)
            if nodes.shape != (len(matrix),) or nodes.dtype.kind not in "iu" or (nodes < 0).any():
                raise ValueError(f"node_of={self.node_of!r} is not allowed: give one node "
                                 f"number >= 0 per worker ({len(matrix)})")
            nodes.setflags(write=False)
            object.__setattr__(self, "node_of", nodes)
            if not (isinstance(self.node_bps, (int, float)) and self.node_bps > 0):
                raise ValueError(f"node_bps={self.node_bps!r} is not allowed with node_of: "
                                 "it must be a number > 0 (bit/s each way)")

    @property
    def has_nics(self) -> bool:
        return bool(np.isfinite(self.egress_bps).any() or np.isfinite(self.ingress_bps).any())

    @property
    def workers(self) -> int:
        return len(self.bandwidth_bps)

    @cached_property
    def forest(self) -> Forest:
        """The packed forest (rates in bit/s)."""
        return pack_forest(self.bandwidth_bps, option="topology", egress=self.egress_bps,
                           ingress=self.ingress_bps)

    @cached_property
    def _routes(self) -> tuple[np.ndarray, dict]:
        """(bottleneck bit/s between every pair, {(i, j): links of the route}): per pair, the
        fewest hops over the links at least as wide as its widest path (breadth-first)."""
        n, b = self.workers, self.bandwidth_bps
        width = b.copy()
        for k in range(n):  # Floyd-Warshall on bottlenecks
            width = np.maximum(width, np.minimum(width[:, k:k + 1], width[k:k + 1, :]))
        np.fill_diagonal(width, 0.0)
        routes = {}
        for i in range(n):
            for w in np.unique(width[i][width[i] > 0]):
                parent = np.full(n, -1)
                parent[i], queue = i, [i]
                for node in queue:
                    for nxt in np.flatnonzero((b[node] >= w) & (parent < 0)):
                        parent[nxt] = node
                        queue.append(int(nxt))
                for j in np.flatnonzero(width[i] == w):
                    links, node = [], int(j)
                    while node != i:
                        links.append((int(parent[node]), node))
                        node = int(parent[node])
                    routes[i, int(j)] = links[::-1]
        return width, routes

    @property
    def widest(self) -> tuple[np.ndarray, np.ndarray]:
        """(bottleneck bit/s, hops) of the route between every pair."""
        width, routes = self._routes
        hops = np.zeros((self.workers, self.workers), dtype=int)
        for (i, j), links in routes.items():
            hops[i, j] = len(links)
        return width, hops

    def route(self, i: int, j: int) -> list[tuple[int, int]]:
        """The directed links of the widest path from i to j, fewest hops among those."""
        return [] if i == j else list(self._routes[1][i, j])

    def load(self, flows) -> tuple[float, int]:
        """(max over links and NICs of load / capacity in s per bit, longest route in hops)
        for `flows`: (src, dst, units) each."""
        load = np.zeros_like(self.bandwidth_bps)
        longest = 0
        for i, j, units in flows:
            links = self.route(i, j)
            longest = max(longest, len(links))
            for a, b in links:
                load[a, b] += units
        used = load > 0
        per_bit = (load[used] / self.bandwidth_bps[used]).max(initial=0.0)
        own = load
        if self.node_of is not None:  # the nodes' NICs carry what crosses nodes
            same = self.node_of[:, None] == self.node_of[None, :]
            own, across = np.where(same, load, 0.0), np.where(same, 0.0, load)
            for axis in (1, 0):
                per_node = np.bincount(self.node_of, weights=across.sum(axis=axis))
                per_bit = max(per_bit, per_node.max() / self.node_bps)
        nic = max((own.sum(axis=1) / self.egress_bps).max(),
                  (own.sum(axis=0) / self.ingress_bps).max())
        return float(max(per_bit, nic)), longest

    def allreduce_time(self, algorithm: str, nbytes: float, latency_s: float | None = None,
                       efficiency: float = 1.0, chunk_bytes: float = DEFAULT_CHUNK_BYTES) -> float:
        """Seconds to all-reduce `nbytes` per worker with `algorithm` (see the module
        docstring); links run at `efficiency` of their capacity; `latency_s` overrides the
        topology's per-hop latency."""
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm={algorithm!r} is not allowed: choose one of "
                             f"{', '.join(map(repr, ALGORITHMS))}")
        if not (chunk_bytes > 0 and efficiency > 0):
            raise ValueError(f"chunk_bytes={chunk_bytes!r}, efficiency={efficiency!r} are not "
                             "allowed: both must be > 0")
        p = self.workers
        if p == 1 or nbytes <= 0:
            return 0.0
        alpha = self.latency_s if latency_s is None else latency_s
        bits = 8.0 * nbytes / efficiency
        chunks = max(1, math.ceil(nbytes / chunk_bytes))  # the most chunks
        if algorithm == "ring":
            per_bit, hops = self.load([(i, (i + 1) % p, 1.0) for i in range(p)])
            return 2 * (p - 1) * (alpha * hops + bits / p * per_bit)
        if algorithm == "tree":
            edges = [(i, (i - 1) // 2) for i in range(1, p)]
            per_bit, hops = self.load([f for c, r in edges for f in ((c, r, 1.0), (r, c, 1.0))])
            return pipeline(chunks, 2 * int(math.log2(p)), bits * per_bit, alpha * hops)
        if algorithm == "ps":
            return min(self._ps_time(server, bits, chunks, alpha) for server in range(p))
        if self.node_of is not None:
            raise ValueError("algorithm='forest' is not allowed on a topology of nodes: the "
                             "forest's packing does not see the nodes' shared NICs")
        forest = self.forest
        return pipeline(chunks, 2 * max(forest.depths()), bits / forest.rate, alpha)

    def ring_time(self, collective: str, nbytes: float, latency_s: float | None = None,
                  efficiency: float = 1.0) -> float:
        """Seconds of a ring all-gather ((p-1) steps of S per hop), reduce-scatter ((p-1)
        steps of S/p), a pipelined ring broadcast from rank 0 of `nbytes` per worker, in rank
        order, or an all-to-all (S/p from every worker to every other at once, (p-1)
        latencies)."""
        if collective not in ("allgather", "broadcast", "reducescatter", "alltoall"):
            raise ValueError(f"collective={collective!r} is not allowed: choose 'allgather', "
                             "'broadcast', 'reducescatter' or 'alltoall' (all-reduce: "
                             "allreduce_time)")
        p = self.workers
        if p == 1 or nbytes <= 0:
            return 0.0
        alpha = self.latency_s if latency_s is None else latency_s
        bits = 8.0 * nbytes / efficiency
        if collective == "alltoall":
            per_bit, hops = self.load([(i, j, 1.0 / p) for i in range(p) for j in range(p)
                                       if i != j])
            return (p - 1) * alpha * hops + bits * per_bit
        per_bit, hops = self.load([(i, (i + 1) % p, 1.0) for i in range(p)])
        steps = {"broadcast": bits, "allgather": (p - 1) * bits,
                 "reducescatter": (p - 1) * bits / p}[collective]
        return (p - 1) * alpha * hops + steps * per_bit

    def _ps_time(self, server: int, bits: float, chunks: int, alpha: float) -> float:
        flows = [f for w in range(self.workers) if w != server
                 for f in ((w, server, 1.0), (server, w, 1.0))]
        per_bit, hops = self.load(flows)
        return pipeline(chunks, 2, bits * per_bit, alpha * hops)

    def bounds(self) -> dict:
        """The forest's rate and the bounds on it, bit/s (NaN where not computed)."""
        n = self.workers
        forest = self.forest
        tight = n <= PARTITION_LIMIT and not self.has_nics  # the partition bound ignores NICs
        return {"forest_bps": forest.rate, "cut_bound_bps": forest.bound,
                "bound": "partition" if tight else "lp-dual",
                "two_way_cut_bps": two_way_cut(self.bandwidth_bps, "topology", self.egress_bps,
                                               self.ingress_bps) if n <= CUT_LIMIT
                else math.nan, "trees": len(forest.rates)}


def network_on(topology, algorithm: str = "forest", latency_s: float | None = None,
               efficiency=1.0, workers: int | None = None, bandwidth="10gbit"):
    """A performance-model `Network` on `topology` (anything `load_topology` takes, built for
    `workers` (default 8) and `bandwidth`) whose all-reduce runs `algorithm`, at `latency_s`
    per hop (None: the topology's); its `bandwidth_bps` is the algorithm's bus bandwidth: the
    per-worker bandwidth at which the ring formula 2(p-1)/p S/B takes as long for a large S.
    A file or matrix of another worker count than `workers` is a ValueError."""
    topo = load_topology(topology, 8 if workers is None else workers, bandwidth)
    p = topo.workers
    if workers is not None and workers != p:
        raise ValueError(f"workers={workers!r} is not allowed with topology={topo.name!r}: it "
                         f"has {p} workers (leave workers out to use them)")
    if p < 2:
        raise ValueError(f"topology={topo.name!r} is not allowed: it has {p} worker; a "
                         "network needs >= 2")
    big = 2.0 ** 40
    bus = 2 * (p - 1) / p * 8 * big / topo.allreduce_time(algorithm, big, 0.0,
                                                          chunk_bytes=big / 1e6)
    latency_s = topo.latency_s if latency_s is None else latency_s
    return Network(p, bus, latency_s, efficiency, topology=topo, algorithm=algorithm)


def two_racks(workers: int = 8, bandwidth="10gbit", thin=None) -> Topology:
    """Two racks of workers // 2 and the rest, each a full mesh at `bandwidth`, joined by one
    link (default a tenth of `bandwidth`) between worker 0 and the first worker of rack 2;
    dedicated links, no NICs."""
    fast = parse_rate(bandwidth)
    thin = fast / 10 if thin is None else parse_rate(thin, "thin")
    check_int(workers, "workers", 2)
    half = workers // 2
    b = np.zeros((workers, workers))
    b[:half, :half] = fast
    b[half:, half:] = fast
    b[0, half] = b[half, 0] = thin
    return Topology(b, name="two-racks")


def random_mesh(workers: int = 8, bandwidth="10gbit", seed: int = 0) -> Topology:
    """A full mesh whose directed links are uniform in [bandwidth / 10, bandwidth]; dedicated
    links, no NICs."""
    check_int(workers, "workers", 1)
    fast = parse_rate(bandwidth)
    b = np.random.default_rng(seed).uniform(fast / 10, fast, (workers, workers))
    return Topology(b, name=f"random:{seed}")


def homogeneous(workers: int = 8, bandwidth="10gbit") -> Topology:
    """A switched cluster: every worker one NIC of `bandwidth` each way, on a full mesh of
    links at `bandwidth` (the switch adds no limit)."""
    check_int(workers, "workers", 1)
    fast = parse_rate(bandwidth)
    return Topology(np.full((workers, workers), fast), name="homogeneous", egress_bps=fast,
                    ingress_bps=fast)


def load_topology(spec, workers: int = 8, bandwidth="10gbit") -> Topology:
    """A Topology from `spec`: a Topology, a matrix, a built-in name (`BUILTINS`, `random`
    with an optional `:SEED`) built for `workers` and `bandwidth`, or a .json / .csv file."""
    if isinstance(spec, Topology):
        return spec
    if not isinstance(spec, (str, Path)):
        return Topology(spec)
    text = str(spec)
    if text.partition(":")[0] in BUILTINS:
        return _builtin(text, workers, parse_rate(bandwidth))
    return _from_file(text)


@lru_cache(maxsize=64)
def _builtin(text: str, workers: int, bandwidth: float) -> Topology:
    """A built-in topology, packed once per (name, workers, bandwidth)."""
    name, _, arg = text.partition(":")
    if name == "two-racks" and not arg:
        return two_racks(workers, bandwidth)
    if name == "homogeneous" and not arg:
        return homogeneous(workers, bandwidth)
    if name == "random":
        try:
            seed = int(arg) if arg else 0
        except ValueError:
            raise ValueError(f"topology={text!r} is not allowed: write random:SEED with an "
                             "integer seed") from None
        return random_mesh(workers, bandwidth, seed)
    raise _unknown(text)


def _unknown(text: str) -> ValueError:
    return ValueError(f"topology={text!r} is not allowed: give one of "
                      f"{', '.join(map(repr, BUILTINS))} (random:SEED for another seed), "
                      "or an existing .json / .csv file with a bandwidth matrix")


def _from_file(text: str) -> Topology:
    path = Path(text)
    if path.suffix.lower() not in (".json", ".csv") or not path.is_file():
        raise _unknown(text)
    latency, nics = 0.0, {}
    if not path.read_bytes().strip():
        raise ValueError(f"topology={text!r} is not allowed: the file is empty; it must hold "
                         "a bandwidth matrix")
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"topology={text!r} is not allowed: the file is not valid JSON "
                             f"({e})") from None
        if isinstance(data, dict):
            latency = data.get("latency_s", 0.0)
            for key in ("egress_bps", "ingress_bps"):
                if data.get(key) is not None:
                    value = data[key]
                    rows = _rates([value if isinstance(value, list) else [value]], text)
                    nics[key] = rows[0]
            data = data.get("bandwidth_bps")
    else:
        try:
            data = pd.read_csv(path, header=None, dtype=str).to_numpy().tolist()
        except (ValueError, UnicodeDecodeError) as e:  # pandas' ParserError is a ValueError
            raise ValueError(f"topology={text!r} is not allowed: the file is not a CSV "
                             f"matrix ({str(e).strip()})") from None
    rates = _rates(data, text)
    try:
        return Topology(rates, latency, name=path.stem, **nics)
    except (ValueError, TypeError) as e:
        raise ValueError(f"topology={text!r} (the file): {e}") from None


def _rates(rows, option: str):
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise ValueError(f"topology={option!r} is not allowed: the file must hold a matrix "
                         "(a list of rows)")

    def rate(value):
        if not isinstance(value, str):
            return value
        try:
            return float(value.strip())
        except ValueError:
            pass
        try:
            return parse_rate(value.strip(), "topology")
        except ValueError:
            raise ValueError(f"topology={option!r} is not allowed: the file holds {value!r}, "
                             "not a rate (bit/s, or with a unit: 10gbit, 100mbit)") from None

    return [[rate(v) for v in row] for row in rows]


def default_suite(seeds: int = 5) -> list[str]:
    """The built-in comparison: two racks, random meshes of seeds 0..seeds-1, homogeneous."""
    return ["two-racks", *[f"random:{s}" for s in range(seeds)], "homogeneous"]


def compare(topologies, nbytes: float, algorithms=ALGORITHMS,
            chunk_bytes: float = DEFAULT_CHUNK_BYTES) -> pd.DataFrame:
    """One row per topology: the forest's rate against its bounds, and the all-reduce time of
    `nbytes` per worker by each algorithm (columns `<algorithm>_s`) with forest's speedups."""
    rows = []
    for topo in topologies:
        topo = load_topology(topo)
        row = {"topology": topo.name, "workers": topo.workers, "nbytes": nbytes,
               **topo.bounds()}
        row["forest_vs_cut"] = row["forest_bps"] / row["cut_bound_bps"]
        row["forest_vs_two_way_cut"] = row["forest_bps"] / row["two_way_cut_bps"]
        for a in algorithms:
            row[f"{a}_s"] = topo.allreduce_time(a, nbytes, chunk_bytes=chunk_bytes)
        for a in algorithms:
            if a != "forest" and "forest" in algorithms:
                row[f"forest_speedup_vs_{a}"] = row[f"{a}_s"] / row["forest_s"]
        rows.append(row)
    return pd.DataFrame(rows)
