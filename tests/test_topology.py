"""The topology simulator (ring, tree, parameter server, forest), the built-in and file
topologies, and the performance model, what-if and advice on a topology."""
import json

import numpy as np
import pytest

from gradcomp.evaluation.analyses.advise import advise, verdict
from gradcomp.evaluation.analyses.whatif import required_compression, scenario
from gradcomp.evaluation.model.network import Network
from gradcomp.evaluation.model.timeline import predict
from gradcomp.evaluation.model.topology import (Topology, compare, default_suite, homogeneous,
                                                load_topology, network_on, random_mesh, two_racks)
from gradcomp.evaluation.report import plots

D = 100e6  # bytes per worker
BIG_CHUNK = D  # one chunk: no pipeline


def test_forest_reaches_the_cut_bound_and_beats_ring_on_heterogeneous_topologies():
    table = compare(["two-racks", *[f"random:{s}" for s in range(5)]], D)
    assert (table["bound"] == "partition").all()
    assert (table["forest_vs_cut"] >= 0.95).all()
    assert (table["forest_bps"] <= table["cut_bound_bps"] * (1 + 1e-9)).all()
    assert (table["forest_s"] < table["ring_s"]).all()
    assert (table["forest_s"] < table[["tree_s", "ps_s"]].min(axis=1)).all()


def test_two_racks_forest_runs_at_the_thin_link_and_ring_at_p_over_2_p_minus_1_of_it():
    topo = two_racks(8, "10gbit", "1gbit")
    ring = topo.allreduce_time("ring", D)
    assert ring == pytest.approx(2 * 7 / 8 * D * 8 / 1e9)
    assert topo.allreduce_time("forest", D, chunk_bytes=D / 1e4) == pytest.approx(
        D * 8 / 1e9, rel=1e-3)


def test_full_mesh_of_dedicated_links_forest_is_p_minus_1_rings():
    # Without NICs a single ring uses p of the p(p-1) links; the forest packs p/2 trees'
    # worth of all.
    for p in (2, 4, 6):
        topo = Topology(np.full((p, p), 8e9))
        ring = topo.allreduce_time("ring", D)
        assert ring == pytest.approx(2 * (p - 1) / p * D / 1e9)
        forest = topo.allreduce_time("forest", D, chunk_bytes=D / 1e4)
        assert ring / forest == pytest.approx(p - 1, rel=5e-3)


def test_switched_homogeneous_cluster_agrees_with_the_plain_model():
    # One NIC of B per worker: ring 2(p-1)/p S/B, forest rate p B / (2(p-1)), the same time;
    # the server's NIC carries (p-1) S each way, the tree's inner workers 3 S.
    for p in (2, 4, 8):
        topo = homogeneous(p, "8gbit")
        ring = topo.allreduce_time("ring", D)
        assert ring == pytest.approx(2 * (p - 1) / p * D / 1e9)
        assert topo.forest.rate == pytest.approx(p * 8e9 / (2 * (p - 1)), rel=2e-3)
        assert topo.allreduce_time("forest", D, chunk_bytes=D / 1e4) == pytest.approx(
            ring, rel=5e-3)
        bounds = topo.bounds()
        assert bounds["bound"] == "lp-dual"
        assert bounds["forest_bps"] <= bounds["cut_bound_bps"] * (1 + 1e-9)
        assert bounds["two_way_cut_bps"] == 8e9
        if p > 2:
            assert topo.allreduce_time("ps", D) > ring
            assert topo.allreduce_time("tree", D) > ring
    net = network_on("homogeneous", "ring", workers=8, bandwidth="1gbit")
    assert net.bandwidth_bps == pytest.approx(1e9)
    plain = predict("resnet50", Network(8, "1gbit"), "none").t_iter_s
    for algorithm, rel in (("ring", 2e-3), ("forest", 5e-3)):
        on = predict("resnet50", network_on("homogeneous", algorithm, workers=8,
                                            bandwidth="1gbit"), "none").t_iter_s
        assert on == pytest.approx(plain, rel=rel)
    ps = predict("resnet50", network_on("homogeneous", "ps", workers=8, bandwidth="1gbit"),
                 "none").t_iter_s
    assert ps > 2 * plain


