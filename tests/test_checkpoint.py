"""One-file checkpoints of every rank's hook state (gradcomp.comm.save_state / load_state /
AllRanks) on 2 gloo processes: a run resumed in fresh processes equals the straight run bit for
bit, and not without the hook state; misuse gets a clear error. torch.compile: the default DDP
optimizer works with every method; the python reducer is refused by register and by the hook."""
import pytest
import torch

import gradcomp
from checkpoint_workers import RESUMED, checkpoint_cases, resume_cases
from ddp_workers import spawn

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Every case but the resume, in one spawn (each spawn of 2 ranks costs seconds)."""
    return spawn(checkpoint_cases, 2, str(tmp_path_factory.mktemp("checkpoints")))


@pytest.fixture(scope="module")
def straight(ranks):
    return [r["straight"] for r in ranks]


def test_resume_from_one_file_in_fresh_processes_is_bit_exact(straight):
    resumed = spawn(resume_cases, 2, straight[0]["paths"])
    for rank in (0, 1):
        for m in RESUMED:
            assert torch.equal(resumed[rank][m]["params"], straight[rank][m]["params"]), m
            assert resumed[rank][m]["iteration"] == straight[rank][m]["iteration"] > 0
        # The check can fail: without the hook state (residuals) the run goes elsewhere.
        assert not torch.equal(resumed[rank]["topk_unrestored"]["params"],
                               straight[rank]["topk"]["params"])


def test_misuse_gets_a_clear_error(straight):
    for rank in (0, 1):
        res = straight[rank]
        assert res["before_register"][0] == "RuntimeError"
        assert "call gradcomp.comm.register(ddp_model" in res["before_register"][1]
        assert res["not_ddp"][0] == "TypeError" and "DistributedDataParallel" in res["not_ddp"][1]
        assert res["other_ranks_state"][0] == "ValueError"
        assert f"rank {1 - rank} of 2; this is rank {rank} of 2" in res["other_ranks_state"][1]
        assert res["not_a_checkpoint"][0] == "ValueError"
        assert "gradcomp.comm.save_state" in res["not_a_checkpoint"][1]
        assert "track_parameters" in res["untracked"][1]
    # Rank 0 gathered every rank's state; rank 1's dictionary holds its own only.
    assert straight[0]["partial_complete"] and not straight[1]["partial_complete"]
    assert straight[1]["others_partial"] is None
    assert "lacks rank 0's hook state (it holds ranks [1])" in straight[0]["others_partial"][1]


def test_save_state_needs_no_process_group_for_a_hook_state_alone():
    state = gradcomp.comm.build_state("topk", ratio=0.5, error_feedback=True)
    saved = gradcomp.comm.save_state(state)
    assert saved["world_size"] == 1 and saved["complete"] and set(saved["ranks"]) == {0}
    gradcomp.comm.load_state(state, saved)
    wrapped = gradcomp.comm.AllRanks(state)
    wrapped.load_state_dict(wrapped.state_dict())
    with pytest.raises(ValueError, match="holds the hook states of 2 ranks; this run has 1"):
        gradcomp.comm.load_state(state, dict(saved, world_size=2))


@pytest.fixture(scope="module")
def compiled(ranks):
    return [r["compiled"] for r in ranks]


@pytest.mark.parametrize("name", gradcomp.names())
def test_torch_compile_with_the_default_ddp_optimizer_works_with_every_method(compiled, name):
    for rank in (0, 1):
        eager, comp = compiled[rank][name]["eager"], compiled[rank][name]["compiled"]
        assert comp["iteration"] == eager["iteration"] == 4 and comp["rows"] == eager["rows"] > 0
        torch.testing.assert_close(comp["params"], eager["params"], rtol=1e-4, atol=1e-5)
    assert torch.equal(compiled[0][name]["compiled"]["params"],
                       compiled[1][name]["compiled"]["params"])


def test_compiled_model_resumes_exactly(compiled):
    for rank in (0, 1):
        assert torch.equal(compiled[rank]["compiled_resumed"]["params"],
                           compiled[rank]["compiled_straight"]["params"])


def test_python_reducer_is_refused_clearly(compiled):
    for rank in (0, 1):
        res = compiled[rank]
        assert res["python_reducer_register"][0] == "ValueError"
        assert "optimize_ddp='python_reducer'" in res["python_reducer_register"][1]
        for case in ("python_reducer_hook", "python_reducer_compiled_autograd"):
            assert res[case] is not None, case
            assert "instead of a DDP GradBucket" in res[case][1], res[case]


@pytest.fixture(scope="module")
def mistakes(ranks):
    return [r["mistakes"] for r in ranks]


def test_save_state_on_one_rank_fails_on_every_rank_with_one_message(mistakes):
    left_alone = "rank 0 called gradcomp.comm.save_state but rank(s) 1 did not within 2 s"
    error, message = mistakes[0]["save_on_rank_0_only"]
    assert error == "CheckpointMismatch" and left_alone in message
    error, message = mistakes[1]["save_on_rank_0_only"]  # in PowerSGD's exchange, not a hang
    assert left_alone in message and "this rank was in a gradient exchange instead" in message


@pytest.mark.parametrize("method", ["topk", "powersgd"])
def test_a_damaged_checkpoint_is_refused_naming_what_is_wrong(mistakes, method):
    for rank in (0, 1):
        res = mistakes[rank]["damaged"]
        assert res[method, "intact"] is None and res[method, "nan_allowed"] is None
        where = f"rank {rank}'s compressor/residuals/0"
        assert where in res[method, "nan"][1] and "NaN" in res[method, "nan"][1]
        assert where in res[method, "short"][1] and "has 2398 values" in res[method, "short"][1]
        assert "does not match the SHA-256" in res[method, "flipped"][1]
        if method == "powersgd":
            assert "memories/0/(48, 48) has shape (1, 49, 2)" in res[method, "memory"][1]


def test_received_indices_out_of_range_are_refused():
    comp = gradcomp.compressor("topk", ratio=0.5)
    payload = comp.compress(torch.randn(8))
    values, indices = payload.tensors
    bad = payload.with_tensors([values, indices + 100])
    with pytest.raises(RuntimeError, match="indices span .* outside the bucket's 0..7"):
        comp.aggregate([payload, bad])
