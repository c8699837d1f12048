"""Local workers started from the fork server see what spawned ones would: the environment
and arguments of the moment they start, any number of tensors, and a failing rank's error."""
import os

import pytest
import torch
import torch.multiprocessing as mp

from gradcomp.evaluation.common import processes


def report(rank, out_dir, tensors):
    total = float(sum(t.sum() for t in tensors))
    with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as f:
        f.write(f"{os.environ.get('GRADCOMP_TEST_MARK')} {total} {len(tensors)}")


def fail_on_rank_one(rank):
    if rank == 1:
        raise ValueError("rank one fails")


def test_workers_see_the_environment_and_arguments_of_their_start(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    monkeypatch.setenv("GRADCOMP_TEST_MARK", "before")
    processes.start(report, 2, str(first), [torch.ones(3)])
    # set after the fork server started: a worker still sees it; 600 tensors, one descriptor
    # each if they travelled as shared memory, are more than one message may pass (253)
    monkeypatch.setenv("GRADCOMP_TEST_MARK", "after")
    processes.start(report, 2, str(second), [torch.full((2,), float(i)) for i in range(600)])
    assert [(first / f"rank{r}.txt").read_text() for r in range(2)] == ["before 3.0 1"] * 2
    assert [(second / f"rank{r}.txt").read_text() for r in range(2)] == [
        f"after {2.0 * sum(range(600))} 600"] * 2


def test_a_failing_rank_raises_its_error_here():
    with pytest.raises(mp.ProcessRaisedException, match="rank one fails"):
        processes.start(fail_on_rank_one, 2)
