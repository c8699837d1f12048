"""Forest packing (rates, capacities, bounds, schedule) and the forest all-reduce executor
against dist.all_reduce on groups of 2, 3 and 4 gloo ranks (one spawn of 4)."""
import math

import numpy as np
import pytest
import torch
import torch.distributed as dist

from ddp_workers import spawn
from gradcomp.collectives.forest import forest_all_reduce
from gradcomp.collectives.forest_packing import (pack_forest, partition_bound, partitions, split,
                                          two_way_cut)
from gradcomp.evaluation.model.topology import homogeneous, random_mesh, two_racks


def random_matrix(n, seed, sparse=0.0):
    rng = np.random.default_rng(seed)
    b = rng.uniform(1, 10, (n, n))
    b[rng.random((n, n)) < sparse] = 0
    return b


def connected(b):
    n = len(b)
    seen, todo = {0}, [0]
    while todo:
        u = todo.pop()
        for v in range(n):
            if v not in seen and b[u, v] > 0 and b[v, u] > 0:
                seen.add(v)
                todo.append(v)
    return len(seen) == n


def check_forest(forest, b, nic=None):
    """Every tree spans the workers over links present both ways; no link (and no NIC in
    `nic`: each worker sends and receives its tree degree times the tree's rate) is
    overloaded."""
    n = len(b)
    for tree in forest.parents:
        assert sorted(tree).count(-1) == 1
        for node in range(n):  # every worker reaches the root
            hops = 0
            while tree[node] >= 0:
                assert b[node, tree[node]] > 0 and b[tree[node], node] > 0
                node, hops = tree[node], hops + 1
                assert hops < n
    assert all(r > 0 for r in forest.rates)
    assert (forest.link_load() <= b * (1 + 1e-9) + 1e-12).all()
    if nic is not None:
        load = forest.link_load()
        assert (load.sum(axis=1) <= nic * (1 + 1e-9)).all()
        assert (load.sum(axis=0) <= nic * (1 + 1e-9)).all()


def test_partitions_are_counted_by_bell_numbers():
    assert [len(partitions(n)) for n in range(1, 8)] == [1, 2, 5, 15, 52, 203, 877]
    assert len({tuple(r) for r in partitions(6)}) == 203


def test_packing_reaches_the_cut_bound_and_respects_capacities():
    cases = [two_racks(8).bandwidth_bps, two_racks(5).bandwidth_bps]
    cases += [random_mesh(n, seed=s).bandwidth_bps for n in (3, 6, 8) for s in range(4)]
    sparse = [b for s in range(20) if connected(b := random_matrix(7, s, sparse=0.3))]
    assert len(sparse) >= 5
    cases += sparse
    for b in cases:
        forest = pack_forest(b)
        check_forest(forest, b)
        bound = partition_bound(b)
        assert bound * (1 - 5e-3) <= forest.rate <= bound * (1 + 1e-9)
        assert forest.dual_bound >= bound * (1 - 1e-6)  # the LP certificate is an upper bound
        assert bound <= two_way_cut(b) * (1 + 1e-9)


def test_two_racks_forest_is_bounded_by_the_thin_link():
    topo = two_racks(8, "10gbit", "1gbit")
    forest = topo.forest
    assert forest.rate == pytest.approx(1e9)
    assert forest.bound == pytest.approx(1e9) and two_way_cut(topo.bandwidth_bps) == 1e9


def test_full_mesh_packs_n_over_2_links():
    # Nash-Williams: n(n-1)/2 edges of capacity c in trees of n-1 edges: rate n c / 2.
    for n in (2, 3, 4, 7):
        forest = pack_forest(np.ones((n, n)))
        assert forest.rate == pytest.approx(n / 2, rel=2e-3)