def test_routes_are_widest_then_fewest_hops():
    # Sparse symmetric meshes, some with few distinct capacities (many equally wide paths).
    rng = np.random.default_rng(0)
    checked = 0
    for k in range(30):
        n = 8 + k % 3
        b = rng.uniform(1, 10, (n, n)) if k % 2 else rng.integers(1, 4, (n, n)).astype(float)
        b[rng.random((n, n)) < (0.3 if k % 2 else 0.5)] = 0
        b = np.minimum(b, b.T)
        try:
            topo = Topology(b)
        except ValueError:  # not connected
            continue
        width, hops = topo.widest
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                links = topo.route(i, j)
                assert len(links) == hops[i, j]
                assert links[0][0] == i and links[-1][1] == j
                assert all(a[1] == c[0] for a, c in zip(links, links[1:]))
                assert min(topo.bandwidth_bps[a, c] for a, c in links) == width[i, j]
                # No path as wide with fewer hops: BFS over the links >= width.
                reach, frontier, steps = {i}, {i}, 0
                while j not in reach:
                    frontier = {int(c) for a in frontier
                                for c in np.flatnonzero(b[a] >= width[i, j])} - reach
                    reach |= frontier
                    steps += 1
                assert steps == hops[i, j]
                checked += 1
    assert checked > 100


def test_bidirectional_ring_forest_equals_ring_all_reduce_both_ways():
    # On a ring of equal links the forest uses both directions: exactly two rings' rate.
    p, b = 6, 1e9
    matrix = np.zeros((p, p))
    for i in range(p):
        matrix[i, (i + 1) % p] = matrix[(i + 1) % p, i] = b
    topo = Topology(matrix)
    assert topo.forest.rate == pytest.approx(p * b / (p - 1), rel=1e-6)
    ring = topo.allreduce_time("ring", D)
    assert ring / topo.allreduce_time("forest", D, chunk_bytes=D / 1e5) == pytest.approx(
        2, rel=1e-3)


def test_tree_and_parameter_server_on_a_star():
    # Worker 0 linked to everyone, nothing else: the server is 0 and carries D each way per
    # worker on its own links; a binary tree in rank order must route through 0.
    p, b = 5, 8e9
    matrix = np.zeros((p, p))
    matrix[0, 1:] = matrix[1:, 0] = b
    topo = Topology(matrix)
    assert topo.route(3, 4) == [(3, 0), (0, 4)]
    assert topo.allreduce_time("ps", D, chunk_bytes=BIG_CHUNK) == pytest.approx(2 * D / 1e9)
    assert topo.allreduce_time("forest", D, chunk_bytes=BIG_CHUNK) == pytest.approx(
        2 * D / 1e9)
    # Ring 0->1->2->3->4->0: the hops 1->2, 2->3, 3->4 go through 0, yet every directed
    # link still carries one hop; with 1 ms per hop those routed hops cost 2 ms.
    assert topo.allreduce_time("ring", D) == pytest.approx(2 * 4 * (D / 5) * 8 / b)
    assert topo.allreduce_time("ring", D, latency_s=1e-3) == pytest.approx(
        2 * 4 * ((D / 5) * 8 / b + 2e-3))


def test_latency_counts_per_hop_and_per_chunk():
    topo = homogeneous(4, "8gbit")
    alpha = 1e-3
    assert topo.allreduce_time("ring", 4e6, latency_s=alpha) == pytest.approx(
        6 * (alpha + 1e6 / 1e9))
    slow = Topology(topo.bandwidth_bps, latency_s=alpha)
    assert slow.allreduce_time("ring", 4e6) == topo.allreduce_time("ring", 4e6, alpha)
    assert topo.allreduce_time("forest", 0) == 0.0
    assert homogeneous(1).allreduce_time("forest", D) == 0.0


