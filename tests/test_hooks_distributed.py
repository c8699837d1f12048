"""The DDP hooks on 2 real gloo processes: every method trains, ranks agree, references match,
checkpoints resume bit for bit, mismatched seeds and dead ranks raise."""
import pytest
import torch

from ddp_workers import (HOOKS, METHODS, MISMATCHES, RESUME_AT, dead_rank_case, resume_cases,
                         shared_cases, spawn)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shared():
    """The main and the mismatch cases, in one spawn (each spawn of 2 ranks costs seconds)."""
    return spawn(shared_cases, 2)


@pytest.fixture(scope="module")
def runs(shared):
    return [r["main"] for r in shared]


def same(a, b):
    return torch.equal(torch.nan_to_num(a, nan=1234.5), torch.nan_to_num(b, nan=1234.5))


@pytest.mark.parametrize("name", METHODS)
def test_every_method_trains_and_ranks_agree(runs, name):
    run = runs[0][name]
    assert same(run["params"], runs[1][name]["params"]), "ranks ended with different parameters"
    assert torch.isfinite(run["params"]).all()
    assert run["after"] < 0.5 * run["before"], f"{name}: loss {run['before']} -> {run['after']}"
    compressed = [r for r in run["rows"] if r["iteration"] >= 1]
    assert compressed and all(r["method"] in (name, "allreduce") for r in compressed)
    if name != "none":
        sent = sum(r["bytes_sent"] for r in compressed)
        assert sent < sum(r["bytes_original"] for r in compressed)
    for r in compressed:
        assert r["encode_s"] >= 0 and r["comm_s"] >= 0 and r["decode_s"] >= 0


def test_every_rank_times_the_budgets_count_from_rank_zeros_warm_up_one_collective(runs):
    # rank 0: 1 s / 62.5 ms = 16 iterations; rank 1 alone would time its 3 (3 x 0.5 s > 1 s)
    assert [r["budget"]["count"] for r in runs] == [16, 16]
    assert [r["budget"]["collectives"] for r in runs] == [["c10d::broadcast_"]] * 2


def test_auto_explores_every_candidate_then_every_rank_takes_the_same_decisions(runs):
    run, other = runs[0]["auto"], runs[1]["auto"]
    assert same(run["params"], other["params"]) and run["after"] < 0.5 * run["before"]
    assert run["decisions"] and run["decisions"] == other["decisions"]
    assert run["guard"] and run["guard"] == other["guard"]  # from the norms of both ranks
    decided = run["decided_at"]
    assert decided == other["decided_at"] and 1 + 2 + 2 + 1 + 1 <= decided <= 9
    explored = [r["method"] for r in sorted(run["rows"], key=lambda r: r["iteration"])
                if 1 <= r["iteration"] < decided and r["bucket"] == 0]
    # most compressing first ("none" travels as the all-reduce); the first two in full, the
    # others may end after their warm-up (they cannot win)
    candidates = ["powersgd", "topk", "bf16", "allreduce"]
    assert explored[:4] == ["powersgd"] * 2 + ["topk"] * 2
    assert [c for c in candidates[2:] for _ in range(explored.count(c))] == explored[4:]
    assert all(explored.count(c) in (1, 2) for c in candidates[2:])
    chosen = {r["method"] for r in run["rows"] if r["iteration"] >= decided}
    assert chosen <= set(candidates) and len(chosen) >= 1