def test_nics_limit_the_forest_to_the_ring_rate():
    # Each worker sends and receives deg_T(v) x_T; degrees sum to 2(n-1) per tree, so n NICs
    # of rate 1 carry at most n / (2(n-1)): ring all-reduce's rate, reached by paths.
    for n in (2, 3, 4, 7):
        forest = homogeneous(n, 1.0).forest
        check_forest(forest, np.ones((n, n)), np.ones(n))
        assert forest.rate == pytest.approx(n / (2 * (n - 1)), rel=2e-3)
        assert forest.dual_bound >= n / (2 * (n - 1)) * (1 - 1e-6)
        assert forest.bound == forest.dual_bound  # the partition bound ignores NICs
        assert partition_bound(np.ones((n, n))) == pytest.approx(n / 2)
        assert two_way_cut(np.ones((n, n)), egress=1.0, ingress=1.0) == 1.0
    # Uneven NICs on a random mesh: the NICs and links both hold, the dual bound bounds it.
    b = random_matrix(6, 3)
    nic = np.array([2.0, 9.0, 4.0, 30.0, 3.0, 8.0])
    forest = pack_forest(b, egress=nic, ingress=nic * 2)
    check_forest(forest, b, nic)
    assert forest.rate <= forest.dual_bound * (1 + 1e-9)
    assert forest.rate >= 0.95 * forest.dual_bound
    assert forest.rate < pack_forest(b).rate


def test_split_is_proportional_and_covers_everything():
    assert split(10, [1, 1, 2]) == [(0, 3), (3, 5), (5, 10)]  # ties: the first tree
    for numel in (0, 1, 2, 7, 1000):
        parts = split(numel, [0.5, 0.0, 3.0, 1.5])
        assert parts[0][0] == 0 and parts[-1][1] == numel
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
        sizes = [b - a for a, b in parts]
        assert sizes[1] == 0
        assert all(abs(s - numel * r / 5) < 1 for s, r in zip(sizes, [0.5, 0.0, 3.0, 1.5]))


def test_schedule_reduces_before_it_broadcasts_each_chunk_once():
    forest = random_mesh(5, 1.0, seed=2).forest
    for numel, chunks in ((0, 3), (3, 8), (100, 1), (1001, 7)):
        steps = forest.schedule(numel, chunks)
        reduced = [(s.tree, s.start, s.stop) for s in steps if s.phase == "reduce"]
        broadcast = [(s.tree, s.start, s.stop) for s in steps if s.phase == "broadcast"]
        assert sorted(reduced) == sorted(broadcast)
        assert sum(b - a for _, a, b in reduced) == numel
        for s in steps:
            if s.phase == "broadcast":
                assert steps.index(s) > [(x.tree, x.start, x.phase) for x in steps].index(
                    (s.tree, s.start, "reduce"))


