"""What one collective costs on a cluster of one or two tiers (the alpha-beta model), the one
set of formulas that the evaluation model (`Network.cost`), the FSDP timeline and the `auto`
hook's per-bucket prices share.

A cluster (`Tiers`): N nodes of G GPUs (p = N G ranks, nodes contiguous in rank order); across
nodes a per-step latency alpha and R NICs (rails) per node, each of B bytes/s (effective: line
rate x efficiency), shared by the node's GPUs: a node moves at most R B each way to the other
nodes; inside a node a latency alpha_i and b bytes/s per GPU each way (NVLink, PCIe). A GPU's
traffic to other nodes does not count against b (it goes to the NIC). With S the bytes of one
rank's payload, add(n) the time of one element-wise add of n bytes (0 if not priced), and a
ring step of c bytes ``h(c) = max(alpha + c / (R B), alpha_i + c / b)`` (a term only for a
tier that exists: N > 1, G > 1; a ring over the ranks crosses each node's NICs once per
direction, several rings spread over the rails):

* ring all-reduce: ``2(p-1) h(S/p) + (p-1) add(S/p)``;
* hierarchical all-reduce (reduce-scatter inside the node, an all-reduce of S/G across the
  nodes per local rank, on the rails, all-gather inside): ``2(G-1)(alpha_i + S/(G b)) +
  2(N-1)(alpha + S/(N R B)) + (G-1) add(S/G) + (N-1) add(S/(G N))``;
* tree all-reduce (NCCL's: a chain through each node's GPUs, a double binary tree across the
  nodes, each tree carrying S/2, reduce and broadcast pipelined in chunks of 64 KiB):
  ``pipeline(ceil(S / 64 KiB), 2(depth + G - 1), T, max alpha) + add(S)`` with depth =
  floor(log2 N), T = max(u_N S / (R B), u_G S / b), u_N the most any node sends (or
  receives) per byte through both trees (`double_tree_units`: 2 for N >= 5, 1.5 for 3-4, 1
  for 2), u_G = 2 for G >= 3 (a middle GPU sends S to each neighbour), 1 for G = 2; every
  stage at the larger latency of the tiers (an upper bound on the latency term);
* ring all-gather: ``(p-1) h(S)``: each node's NICs carry p-1 payloads, its own node's G-1
  among them (they go round the ring); hierarchical: ``(N-1)(alpha + G S/(R B)) +
  (G-1)(alpha_i + N S/b)`` (across nodes per local rank, so a node's NICs carry every other
  node's payloads once, p-G, then inside);
* ring reduce-scatter (each rank keeps S/p): ``(p-1) h(S/p) + (p-1) add(S/p)``; hierarchical:
  ``(G-1)(alpha_i + S/(G b)) + (N-1)(alpha + S/(N R B)) + (G-1) add(S/G) + (N-1) add(S/(G N))``;
* all-to-all (S/p to every rank): ``(p-G) alpha + (G-1) alpha_i + max(G(p-G) S/p / (R B),
  (G-1) S/p / b)``;
* pipelined (chain) broadcast: ``(N-1) alpha + (p-N) alpha_i + S / min(R B, b)``.

``auto`` takes the cheapest of the algorithms NCCL runs for the collective, as its tuner picks
by its own model: ring or tree for an all-reduce, the ring for the others (NCCL has no
hierarchical all-reduce or all-gather: Horovod's hierarchical all-reduce is one, and is
priced only when named). With one GPU per node and one rail every formula is the flat ring's
of a switched network: all-reduce ``2(p-1)(alpha + S/(pB))``, all-gather ``(p-1)(alpha +
S/B)``, broadcast ``(p-1) alpha + S/B``, reduce-scatter and all-to-all ``(p-1)(alpha +
S/(pB))`` (`ring_factors`: the latency steps and bytes factor that `auto` and
`fit_collectives` fit measurements with).

Validation: the flat formulas are validated against measurement on the testbed (docs/evaluation.md,
"Testbed and validation"); each two-tier formula agrees with the link-matrix simulator
(`evaluation.model.tiers`) on the same cluster (tests/test_collectives.py); the ring's
two-tier step and the hierarchical hook's phases were measured on the two-tier testbed (2
nodes x 2 ranks, gloo; docs/evaluation.md, "Two tiers on one machine"), not on GPU hardware.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ..checks import check_choice, check_int

COLLECTIVES = ("allreduce", "allgather", "broadcast", "reducescatter", "alltoall")
#: How a collective runs on the cluster; "auto": the cheapest for the payload.
ALGORITHMS = ("ring", "hierarchical", "tree", "auto")
#: The chunk a pipelined tree moves per step (the link-matrix simulator's default too).
TREE_CHUNK_BYTES = 1 << 16
#: The algorithms each collective can run.
RUNS = {"allreduce": ("ring", "hierarchical", "tree"),
        "allgather": ("ring", "hierarchical"),
        "reducescatter": ("ring", "hierarchical"),
        "alltoall": ("ring",), "broadcast": ("ring",)}
#: Those NCCL runs, which "auto" picks among.
NCCL = {"allreduce": ("ring", "tree")}

Add = Callable[[float], float]


@dataclass(frozen=True)
class Tiers:
    """N `nodes` of `gpus_per_node`: across nodes `alpha` s per step and `rails` NICs per node
    of `bytes_per_s` each (effective); inside a node `intra_alpha` and `intra_bytes_per_s` per
    GPU (module docstring). Rates may be inf (free)."""

    nodes: int
    gpus_per_node: int = 1
    alpha: float = 0.0
    bytes_per_s: float = math.inf
    rails: int = 1
    intra_alpha: float = 0.0
    intra_bytes_per_s: float = math.inf

    def __post_init__(self):
        check_int(self.nodes, "nodes", 1)
        check_int(self.gpus_per_node, "gpus_per_node", 1)
        check_int(self.rails, "rails", 1)
        for option in ("alpha", "intra_alpha"):
            if not getattr(self, option) >= 0:
                raise ValueError(f"{option}={getattr(self, option)!r} is not allowed: it must "
                                 "be >= 0")
        for option in ("bytes_per_s", "intra_bytes_per_s"):
            if not getattr(self, option) > 0:
                raise ValueError(f"{option}={getattr(self, option)!r} is not allowed: it must "
                                 "be > 0")

    @property
    def workers(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def node_bytes_per_s(self) -> float:
        """A node's NICs together, each way."""
        return self.rails * self.bytes_per_s

    def ring_step(self, nbytes: float) -> float:
        """One step of a ring over all ranks moving `nbytes` per hop: its slowest hop."""
        hops = []
        if self.nodes > 1:
            hops.append(self.alpha + nbytes / self.node_bytes_per_s)
        if self.gpus_per_node > 1:
            hops.append(self.intra_alpha + nbytes / self.intra_bytes_per_s)
        return max(hops)

    def slowest_hop(self) -> tuple[float, float]:
        """(latency, bytes/s) of a ring's slowest hop in each: the tier-blind ring that
        formulas outside this module (block-sparse) take."""
        tiers = ([(self.alpha, self.node_bytes_per_s)] if self.nodes > 1 else []) + (
            [(self.intra_alpha, self.intra_bytes_per_s)] if self.gpus_per_node > 1 else [])
        return max(a for a, _ in tiers), min(b for _, b in tiers)


