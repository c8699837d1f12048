"""gradcomp.diloco on 2 gloo ranks (one spawn for every case): with method "none" it equals
DiLoCo and Streaming DiLoCo written out plainly, with H=1 and an outer SGD of lr 1 it equals
DDP, compressed outer gradients travel smaller with error feedback, resume is exact, and ranks
that differ raise before exchanging; bad options name what is allowed."""
import pytest
import torch

from ddp_workers import make_model, spawn
from diloco_workers import two_rank_cases
from gradcomp.diloco import DiLoCo, split

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two():
    return spawn(two_rank_cases, 2)


def assert_close(got, want, rtol=1e-5, atol=1e-6):
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol)


def test_method_none_equals_the_papers_algorithm(two):
    for got, want in (r["paper"] for r in two):
        assert_close(got, want)
    assert_close(two[0]["paper"][0], two[1]["paper"][0], rtol=0, atol=0)  # ranks agree


def test_streaming_with_delay_equals_the_schedule_written_out(two):
    groups = two[0]["streaming"][2]
    assert len(groups) == 2 and all(groups)
    for got, want, _ in (r["streaming"] for r in two):
        assert_close(got, want)


@pytest.mark.parametrize("fragments, delay, case", [(1, 0, "paper"), (2, 1, "streaming")])
def test_method_none_equals_torchfts_diloco(two, fragments, delay, case):
    if two[0]["torchft"][(fragments, delay)] is None:
        pytest.skip("torchft is not installed (pip install torchft)")
    for rank in two:
        assert_close(rank[case][0], rank["torchft"][(fragments, delay)])


def test_sync_every_step_with_outer_sgd_lr_1_equals_data_parallelism(two):
    for got, want in (r["dp"] for r in two):
        assert_close(got, want)


def test_int8_outer_gradients_are_smaller_and_keep_residuals(two):
    rows = two[0]["int8"]["rows"]
    assert [r["iteration"] for r in rows] == [3, 7, 11]  # one bucket per sync
    assert all(r["method"] == "int8" and r["bytes_sent"] * 3 < r["bytes_original"]
               for r in rows)
    assert all(r["comm_s"] >= 0 and r["encode_s"] >= 0 for r in rows)
    residual = two[0]["int8"]["residuals"][0]
    assert residual.abs().sum() > 0
    # int8's error is small: the weights stay near method none's (same seeds, same data)
    assert_close(two[0]["int8"]["params"], two[0]["paper"][0], rtol=0.05, atol=0.05)
    assert_close(two[0]["int8"]["params"], two[1]["int8"]["params"], rtol=0, atol=0)


@pytest.mark.parametrize("method", ["topk", "powersgd", "qsgd"])
def test_allgather_and_two_round_methods_sync_fragments_in_turn(two, method):
    rows = two[0][method]["rows"]
    assert [(r["iteration"], r["bucket"]) for r in rows] == [(1, 0), (3, 1), (5, 0), (7, 1)]
    assert sum(r["bytes_sent"] for r in rows) < sum(r["bytes_original"] for r in rows)
    assert_close(two[0][method]["global_weights"], two[1][method]["global_weights"], rtol=0,
                 atol=0)


def test_resume_mid_exchange_is_exact(two):
    for rank in two:
        case = rank["resume"]
        resumed, saved = case["resumed"]
        assert saved["pending"] is not None and saved["local_step"] == 5
        assert_close(resumed, case["straight"], rtol=0, atol=0)
        # without DiLoCo's state the ranks start from their own local weights: refused
        assert "disagree on the gradcomp hook's global weights" in case["no_state"]


@pytest.mark.parametrize("case, field", [("mismatch_schedule", "schedule"),
                                         ("mismatch_weights", "global weights"),
                                         ("mismatch_method", "method")])
def test_ranks_that_differ_all_raise_naming_the_field(two, case, field):
    for rank in two:
        assert rank[case] is not None and f"disagree on the gradcomp hook's" in rank[case]
        assert field in rank[case]


def build(**options):
    model = make_model()
    inner = torch.optim.AdamW(model.parameters())
    outer = torch.optim.SGD(model.parameters(), lr=0.7)
    return DiLoCo(model, inner, outer, **{"sync_every": 10, **options})


@pytest.mark.parametrize("options, message", [
    (dict(sync_every=0), "sync_every=0 is not allowed"),
    (dict(sync_every=2, fragments=3), "sync_every must be a multiple of fragments"),
    (dict(sync_every=9, fragments=2), "sync_every must be a multiple of fragments"),
    (dict(sync_every=10, fragments=2, sync_delay=5), "sync_delay=5 is not allowed"),
    (dict(sync_delay=-1), "sync_delay=-1 is not allowed"),
    (dict(fragments=7, sync_every=14), "fragments=7 is not allowed"),
    (dict(method="nope"), "unknown compressor 'nope'"),
    (dict(method="auto"), "method='auto' is not allowed"),
    (dict(method="topk", ratio=2), "ratio=2 is not allowed"),
    (dict(method="int8", colour=1), "option 'colour' is not accepted by 'int8'"),
])
def test_bad_options_name_what_is_allowed(options, message):
    with pytest.raises((ValueError, TypeError), match=message):
        build(**options)


def test_bad_objects_are_refused():
    model = make_model()
    inner = torch.optim.AdamW(model.parameters())
    with pytest.raises(ValueError, match="outer_optimizer must be built over model.parameters"):
        DiLoCo(model, inner, torch.optim.SGD(list(model.parameters())[:2], lr=1), 4)
    with pytest.raises(ValueError, match="two optimizers"):
        DiLoCo(model, inner, inner, 4)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        DiLoCo("model", inner, torch.optim.SGD(model.parameters(), lr=1), 4)


def test_load_refuses_another_schedule_and_other_objects():
    state = build(sync_every=4).state_dict()
    with pytest.raises(ValueError, match="saved with .*'sync_every': 4"):
        build(sync_every=8).load_state_dict(state)
    with pytest.raises(ValueError, match="not a gradcomp DiLoCo checkpoint"):
        build().load_state_dict({"model": 1})


def test_split_keeps_order_and_balances_elements():
    ps = [torch.nn.Parameter(torch.zeros(n)) for n in (100, 1, 100, 1, 100, 1)]
    fragments = split(ps, 3)
    assert [[id(p) for p in f.params] for f in fragments] == \
        [[id(p) for p in ps[i:i + 2]] for i in (0, 2, 4)]
    assert [g.index for f in fragments for g in f.groups] == [0, 1, 2]
    assert [len(f.params) for f in split(ps[:3], 3)] == [1, 1, 1]
    mixed = split([torch.nn.Parameter(torch.zeros(3)),
                   torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))], 1)
    assert [str(g.buffer.dtype) for g in mixed[0].groups] == ["torch.float32", "torch.float64"]
