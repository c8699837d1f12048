"""A cluster of nodes of GPUs as a link matrix (`two_tier`), and NCCL's collectives on it by
the link-matrix simulator (`simulate`): what `collectives.costs`' two-tier formulas are
checked against (tests/test_collectives.py).

The matrix: worker r = node * G + k (G GPUs per node, nodes contiguous); GPUs of a node joined
by links at the intra bandwidth, and each GPU's traffic inside its node capped at it each way
(an NVSwitch port); GPUs of different nodes by links at the node's NIC rate, all the node's
traffic to other nodes sharing its NICs (`Topology.node_bps`: rails x one NIC's rate).
Collectives, as fluid flows (`Topology.load`), every hop at the topology's one latency:

* ``ring``: one ring over the workers in rank order (`Topology.allreduce_time`,
  `Topology.ring_time`; all-to-all: every pair at once);
* ``hierarchical``: phases one after the other, each a ring per node (reduce-scatter or
  all-gather inside: (G-1) steps) or a ring per local rank across the nodes ((N-1) steps of
  a reduce-scatter or all-gather, 2(N-1) of an all-reduce);
* ``tree`` (all-reduce): NCCL's double binary tree across the nodes (`costs.tree_edges`; tree
  0 through each node's GPU 0, tree 1 through its GPU G-1), each tree carrying half of the
  payload, reduce and broadcast at once, and a chain through each node's GPUs per tree,
  pipelined in 64 KiB chunks (`costs.pipeline`).
"""
from __future__ import annotations

import math

import numpy as np

from ...checks import check_choice, check_int
from ...collectives.costs import TREE_CHUNK_BYTES, pipeline, tree_depth, tree_edges
from ..common.units import parse_rate
from .topology import Topology


def two_tier(nodes: int, gpus_per_node: int, node_bps, intra_bps=None,
             latency_s: float = 0.0) -> Topology:
    """`nodes` x `gpus_per_node` workers; `node_bps`: a node's NICs together (bit/s, each
    way); `intra_bps`: each GPU's bandwidth inside its node (needed with several GPUs, at
    least `node_bps`: a slower one would send traffic inside a node around through others)."""
    check_int(nodes, "nodes", 1)
    check_int(gpus_per_node, "gpus_per_node", 1)
    if nodes * gpus_per_node < 2:
        raise ValueError("nodes=1, gpus_per_node=1 is not allowed: a cluster needs >= 2 GPUs")
    nic = parse_rate(node_bps, "node_bps")
    node_of = np.repeat(np.arange(nodes), gpus_per_node)
    same = node_of[:, None] == node_of[None, :]
    intra = None
    if gpus_per_node > 1:
        intra = parse_rate(intra_bps, "intra_bps") if intra_bps is not None else None
        if intra is None or intra < nic:
            raise ValueError(f"intra_bps={intra_bps!r} is not allowed: with several GPUs per "
                             f"node give a rate >= node_bps ({nic:g} bit/s)")
    matrix = np.where(same, intra or 0.0, nic)
    np.fill_diagonal(matrix, 0.0)
    return Topology(matrix, latency_s, name=f"{nodes}x{gpus_per_node}", egress_bps=intra,
                    ingress_bps=intra, node_of=node_of, node_bps=nic)


def simulate(topology: Topology, collective: str, algorithm: str, nbytes: float,
             efficiency: float = 1.0) -> float:
    """Seconds of `collective` of `nbytes` per worker by `algorithm` (module docstring) on a
    `two_tier` topology, its links at `efficiency` of their capacity."""
    check_choice(algorithm, "algorithm", ("ring", "hierarchical", "tree"))
    if topology.node_of is None:
        raise ValueError("topology is not allowed: it has no nodes (build it with two_tier)")
    p = topology.workers
    if p == 1 or nbytes <= 0:
        return 0.0
    if algorithm == "ring":
        if collective == "allreduce":
            return topology.allreduce_time("ring", nbytes, efficiency=efficiency)
        return topology.ring_time(collective, nbytes, efficiency=efficiency)
    nodes = int(topology.node_of.max()) + 1
    g = p // nodes
    bits = 8.0 * nbytes / efficiency
    if algorithm == "tree":
        check_choice(collective, "collective (tree)", ("allreduce",))
        return _tree(topology, nodes, g, bits, nbytes)
    check_choice(collective, "collective (hierarchical)",
                 ("allreduce", "allgather", "reducescatter"))
    rank = lambda n, k: n * g + k  # noqa: E731
    inside = [(rank(n, k), rank(n, (k + 1) % g), 1.0) for n in range(nodes) for k in range(g)]
    across = [(rank(n, k), rank((n + 1) % nodes, k), 1.0)
              for n in range(nodes) for k in range(g)]

    def phase(flows, steps, hop_bits):
        if steps == 0 or not flows:
            return 0.0
        per_bit, hops = topology.load(flows)
        return steps * (topology.latency_s * hops + hop_bits * per_bit)

    if collective == "allreduce":
        return (2 * phase(inside, g - 1, bits / g)
                + phase(across, 2 * (nodes - 1), bits / (g * nodes)))
    if collective == "reducescatter":
        return phase(inside, g - 1, bits / g) + phase(across, nodes - 1, bits / (g * nodes))
    return phase(across, nodes - 1, bits) + phase(inside, g - 1, nodes * bits)


def _tree(topology: Topology, nodes: int, g: int, bits: float, nbytes: float) -> float:
    edges = tree_edges(nodes)
    heads = [0] * (nodes - 1) + [g - 1] * (nodes - 1)  # tree 0's edges, then tree 1's
    flows = []
    for (child, parent), k in zip(edges, heads):
        a, b = child * g + k, parent * g + k
        flows += [(a, b, 0.5), (b, a, 0.5)]
    for n in range(nodes):
        for k in range(g - 1):
            a, b = n * g + k, n * g + k + 1
            flows += [(a, b, 1.0), (b, a, 1.0)]  # both trees' chains, half each
    per_bit, hops = topology.load(flows)
    stages = 2 * (tree_depth(nodes) + g - 1)
    chunks = max(1, math.ceil(nbytes / TREE_CHUNK_BYTES))
    return pipeline(chunks, stages, bits * per_bit, topology.latency_s * hops)