def test_bad_inputs_name_the_option():
    with pytest.raises(ValueError, match="bandwidth of shape"):
        pack_forest(np.ones((2, 3)))
    with pytest.raises(ValueError, match="bandwidth is not allowed: link capacities"):
        pack_forest([[0, -1], [1, 0]])
    with pytest.raises(ValueError, match="bandwidth is not allowed: link capacities"):
        pack_forest([[0, math.nan], [1, 0]])
    with pytest.raises(ValueError, match="bandwidth is not allowed: the workers are not "
                                         "connected"):
        pack_forest([[0, 1, 0], [1, 0, 0], [0, 0, 0]])
    with pytest.raises(ValueError, match="not connected"):  # a link one way is no tree edge
        pack_forest([[0, 1], [0, 0]])
    with pytest.raises(ValueError, match="chunks"):
        pack_forest(np.ones((3, 3))).schedule(10, 0)
    with pytest.raises(ValueError, match="numel"):
        split(-1, [1.0])
    for bad in (0, -1, 2.0):
        with pytest.raises(ValueError, match="max_iterations"):
            pack_forest(np.ones((3, 3)), max_iterations=bad)
    with pytest.raises(ValueError, match="egress"):
        pack_forest(np.ones((3, 3)), egress=[1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="ingress"):
        pack_forest(np.ones((3, 3)), ingress=[1.0, 1.0])


def test_bench_collective_knows_the_forest_collective():
    from gradcomp.evaluation.benches.collective import _cases

    assert _cases(["allreduce", "forest"], [4]) == [("allreduce", 4), ("forest", 4)]
    with pytest.raises(ValueError, match="collective 'scatter' is not allowed.*'forest'"):
        _cases(["scatter"], [4])


def test_one_worker_is_a_no_op_forest():
    forest = pack_forest([[0.0]])
    assert forest.rate == math.inf and forest.split(5) == [(0, 5)]


SIZES = (4, 3, 2)  # of the executor's groups: ranks 0..n-1, the largest first


def _executor_cases(rank, world_size, out_dir):
    """Every group size of SIZES in one spawn of 4 ranks (4: the default group; 3 and 2: a
    group of ranks 0..n-1, whose group ranks are the global ones), the largest first, so that
    a rank outside the next group is done and waits for none: {n: `_cases` on that group, or
    None outside it}."""
    groups, subgroups = {}, {}
    for n in SIZES:  # every rank makes every group, in the same order
        groups[n] = None if n == world_size else dist.new_group(list(range(n)))
        subgroups[n] = dist.new_group(list(range(1, n)) if n > 2 else [0, 1])
    return {n: _cases(rank, n, groups[n], subgroups[n]) if rank < n else None for n in SIZES}


def _cases(rank, world_size, group, subgroup):
    """Many cases on `group` of `world_size` ranks: random forests, sizes (also 0 and fewer
    elements than trees or chunks), chunk counts, dtypes; returns per case whether the result
    equals all_reduce."""
    results = []
    gen = torch.Generator().manual_seed(1000 + rank)
    forests = [pack_forest(random_matrix(world_size, 0)),
               pack_forest(np.ones((world_size, world_size)))]
    for f, forest in enumerate(forests):
        trees = len(forest.rates)
        for numel in (0, 1, trees + 1, 1000):
            for chunks in (1, 16):
                # Integer values: sums are exact in any order.
                x = torch.randint(-1000, 1000, (numel,), generator=gen).float()
                expected = x.clone()
                dist.all_reduce(expected, group=group)
                forest_all_reduce(x, forest, chunks, group=group)
                results.append((f, numel, chunks, "exact", bool(torch.equal(x, expected))))
        x = torch.randn(513, generator=gen, dtype=torch.float64)
        expected = x.clone()
        dist.all_reduce(expected, group=group)
        forest_all_reduce(x, forest, 5, group=group)
        results.append((f, 513, 5, "float64", bool(torch.allclose(x, expected, rtol=1e-12))))
        m = torch.randint(-50, 50, (4, 3, 5), generator=gen).to(torch.float16)
        expected = m.clone()
        dist.all_reduce(expected, group=group)
        forest_all_reduce(m, forest, 2, group=group)
        results.append((f, 60, 2, "float16-3d", bool(torch.equal(m, expected))))
    # A subgroup: ranks 1.. (all ranks of 2), so group ranks differ from global ones.
    members = list(range(1, world_size)) if world_size > 2 else [0, 1]
    if rank in members:
        x = torch.randint(-1000, 1000, (777,), generator=gen).float()
        expected = x.clone()
        dist.all_reduce(expected, group=subgroup)
        forest_all_reduce(x, pack_forest(random_matrix(len(members), 1)), 3, group=subgroup)
        results.append(("group", 777, 3, "exact", bool(torch.equal(x, expected))))
    return results


@pytest.fixture(scope="module")
def executor():
    """Every group size's cases, per rank, from one spawn of 4 ranks."""
    return spawn(_executor_cases, max(SIZES))


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_executor_equals_all_reduce(executor, world_size):
    per_rank = [ranks[world_size] for ranks in executor][:world_size]
    assert all(r is not None for r in per_rank)
    members = world_size - 1 if world_size > 2 else 2
    assert sum(r[0] == "group" for results in per_rank for r in results) == members
    for results in per_rank:
        assert len(results) - (results[-1][0] == "group") == 2 * (4 * 2 + 2)
        failed = [r for r in results if not r[-1]]
        assert not failed, failed


def test_executor_checks_the_forest_size(tmp_path):
    forest = pack_forest(np.ones((3, 3)))
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        with pytest.raises(ValueError, match="forest has 3 workers"):
            forest_all_reduce(torch.zeros(4), forest)
        one = torch.arange(5.0)
        assert torch.equal(forest_all_reduce(one, pack_forest([[0.0]])), torch.arange(5.0))
    finally:
        dist.destroy_process_group()