def test_auto_proposes_a_move_within_two_iterations_of_reading_a_slowdown_on_every_rank(runs):
    for drop in (17, 20):
        run = runs[0][f"drop{drop}"]
        assert run == runs[1][f"drop{drop}"]
        # decided at 7 (uncompressed); one iteration at the slow rate, then the all-gather
        # proposed at drop + 1, priced from that iteration alone (not the 10-iteration
        # window's mix of rates), and taken after its trial's 20 iterations (untimed here:
        # the table's word); rank 1's lone wait at 12 is no slowdown (least communication)
        assert run["changed"] == [7, drop + 22] and run["decisions"] == {0: 1}
        assert run["x"] == pytest.approx(1e-9, rel=1e-9)
        # as the hook runs it: five iterations' samples launched together at 11, 16, 21, ...
        # (no wait after compute), each read at the next step: 17's and 20's at 22, the move
        # proposed there, from the slow iteration on
        launched = runs[0][f"drop{drop}launched"]
        assert launched == runs[1][f"drop{drop}launched"]
        assert launched["changed"] == [7, 43] and launched["decisions"] == {0: 1}
        assert launched["x"] == pytest.approx(1e-9, rel=1e-9)
    # a codec time 0.1 s over once: a check at 23 (and 27), priced from the windows' medians
    assert runs[0]["dropNone"] == runs[1]["dropNone"]
    assert runs[0]["dropNone"]["changed"] == [7] and runs[0]["dropNone"]["decisions"] == {0: 0}
    on, other = runs[0]["auto_slowdown_on"], runs[1]["auto_slowdown_on"]
    assert on["decided_at"] is not None and on["decisions"] == other["decisions"]
    # confirmation: after the scan every rank ran the same contenders in the same turns, two
    # iterations each, and decided after them
    start, contenders = on["confirm"]
    assert on["confirm"] == other["confirm"] and len(contenders) == 4
    assert on["decided_at"] == other["decided_at"] == start + 2 * 2 * 4
    turns = [r["method"] for r in sorted(on["rows"], key=lambda r: r["iteration"])
             if start <= r["iteration"] < start + 16 and r["bucket"] == 0]
    assert turns == [r["method"] for r in sorted(other["rows"], key=lambda r: r["iteration"])
                     if start <= r["iteration"] < start + 16 and r["bucket"] == 0]
    assert len(turns) == 16 and all(turns.count(m) == 4 for m in turns)
    assert turns[::2] == turns[1::2]  # each turn two iterations
    # the hook launches the agreement on five iterations' samples at the step before every
    # fifth iteration after the decision, not waited for: at the last step (29) if it is one
    decided = on["decided_at"]
    launched = list(range(max(decided, 24), 29)) if (29 + 1 - decided) % 5 == 0 else None
    assert on["launched"] == other["launched"] == launched
    assert same(on["params"], other["params"])


def test_a_settled_auto_adds_one_small_all_reduce_per_five_iterations_or_one_per_check(runs):
    """Once settled on top-k, auto encodes and all-gathers each bucket as the fixed top-k
    hook does; beside that it issues one all-reduce per five iterations (the samples its
    slowdown check reads; iterations 4-11: launched at 7), and with slowdown=None one per
    `check_every` (4) iterations, before each drift check (launched at 6 and 10)."""
    for rank in (0, 1):
        steady = runs[rank]["steady"]
        fixed, auto, periodic = steady["fixed"], steady["auto"], steady["auto_no_slowdown"]
        assert fixed["buckets"] == auto["buckets"] == periodic["buckets"] == 2
        assert fixed["methods"] == auto["methods"] == periodic["methods"] == ["topk"]
        assert auto["decided_at"] == periodic["decided_at"] == 3
        assert fixed["collectives"] == {"c10d::allgather_": 2.0}
        assert auto["collectives"] == {"c10d::allgather_": 2.0, "c10d::allreduce_": 0.125}
        assert periodic["collectives"] == {"c10d::allgather_": 2.0, "c10d::allreduce_": 0.25}


def test_none_equals_ddp_without_hook_bit_for_bit(runs):
    for rank in (0, 1):
        assert torch.equal(runs[rank]["none"]["params"], runs[rank]["ddp"]["params"])
        assert runs[rank]["none"]["losses"] == runs[rank]["ddp"]["losses"]


def test_fp16_equals_torch_fp16_compress_hook_bit_for_bit(runs):
    for rank in (0, 1):  # both compress from the first iteration
        assert torch.equal(runs[rank]["fp16_from_start"]["params"],
                           runs[rank]["torch_fp16"]["params"])