def test_random_meshes_are_seeded():
    a, b = random_mesh(6, seed=3), random_mesh(6, seed=3)
    assert np.array_equal(a.bandwidth_bps, b.bandwidth_bps)
    assert not np.array_equal(a.bandwidth_bps, random_mesh(6, seed=4).bandwidth_bps)
    off = a.bandwidth_bps[~np.eye(6, dtype=bool)]
    assert off.min() >= 1e9 and off.max() <= 10e9
    assert load_topology("random:3", 6).name == "random:3"
    assert default_suite(2) == ["two-racks", "random:0", "random:1", "homogeneous"]


def test_nics_bound_every_algorithm():
    # Dedicated 10 Gbit/s links, but worker 0's NIC carries 1 Gbit/s each way.
    p = 4
    nic = [1e9, 10e9, 10e9, 10e9]
    topo = Topology(np.full((p, p), 10e9), egress_bps=nic, ingress_bps=nic)
    assert topo.allreduce_time("ring", D) == pytest.approx(2 * (p - 1) / p * D * 8 / 1e9)
    assert topo.forest.rate <= topo.forest.dual_bound * (1 + 1e-9)
    assert topo.bounds()["bound"] == "lp-dual"
    assert topo.bounds()["two_way_cut_bps"] == 1e9
    with pytest.raises(ValueError, match="egress_bps"):
        Topology(np.ones((2, 2)), egress_bps=-1.0)


def test_topology_files(tmp_path):
    matrix = [[0, "10gbit", 1e9], ["10gbit", 0, "1gbit"], [1e9, "1Gbit", 0]]
    path = tmp_path / "net.json"
    path.write_text(json.dumps({"bandwidth_bps": matrix, "latency_s": 1e-5}))
    topo = load_topology(path)
    assert topo.workers == 3 and topo.latency_s == 1e-5 and topo.name == "net"
    assert topo.bandwidth_bps[0, 1] == 10e9 and topo.bandwidth_bps[2, 1] == 1e9
    csv = tmp_path / "net.csv"
    csv.write_text("0,10gbit,1000000000\n10gbit,0,1gbit\n1e9,1gbit,0\n")
    assert np.array_equal(load_topology(csv).bandwidth_bps, topo.bandwidth_bps)
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps([[0, 1e9], [1e9, 0]]))
    assert load_topology(plain).forest.rate == pytest.approx(1e9)
    assert not load_topology(plain).has_nics
    nics = tmp_path / "nics.json"
    nics.write_text(json.dumps({"bandwidth_bps": matrix, "egress_bps": "1gbit",
                                "ingress_bps": [1e9, "2gbit", 3e9]}))
    topo = load_topology(nics)
    assert topo.egress_bps.tolist() == [1e9] * 3 and topo.ingress_bps.tolist() == [1e9, 2e9, 3e9]


def test_a_topology_file_sets_latency_and_workers(tmp_path):
    path = tmp_path / "three.json"
    path.write_text(json.dumps({"bandwidth_bps": np.full((3, 3), 1e9).tolist(),
                                "latency_s": 0.01}))
    topo = load_topology(path)
    net = network_on(path, "ring", workers=3)
    assert net.latency_s == 0.01
    assert net.cost("allreduce", 1e6) == pytest.approx(topo.allreduce_time("ring", 1e6))
    assert net.cost("allreduce", 1e6) > 4 * 0.01  # 2(p-1) latency steps
    given = network_on(path, "ring", latency_s=0.0)
    assert given.workers == 3
    assert given.cost("allreduce", 1e6) == pytest.approx(topo.allreduce_time("ring", 1e6, 0.0))
    with pytest.raises(ValueError, match="workers=8 is not allowed with topology='three': it "
                                         "has 3 workers"):
        network_on(path, "forest", workers=8)
    with pytest.raises(ValueError, match="workers=8 is not allowed"):
        scenario("resnet50", 8, "10gbit", topology=path)
    assert scenario("resnet50", None, "10gbit", topology=path).workers == 3


