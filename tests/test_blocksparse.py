"""The block-sparse all-reduce: exactly the dense all-reduce on 2, 3 and 4 gloo ranks, the
same fallback decision on every rank, its cost model, and the hooks' block-sparse
communicator (one spawn per world size, many cases inside)."""
import math

import pytest
import torch

import gradcomp
from blocksparse_workers import HOOK_OPTIONS, exact_cases, hook_cases
from ddp_workers import spawn
from gradcomp.comm import HookState
from gradcomp.collectives.blocksparse import (Traffic, _pack_bits, _unpack_bits, block_sparse_all_reduce,
                                       dense_seconds, sparse_seconds)
from gradcomp.evaluation.model.blocksparse import expected_traffic, local_bytes, union_density


@pytest.fixture(scope="module")
def two():
    return spawn(hook_cases, 2)


@pytest.fixture(scope="module")
def four():
    """4 ranks, and a group of 3 of them, in one spawn."""
    return spawn(exact_cases, 4)


def _check_exact(ranks):
    world = len(ranks)
    for cases in zip(*ranks):
        label = cases[0]["case"]
        for r, case in enumerate(cases):
            assert case["case"] == label
            assert case["out"].dtype == case["ref"].dtype
            assert torch.equal(case["out"].isnan(), case["ref"].isnan()), (label, r)
            same = torch.where(case["ref"].isnan(), 0, case["ref"])
            assert torch.equal(torch.where(case["out"].isnan(), 0, case["out"]), same), \
                (label, r, world)
        # Every rank took the same decision and saw the same union.
        assert len({(c["dense"], c["union"]) for c in cases}) == 1, label
    return {c["case"]: c for c in ranks[0]}


def test_equals_dense_all_reduce_on_two_ranks(two):
    cases = _check_exact([r["exact"] for r in two])
    assert not cases["4096/256/0.05/sparse"]["dense"]
    assert cases["4096/256/0.05/dense"]["dense"]
    assert cases["2048/32/1.0/auto"]["dense"]  # all blocks non-zero: sparse cannot win
    assert not cases["4096/256/0.05/auto"]["dense"]
    assert cases["zeros"]["union"] == 0 and cases["zeros"]["sent"] == 2  # 16 blocks' bitmap


@pytest.mark.parametrize("size", [3, 4])
def test_equals_dense_all_reduce_on_three_and_four_ranks(four, size):
    cases = _check_exact([r[size] for r in four[:size]])
    assert four[3][3] is None  # rank 3 is not in the group of 3
    assert cases["nonfinite"]["out"][3].isnan() and cases["nonfinite"]["out"][500].isnan()
    assert cases["nonfinite"]["out"][900] == math.inf
    one = cases["one-rank"]  # the last rank holds all 10 blocks, rank 0 owns some of them
    assert one["own"] == 0 and one["union"] == 10


def test_only_non_zero_blocks_travel(two):
    rank0 = {c["case"]: c for c in two[0]["exact"]}
    sparse, dense = rank0["4096/256/0.05/sparse"], rank0["4096/256/0.05/dense"]
    assert sparse["union"] < 16 and sparse["sent"] < dense["sent"] / 4
    one = rank0["one-rank"]  # rank 1 holds all 10 blocks; rank 0 owns 5 of them
    assert one["own"] == 0 and one["union"] == 10
    assert one["sent"] == 2 + 5 * 50 * 4  # its bitmap and its summed shard


def test_bit_packing_round_trips():
    flags = torch.rand(3, 37) < 0.5
    packed = torch.stack([_pack_bits(f) for f in flags])
    assert packed.shape == (3, 5) and packed.dtype == torch.uint8
    assert torch.equal(_unpack_bits(packed, 37), flags)


def test_cost_model():
    assert union_density(0.1, 1) == pytest.approx(0.1)
    assert union_density(0.1, 4) == pytest.approx(1 - 0.9**4)
    # At full density the sparse rounds move the ring all-reduce's bytes.
    t = expected_traffic(4, 1 << 20, 4, 256, 1.0, 1.0)
    assert t.exchange_bytes + 3 * t.shard_bytes == pytest.approx(2 * 3 / 4 * (4 << 20))
    assert sparse_seconds(4, t, 0.0, 1e9, bitmaps=False) == \
        pytest.approx(dense_seconds(4, 4 << 20, 0.0, 1e9))
    assert sparse_seconds(1, t, 1e-5, 1e9) == 0.0
    assert dense_seconds(4, 0, 1e-5, 1e9) == 0.0
    # Local work: the bitmap scan alone at density 0, growing with the density and union.
    assert local_bytes(2, 1000, 4, 0.0, 0.0) == 2 * 4000
    assert local_bytes(2, 1000, 4, 1.0, 1.0) == 9 * 4000
    assert local_bytes(4, 1000, 4, 0.1, 0.3) > local_bytes(2, 1000, 4, 0.1, 0.3)


@pytest.mark.parametrize("bad, match", [(dict(block_size=0), "block_size"),
                                        (dict(block_size=2.5), "block_size"),
                                        (dict(mode="fast"), "mode"),
                                        (dict(latency_s=-1.0), "latency_s"),
                                        (dict(bandwidth_bps=0), "bandwidth_bps")])