def ring_factors(collective: str, workers: int) -> tuple[float, float]:
    """(latency steps, bytes factor) of `collective` on a flat ring of `workers`: its seconds
    are ``steps * alpha + factor * S / B`` (reductions aside)."""
    check_choice(collective, "collective", COLLECTIVES)
    p = workers
    if collective == "allreduce":
        return 2 * (p - 1), 2 * (p - 1) / p
    if collective == "allgather":
        return p - 1, float(p - 1)
    if collective == "broadcast":
        return p - 1, 1.0
    return p - 1, (p - 1) / p


def cost(collective: str, tiers: Tiers, nbytes: float, algorithm: str = "ring",
         add: Add | None = None) -> float:
    """Seconds of `collective` of `nbytes` per rank on `tiers` by `algorithm` (module
    docstring; an algorithm a collective does not have, e.g. tree for an all-gather, runs the
    ring); `add(n)`: seconds of one element-wise add of n bytes (None: free)."""
    check_choice(collective, "collective", COLLECTIVES)
    check_choice(algorithm, "algorithm", ALGORITHMS)
    if tiers.workers == 1 or nbytes <= 0:
        return 0.0
    add = add or (lambda n: 0.0)
    if algorithm == "auto":
        return min(_FORMULAS[collective, a](tiers, nbytes, add)
                   for a in NCCL.get(collective, ("ring",)))
    runs = RUNS[collective]
    return _FORMULAS[collective, algorithm if algorithm in runs else "ring"](tiers, nbytes, add)


def choose(collective: str, tiers: Tiers, nbytes: float, add: Add | None = None) -> str:
    """The algorithm `auto` runs `collective` of `nbytes` with: NCCL's cheapest."""
    return min(NCCL.get(collective, ("ring",)),
               key=lambda a: cost(collective, tiers, nbytes, a, add))


def _ring_allreduce(t: Tiers, s: float, add: Add) -> float:
    p = t.workers
    chunk = s / p
    return 2 * (p - 1) * t.ring_step(chunk) + (p - 1) * add(chunk)


def _ring_allgather(t: Tiers, s: float, add: Add) -> float:
    return (t.workers - 1) * t.ring_step(s)


def _ring_reducescatter(t: Tiers, s: float, add: Add) -> float:
    p = t.workers
    chunk = s / p
    return (p - 1) * t.ring_step(chunk) + (p - 1) * add(chunk)


def _alltoall(t: Tiers, s: float, add: Add) -> float:
    n, g, p = t.nodes, t.gpus_per_node, t.workers
    latency = (p - g) * t.alpha + (g - 1) * t.intra_alpha
    inter = g * (p - g) * s / p / t.node_bytes_per_s if n > 1 else 0.0
    intra = (g - 1) * s / p / t.intra_bytes_per_s if g > 1 else 0.0
    return latency + max(inter, intra)


