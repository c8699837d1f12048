"""The hierarchical hook on 4 gloo ranks as 2 nodes x 2 (one spawn for every case): every
method trains and the ranks agree bit for bit, resume is exact, `none` is DDP's average up to
the order of the float additions, bad options are refused on every rank alike; and, without
processes, how a shard splits the bucket's tensors."""
import pytest
import torch

from gradcomp.comm.hierarchical import hierarchy_options, shard_shapes
from hierarchical_workers import HOOKS, NODE, WORLD, cases
from ddp_workers import spawn


@pytest.fixture(scope="module")
def runs():
    return spawn(cases, WORLD)


def agree(runs, key, field="params"):
    first = runs[0][key][field]
    return all(torch.equal(first, runs[r][key][field]) for r in range(1, WORLD))


@pytest.mark.slow
@pytest.mark.parametrize("name", HOOKS)
def test_every_method_trains_hierarchically_and_the_ranks_agree(runs, name):
    run = runs[0][name]
    assert agree(runs, name), "ranks ended with different parameters"
    assert torch.isfinite(run["params"]).all()
    assert run["after"] < 0.8 * run["before"], (run["before"], run["after"])
    rows = [r for r in run["rows"] if r["iteration"] >= 1]
    assert rows and {r["bucket_numel"] for r in rows} == {1008, 2401}
    for r in rows:  # the shard crosses nodes; the bucket's halves go round the node
        assert r["numel"] == -(-r["bucket_numel"] // NODE)
        assert r["intra_bytes"] == 2 * (NODE - 1) * r["numel"] * 4
        assert min(r["encode_s"], r["comm_s"], r["decode_s"], r["scatter_s"],
                   r["gather_s"]) >= 0
    if name not in ("none", "auto"):
        assert sum(r["bytes_sent"] for r in rows) < sum(r["bytes_original"] for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize("name", HOOKS)
def test_a_resumed_run_continues_bit_for_bit(runs, name):
    for rank in range(WORLD):
        assert torch.equal(runs[rank][name]["resumed"], runs[rank][name]["params"]), rank
    for rank in range(WORLD):  # through save_state / load_state too (residuals of a shard)
        run = runs[rank]["topk_save_state"]
        assert torch.equal(run["resumed"], run["params"])


@pytest.mark.slow
def test_none_is_ddps_average_up_to_the_order_of_additions(runs):
    for rank in range(WORLD):
        ours, ddp = runs[rank]["none"]["params"], runs[rank]["ddp"]["params"]
        torch.testing.assert_close(ours, ddp, rtol=1e-5, atol=1e-6)
    ours = runs[0]["none_bf16"]  # bfloat16 inside the node: close, not equal
    assert agree(runs, "none_bf16")
    torch.testing.assert_close(ours["params"], runs[0]["ddp"]["params"], rtol=0.05, atol=0.02)
    assert all(r["intra_bytes"] == 2 * (NODE - 1) * r["numel"] * 2 for r in ours["rows"])
    topk = runs[0]["topk_bf16"]
    assert agree(runs, "topk_bf16") and topk["after"] < topk["before"]


@pytest.mark.slow
def test_auto_prices_the_link_between_nodes_and_decides_alike(runs):
    run = runs[0]["auto"]
    assert run["priced_workers"] == WORLD // NODE
    assert run["decisions"] and all(runs[r]["auto"]["decisions"] == run["decisions"]
                                    for r in range(WORLD))


@pytest.mark.slow
@pytest.mark.parametrize("per_node", [1, 4])
def test_nodes_of_one_and_one_node_of_four(runs, per_node):
    key = f"topk_nodes_of_{per_node}"
    run = runs[0][key]
    assert agree(runs, key) and run["after"] < run["before"]
    rows = [r for r in run["rows"] if r["iteration"] >= 1]
    assert {r["numel"] for r in rows} == {-(-n // per_node) for n in (1008, 2401)}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["topk", "powersgd"])
def test_steps_that_wait_give_what_chained_steps_give(runs, name):
    """On a process group of the user's the steps run one after another in the hook's call
    (as on NCCL); on gloo's default group they chain on futures: the same result."""
    for rank in range(WORLD):
        assert torch.equal(runs[rank][f"{name}_waiting"]["params"], runs[rank][name]["params"])


@pytest.mark.slow
@pytest.mark.parametrize("case, kind, words", [
    ("not_divisible", "ValueError", ["gpus_per_node=3", "divide the world size"]),
    ("intra", "ValueError", ["intra='fp8'", "'none', 'bf16'"]),
    ("no_node_size", "ValueError", ["gpus_per_node=G", "LOCAL_WORLD_SIZE"]),
    ("flat_with_node_size", "ValueError", ["hierarchical=True"]),
    ("flat_checkpoint", "ValueError", ["hierarchy None", "gpus_per_node"]),
    ("unequal_nodes", "ValueError", ["equal size", "3 on rank(s) 0, 1, 2; 1 on rank(s) 3"]),
    ("not_node_by_node", "ValueError", ["node by node", "rank 1 has LOCAL_RANK 0"]),
])
def test_bad_options_are_refused_on_every_rank_alike(runs, case, kind, words):
    errors = [runs[r]["errors"][case] for r in range(WORLD)]
    assert errors[0] is not None and all(e == errors[0] for e in errors), errors
    assert errors[0][0] == kind
    for word in words:
        assert word in errors[0][1], errors[0][1]


@pytest.mark.slow
def test_shared_random_state_is_compared_among_the_ranks_of_a_shard(runs):
    assert all(runs[r]["errors"]["random_state_of_local_rank_1"] is None for r in range(WORLD))
    errors = [runs[r]["errors"]["random_state_of_one_rank"] for r in range(WORLD)]
    assert errors[0] is not None and all(e == errors[0] for e in errors), errors
    kind, message = errors[0]
    assert kind == "RankMismatch" and "among the ranks that exchange across nodes" in message
    assert "rank 0 " in message and "rank 2 " in message and "rank 1 " not in message


@pytest.mark.slow
def test_the_node_size_comes_from_torchrun(runs):
    assert all(runs[r]["errors"]["torchrun_node_size"] is None for r in range(WORLD))


def test_a_shard_keeps_whole_rows_as_matrices():
    shapes = [torch.Size([4, 3]), torch.Size([5]), torch.Size([2, 2])]  # 12 + 5 + 4 = 21
    assert shard_shapes(shapes, 0, 11) == [torch.Size([3, 3]), torch.Size([2])]
    assert shard_shapes(shapes, 11, 22) == [torch.Size([1]), torch.Size([5]),
                                            torch.Size([2, 2]), torch.Size([1])]
    assert shard_shapes(shapes, 4, 8) == [torch.Size([4])]  # no whole row
    assert shard_shapes(shapes, 2, 9) == [torch.Size([1]), torch.Size([2, 3])]
    for start in range(0, 24, 6):
        pieces = shard_shapes(shapes, start, start + 6)
        assert sum(p.numel() for p in pieces) == 6


def test_hierarchy_options_are_checked_by_name():
    assert hierarchy_options(False, None, "none") is None
    assert hierarchy_options(True, 8, "bf16") == {"gpus_per_node": 8, "intra": "bf16"}
    with pytest.raises(ValueError, match="gpus_per_node=0 is not allowed"):
        hierarchy_options(True, 0, "none")
    with pytest.raises(ValueError, match="hierarchical='yes' is not allowed"):
        hierarchy_options("yes", 2, "none")


def test_the_tier_sweep_times_each_node_each_local_rank_and_the_ring_over_every_rank(runs):
    # what `validate --nodes` fits the two layouts' networks to: the hierarchical hook's
    # groups (a group per node, a group per local rank, all at once) and the flat ring
    rows = runs[0]["tier_sweep"]
    assert [(r["tier"], r["collective"], r["world_size"], r["concurrent_groups"]) for r in rows] \
        == [(t, c, w, g) for t, w, g in (("intra", NODE, 2), ("inter", 2, NODE), ("ring", 4, 1))
            for c in ("allreduce", "allgather")]
    assert all(r["time_s"] > 0 and r["groups"] == "all" for r in rows)
    assert all(runs[r]["tier_sweep"] == rows for r in range(1, WORLD))  # the slowest rank's