def test_bad_topologies_name_the_option(tmp_path):
    with pytest.raises(ValueError, match="topology of shape"):
        Topology(np.ones((2, 3)))
    with pytest.raises(ValueError, match="topology is not allowed: link capacities"):
        Topology([[0, -1e9], [1e9, 0]])
    with pytest.raises(ValueError, match="topology is not allowed: the workers are not "
                                         "connected"):
        Topology([[0, 1e9, 0, 0], [1e9, 0, 0, 0], [0, 0, 0, 1e9], [0, 0, 1e9, 0]])
    with pytest.raises(ValueError, match="'two-racks', 'random', 'homogeneous'"):
        load_topology("three-racks")
    with pytest.raises(ValueError, match="random:SEED"):
        load_topology("random:x")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"bandwidth_bps": [[0, "fast"], [1, 0]]}))
    with pytest.raises(ValueError, match=r"topology='.*bad\.json'.*holds 'fast', not a rate"):
        load_topology(bad)
    with pytest.raises(ValueError, match="algorithm='butterfly'"):
        homogeneous(4).allreduce_time("butterfly", D)
    with pytest.raises(ValueError, match="algorithm='butterfly'"):
        Network(8, "10gbit", topology=two_racks(8), algorithm="butterfly")
    with pytest.raises(ValueError, match="workers=4 is not allowed with a topology of 8"):
        Network(4, "10gbit", topology=two_racks(8))
    with pytest.raises(ValueError, match="workers=1 is not allowed: workers must be an "
                                         "integer >= 2"):
        two_racks(1)
    with pytest.raises(ValueError, match="workers=0 is not allowed"):
        homogeneous(0)
    with pytest.raises(ValueError, match="convergence is not allowed with topology"):
        advise("resnet50", 8, "10gbit", convergence=object(), topology="two-racks")


def test_network_on_a_topology_prices_all_reduce_by_the_simulator():
    topo = two_racks(8, "10gbit")
    ring = network_on(topo, "ring")
    # The ring's bus bandwidth on two racks is the thin link's, so it prices like a plain
    # 1 Gbit/s network.
    assert ring.bandwidth_bps == pytest.approx(1e9)
    plain = Network(8, "1gbit")
    for nbytes in (1e3, 1e6, 1e8):
        assert ring.cost("allreduce", nbytes) == pytest.approx(plain.cost("allreduce", nbytes))
        assert ring.cost("allgather", nbytes) == pytest.approx(plain.cost("allgather", nbytes))
    forest = network_on(topo, "forest", efficiency=0.5)
    assert forest.cost("allreduce", 1e8) == pytest.approx(
        topo.allreduce_time("forest", 1e8, 0.0, 0.5))
    none_ring = predict("resnet50", ring, "none")
    none_forest = predict("resnet50", network_on(topo, "forest"), "none")
    assert none_forest.t_iter_s < none_ring.t_iter_s
    # Equal but for the reductions, which a topology does not price (0.04% here).
    assert none_ring.t_iter_s == pytest.approx(predict("resnet50", plain, "none").t_iter_s,
                                               rel=2e-3)
    assert none_ring.t_iter_s < predict("resnet50", plain, "none").t_iter_s


def test_whatif_and_advise_on_a_topology():
    ring = scenario("resnet50", 8, "10gbit", topology="two-racks", algorithm="ring")
    forest = scenario("resnet50", 8, "10gbit", topology="two-racks", algorithm="forest")
    assert forest.sf > ring.sf
    need = required_compression("resnet50", 8, "10gbit", topology="two-racks",
                                algorithm="forest")
    assert need.ratio > 1
    assert scenario("resnet50", 8, "10gbit", ratio=need.ratio, topology="two-racks",
                    algorithm="forest").sf >= 0.9
    table = advise("resnet50", 8, "10gbit", methods=["fp16"], topology="two-racks",
                   algorithms=["ring", "forest"])
    assert len(table) == 4 and set(table["algorithm"]) == {"ring", "forest"}  # none, fp16 (V100)
    none = table[table["method"] == "none"].set_index("algorithm")
    assert none.loc["ring", "speedup"] == pytest.approx(1.0)
    assert none.loc["forest", "speedup"] > 1
    assert table.iloc[0]["algorithm"] == "forest"
    assert "forest all-reduce" in verdict(table)


def test_allreduce_times_plot(tmp_path):
    table = compare(["two-racks", "random:1", "homogeneous"], D)
    path = plots.allreduce_times(table, tmp_path / "times.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