def test_powersgd_matches_torch_powersgd_hook(runs):
    for rank in (0, 1):
        ours, theirs = runs[rank]["our_powersgd_one_bucket"], runs[rank]["torch_powersgd"]
        assert not torch.equal(ours["params"], runs[rank]["ddp"]["params"])  # it compressed
        torch.testing.assert_close(ours["params"], theirs["params"], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(torch.tensor(ours["losses"]), torch.tensor(theirs["losses"]),
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("label", ["bucket_view", "static_graph", "large_buckets", "no_sync"])
def test_ddp_options_work_and_none_still_matches(runs, label):
    for rank in (0, 1):
        assert torch.equal(runs[rank][f"none_{label}"]["params"],
                           runs[rank][f"ddp_{label}"]["params"])
    for name in ("topk", "powersgd", "qsgd") if label != "no_sync" else ("topk",):
        a, b = runs[0][f"{name}_{label}"], runs[1][f"{name}_{label}"]
        assert same(a["params"], b["params"]) and torch.isfinite(a["params"]).all()
        assert a["after"] < a["before"]


@pytest.mark.parametrize("dtype", ["torch.float16", "torch.bfloat16"])
@pytest.mark.parametrize("name", ["fp16", "int8", "powersgd", "topk", "signsgd"])
def test_low_precision_gradients(runs, dtype, name):
    a, b = runs[0][f"{name}_{dtype}"], runs[1][f"{name}_{dtype}"]
    assert same(a["params"], b["params"])
    assert torch.isfinite(a["params"]).all() and a["after"] < a["before"]


@pytest.mark.parametrize("name", ["none", "topk", "powersgd", "signsgd", "randomk"])
def test_world_size_one(runs, name):
    for rank in (0, 1):  # each rank trains alone on its own data
        run = runs[rank][f"solo_{name}"]
        assert torch.isfinite(run["params"]).all() and run["after"] < run["before"]
    assert not torch.equal(runs[0][f"solo_{name}"]["params"], runs[1][f"solo_{name}"]["params"])


def test_ranks_with_different_hooks_raise_the_same_error_instead_of_diverging(shared):
    results = [r["mismatch"] for r in shared]
    for case, (_, _, field) in MISMATCHES.items():
        errors = [results[r][case] for r in (0, 1)]
        assert errors[0] is not None and errors[0] == errors[1], (case, errors)
        kind, message = errors[0]
        assert kind == "RankMismatch" and "ranks disagree" in message, (case, message)
        assert f"{field}: rank 0 " in message, (case, message)
    errors = [results[r]["resume_iteration"] for r in (0, 1)]
    assert errors[0] == errors[1] and "iteration: rank 0 '2', rank 1 '3'" in errors[0][1]
    assert torch.equal(results[0]["still_in_step"], results[1]["still_in_step"])


def test_checkpoint_resume_in_fresh_processes_is_bit_exact(runs):
    checkpoints = [runs[r]["checkpoints"] for r in (0, 1)]
    resumed = spawn(resume_cases, 2, checkpoints)
    for rank in (0, 1):
        for name in HOOKS:
            assert torch.equal(resumed[rank][name], runs[rank][name]["params"]), name
    # A checkpoint taken right after a resume resumes exactly too.
    again = [{n: resumed[r][f"{n}_again"] for n in ("topk", "powersgd", "qsgd", "int8")}
             for r in (0, 1)]
    twice = spawn(resume_cases, 2, again, RESUME_AT + 1, False)
    for rank in (0, 1):
        for name in again[0]:
            assert torch.equal(twice[rank][name], runs[rank][name]["params"]), name


def test_dead_rank_surfaces_as_an_error_within_the_timeout():
    survivor = spawn(dead_rank_case, 2)[0]
    assert survivor["error"] is not None
    assert survivor["seconds"] < 60, survivor
