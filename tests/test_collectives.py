"""The collective cost formulas (`gradcomp.collectives.costs`): the flat ring's on one GPU per
node, and every two-tier formula against the link-matrix simulator on the same cluster
(`evaluation.model.tiers`)."""
import math

import pytest

from gradcomp.collectives import costs
from gradcomp.collectives.costs import Tiers, double_tree_units, ring_factors
from gradcomp.evaluation.model.network import Network
from gradcomp.evaluation.model.tiers import simulate, two_tier
from gradcomp.evaluation.model.topology import homogeneous

RUNS = [("allreduce", "ring"), ("allreduce", "hierarchical"), ("allreduce", "tree"),
        ("allgather", "ring"), ("allgather", "hierarchical"), ("reducescatter", "ring"),
        ("reducescatter", "hierarchical"), ("alltoall", "ring"), ("broadcast", "ring")]
#: (nodes, GPUs per node, rails): one node, one GPU per node, multi-rail, odd counts.
CLUSTERS = [(4, 8, 1), (2, 4, 4), (8, 1, 2), (1, 8, 1), (3, 4, 2), (5, 2, 1), (4, 3, 1),
            (2, 1, 1), (16, 8, 4)]
NIC, INTRA, LATENCY, EFFICIENCY = 100e9, 2400e9, 5e-6, 0.8


def cluster(nodes, gpus, rails, algorithm):
    return Network(nodes * gpus, NIC, LATENCY, EFFICIENCY, gpus_per_node=gpus, rails=rails,
                   intra_bandwidth_bps=INTRA if gpus > 1 else None, intra_latency_s=LATENCY,
                   intra_efficiency=EFFICIENCY, algorithm=algorithm)


@pytest.mark.parametrize("shape", CLUSTERS, ids=lambda c: "x".join(map(str, c)))
def test_every_two_tier_formula_agrees_with_the_link_matrix_simulator(shape):
    nodes, gpus, rails = shape
    topo = two_tier(nodes, gpus, rails * NIC, INTRA if gpus > 1 else None, LATENCY)
    for nbytes in (64 * 2 ** 20, 1 * 2 ** 30):  # bandwidth-bound
        for collective, algorithm in RUNS:
            formula = cluster(nodes, gpus, rails, algorithm).cost(collective, nbytes)
            simulated = simulate(topo, collective, algorithm, nbytes, EFFICIENCY)
            assert formula == pytest.approx(simulated, rel=0.01), (collective, algorithm)


def test_the_simulator_sees_the_shared_nic():
    # 2 nodes x 4 GPUs on one 100 Gbit/s NIC each: a ring crosses each node's NIC once per
    # direction (2(p-1)/p S through it), all-to-all sends 4 x 4 x S/8 out of each node.
    topo = two_tier(2, 4, "100gbit", "2400gbit")
    s = 1e9
    assert simulate(topo, "allreduce", "ring", s) == pytest.approx(2 * 7 / 8 * s / 12.5e9)
    assert simulate(topo, "alltoall", "ring", s) == pytest.approx(16 * s / 8 / 12.5e9)
    # hierarchical all-gather: a node's NIC carries each other node's 4 payloads once
    assert simulate(topo, "allgather", "hierarchical", s) == pytest.approx(
        4 * s / 12.5e9 + 3 * 2 * s / 300e9)


def test_one_gpu_per_node_is_the_flat_ring():
    p, alpha, b, s = 8, 3e-5, 1.25e9, 5e7
    flat = Tiers(p, alpha=alpha, bytes_per_s=b)
    for collective in costs.COLLECTIVES:
        steps, factor = ring_factors(collective, p)
        assert costs.cost(collective, flat, s) == pytest.approx(steps * alpha + factor * s / b)
    assert ring_factors("allreduce", p) == (14, 14 / 8)
    # and the switched cluster of the old simulator prices ring collectives alike
    net = Network(p, "10gbit", algorithm="ring")
    for collective in ("allgather", "broadcast", "reducescatter", "alltoall"):
        assert net.cost(collective, s) == pytest.approx(
            homogeneous(p, "10gbit").ring_time(collective, s))


def test_double_binary_tree():
    assert costs.tree_edges(4) == [(1, 0), (2, 0), (3, 1), (2, 3), (1, 3), (0, 2)]
    assert [double_tree_units(n) for n in (1, 2, 3, 4, 8)] == [0.0, 1.0, 1.5, 1.5, 2.0]


def test_auto_takes_the_cheapest_tree_when_small_and_not_when_large():
    net = Tiers(16, 8, alpha=20e-6, bytes_per_s=12.5e9, rails=4, intra_alpha=2e-6,
                intra_bytes_per_s=300e9)
    assert costs.choose("allreduce", net, 4096) == "tree"  # latency-bound
    assert costs.choose("allreduce", net, 2 ** 30) == "ring"
    for s in (4096, 2 ** 20, 2 ** 30):  # NCCL's choices: no hierarchical all-reduce
        assert costs.cost("allreduce", net, s, "auto") == min(
            costs.cost("allreduce", net, s, a) for a in ("ring", "tree"))
        assert costs.cost("allgather", net, s, "auto") == costs.cost("allgather", net, s)
    # a ring over 128 GPUs pays 254 latencies; the tree 2(4 + 7)
    assert costs.cost("allreduce", net, 8, "ring") > 254 * 2e-6
    assert costs.cost("allreduce", net, 8, "tree") < 30 * 20e-6


def test_reductions_are_priced_per_tier():
    net = Tiers(2, 4, bytes_per_s=math.inf, intra_bytes_per_s=math.inf)
    add = lambda n: n * 1e-9  # noqa: E731
    s = 8e6
    assert costs.cost("allreduce", net, s, "ring", add) == pytest.approx(7 * 1e6 * 1e-9)
    assert costs.cost("allreduce", net, s, "hierarchical", add) == pytest.approx(
        3 * 2e6 * 1e-9 + 1 * 1e6 * 1e-9)


def test_tiers_reject_bad_values():
    for bad in ({"nodes": 0}, {"nodes": 2, "rails": 0}, {"nodes": 2, "alpha": -1},
                {"nodes": 2, "bytes_per_s": 0}):
        with pytest.raises(ValueError, match=next(iter(bad)) if len(bad) == 1
                           else list(bad)[1]):
            Tiers(**bad)
    with pytest.raises(ValueError, match="algorithm='bus'"):
        costs.cost("allreduce", Tiers(2), 10, "bus")
    with pytest.raises(ValueError, match="intra_bps"):
        two_tier(2, 4, "100gbit", "10gbit")  # slower inside than out: not a two-tier box