def _broadcast(t: Tiers, s: float, add: Add) -> float:
    n, p = t.nodes, t.workers
    rates = ([t.node_bytes_per_s] if n > 1 else []) + (
        [t.intra_bytes_per_s] if t.gpus_per_node > 1 else [])
    return (n - 1) * t.alpha + (p - n) * t.intra_alpha + s / min(rates)


def _intra(t: Tiers, steps: int, nbytes: float) -> float:
    """`steps` ring steps inside every node (all nodes at once) of `nbytes` per hop."""
    return steps * (t.intra_alpha + nbytes / t.intra_bytes_per_s) if steps else 0.0


def _inter(t: Tiers, steps: int, node_bytes: float) -> float:
    """`steps` ring steps across the nodes, one ring per local rank, `node_bytes` leaving
    each node per step (all its rings together) through its NICs."""
    return steps * (t.alpha + node_bytes / t.node_bytes_per_s) if steps else 0.0


def _hier_allreduce(t: Tiers, s: float, add: Add) -> float:
    n, g = t.nodes, t.gpus_per_node
    return (2 * _intra(t, g - 1, s / g) + _inter(t, 2 * (n - 1), s / n)
            + (g - 1) * add(s / g) + (n - 1) * add(s / (g * n)))


def _hier_reducescatter(t: Tiers, s: float, add: Add) -> float:
    n, g = t.nodes, t.gpus_per_node
    return (_intra(t, g - 1, s / g) + _inter(t, n - 1, s / n)
            + (g - 1) * add(s / g) + (n - 1) * add(s / (g * n)))


def _hier_allgather(t: Tiers, s: float, add: Add) -> float:
    n, g = t.nodes, t.gpus_per_node
    return _inter(t, n - 1, g * s) + _intra(t, g - 1, n * s)


def double_tree_units(nodes: int) -> float:
    """The most bytes any node sends (= receives) per byte all-reduced by a double binary
    tree over `nodes` (`tree_edges`), reduce and broadcast together."""
    units = [0.0] * nodes
    for child, parent in tree_edges(nodes):
        units[child] += 0.5  # reduce: half the payload up; broadcast: half down
        units[parent] += 0.5
    return max(units)


def tree_edges(nodes: int) -> list[tuple[int, int]]:
    """(child, parent) of both trees of NCCL's double binary tree over `nodes`: a binary tree
    in heap order and its mirror (node i as nodes - 1 - i), so no node is inside both."""
    heap = [(i, (i - 1) // 2) for i in range(1, nodes)]
    return heap + [(nodes - 1 - c, nodes - 1 - r) for c, r in heap]


def tree_depth(nodes: int) -> int:
    return int(math.log2(nodes)) if nodes > 1 else 0


def tree_bandwidth_seconds(t: Tiers, s: float) -> float:
    """T of the tree all-reduce: its busiest node's NICs or GPU."""
    g = t.gpus_per_node
    inter = double_tree_units(t.nodes) * s / t.node_bytes_per_s if t.nodes > 1 else 0.0
    intra = (1 if g == 2 else 2) * s / t.intra_bytes_per_s if g > 1 else 0.0
    return max(inter, intra)


def _tree_allreduce(t: Tiers, s: float, add: Add) -> float:
    stages = 2 * (tree_depth(t.nodes) + t.gpus_per_node - 1)
    alpha = max(([t.alpha] if t.nodes > 1 else []) + (
        [t.intra_alpha] if t.gpus_per_node > 1 else []))
    chunks = max(1, math.ceil(s / TREE_CHUNK_BYTES))
    return pipeline(chunks, stages, tree_bandwidth_seconds(t, s), alpha) + add(s)


def pipeline(chunks: int, stages: int, seconds: float, alpha: float) -> float:
    """A pipeline of `stages` hops moving chunks that take `seconds` in all at its bottleneck:
    (C + stages - 1) steps of one chunk's time plus the per-hop latency, with the number of
    chunks C that minimises it (sqrt((stages - 1) seconds / alpha)), at most `chunks`."""
    best = chunks if alpha <= 0 else math.sqrt((stages - 1) * seconds / alpha)
    c = min(max(1, round(best)), chunks)
    return (c + stages - 1) * (seconds / c + alpha)


_FORMULAS = {("allreduce", "ring"): _ring_allreduce,
             ("allreduce", "hierarchical"): _hier_allreduce,
             ("allreduce", "tree"): _tree_allreduce,
             ("allgather", "ring"): _ring_allgather,
             ("allgather", "hierarchical"): _hier_allgather,
             ("reducescatter", "ring"): _ring_reducescatter,
             ("reducescatter", "hierarchical"): _hier_reducescatter,
             ("alltoall", "ring"): _alltoall,
             ("broadcast", "ring"): _broadcast}