def test_bad_options_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        block_sparse_all_reduce(torch.zeros(8), **bad)


def test_hook_with_block_sparse_communicator_equals_the_default_path(two):
    for name in HOOK_OPTIONS:
        for variant in ("blocksparse", "blocksparse_group"):
            runs = [r[f"{name}_{variant}"] for r in two]
            assert torch.equal(runs[0]["params"], runs[1]["params"]), (name, variant)
            assert torch.allclose(runs[0]["params"], two[0][name]["params"], rtol=1e-5,
                                  atol=1e-6), (name, variant)
            assert runs[0]["after"] < runs[0]["before"]
            rows = [row for row in runs[0]["rows"] if row["method"] == name]
            assert rows and all(0 < row["bytes_sent"] for row in rows)
    # randomk's shared positions: the union is one rank's blocks, fewer bytes than dense.
    rows = [row for row in two[0]["randomk_blocksparse"]["rows"] if row["method"] == "randomk"]
    assert any(row["bytes_sent"] < row["bytes_original"] for row in rows)


def test_checkpoint_records_and_checks_the_communicator(two):
    assert two[0]["saved"] == {"communicator": "blocksparse", "block_size": 8}
    assert "communicator='blocksparse'" in two[0]["mismatch"]


@pytest.mark.parametrize("method, kwargs, match", [
    ("topk", dict(communicator="ring"), "communicator='ring'.*'default', 'blocksparse'"),
    ("fp16", dict(communicator="blocksparse"), "not allowed for method 'fp16'.*'topk'"),
    ("topk", dict(communicator="blocksparse", block_size=0), "block_size"),
])
def test_bad_communicator_options_are_named(method, kwargs, match):
    with pytest.raises(ValueError, match=match):
        HookState(gradcomp.compressor(method), **kwargs)


def test_state_dict_without_communicator_loads_as_default():
    saved = HookState(gradcomp.compressor("topk")).state_dict()
    del saved["communicator"], saved["block_size"]
    HookState(gradcomp.compressor("topk")).load_state_dict(saved)
    with pytest.raises(ValueError, match="communicator"):
        HookState(gradcomp.compressor("topk"), communicator="blocksparse").load_state_dict(saved)


# -- the performance model ---------------------------------------------------------------------
from gradcomp.evaluation.model.methods import BlockSparsity, MethodCost, resolve  # noqa: E402
from gradcomp.evaluation.model.network import Network  # noqa: E402
from gradcomp.evaluation.model.timeline import predict  # noqa: E402


def test_block_density_of_a_sparsifier_and_its_union():
    topk = resolve("topk+blocksparse", ratio=0.01)
    assert topk.aggregation == "blocksparse"
    assert topk.blocks.worker_density() == pytest.approx(1 - 0.99**256)  # 92%: scattered
    assert topk.blocks.union(8) == pytest.approx(1 - (0.99**256) ** 8)
    randomk = resolve("randomk+blocksparse", ratio=0.001, block_size=64)
    assert randomk.blocks.union(8) == randomk.blocks.worker_density()  # shared positions
    measured = BlockSparsity(density=0.1, union_density=0.25)
    assert (measured.worker_density(), measured.union(8)) == (0.1, 0.25)


def test_block_sparse_cost_falls_with_density_and_is_capped_by_dense():
    net = Network(8, "10gbit", latency_s=1e-5)
    dense = net.cost("allreduce", 4e8)
    times = [net.block_sparse_cost(10**8, 4, 256, d, union_density(d, 8))[0]
             for d in (1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0)]
    assert times == sorted(times)
    assert times[0] < dense / 100
    bitmap = sparse_seconds(8, Traffic(math.ceil(10**8 / 256 / 8), 0, 0), 1e-5, 10e9 / 8)
    assert times[-1] == pytest.approx(dense + bitmap)
    assert net.block_sparse_cost(100, 4, 8, 1.0, 1.0)[1] == 2 + 400  # bitmap + dense bytes
    assert Network(1, "10gbit").block_sparse_cost(100, 4, 8, 0.5, 0.5) == (0.0, 0.0)


def test_prediction_with_the_block_sparse_communicator():
    net = Network(8, "10gbit")
    none = predict("resnet50", net, "none")
    measured = MethodCost.block_sparse(BlockSparsity(density=0.01, union_density=0.05))
    sparse = predict("resnet50", net, measured)
    assert sparse.speedup > 1.2 and sparse.wire_bytes < none.wire_bytes / 10
    full = predict("resnet50", net, MethodCost.block_sparse(BlockSparsity(density=1.0)))
    assert full.speedup <= 1.0  # all blocks non-zero: dense plus the bitmaps
    randomk = predict("resnet50", net, "randomk+blocksparse")
    topk = predict("resnet50", net, "topk+blocksparse")
    assert randomk.t_iter_s < topk.t_iter_s  # shared positions keep the union small


@pytest.mark.parametrize("bad, match", [
    (lambda: resolve("fp16+blocksparse"), "topk\\+blocksparse"),
    (lambda: BlockSparsity(block_size=0), "block_size"),
    (lambda: BlockSparsity(density=1.5), "density"),
    (lambda: MethodCost("x", "blocksparse", lambda s, b: (0.0,)), "blocks"),
])
def test_bad_model_input_is_named(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()
