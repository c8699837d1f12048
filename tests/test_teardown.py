"""Clean exit under torchrun: a run that ends with destroy_process_group() exits 0 every time.
Before the per-bucket gloo groups moved to one process-wide registry, half of these runs
aborted after training ("terminate called ... Resource deadlock avoided": a group freed by its
own worker thread), so torchrun reported the job failed. One torchrun job ends every run: each
rank forks all but the last (a fresh interpreter's start-up costs seconds, a run's exit is
what is tested) and ends the last itself (see teardown_script.py). And the order the
benchmarks and test workers end in (`end_process_group`): a hooked DDP freed before its group."""
import gc
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

RUNS = 6  # at the old failure rate (5 of 10) all 6 passing had a chance of 1.6%

pytestmark = pytest.mark.slow


def test_teardown_after_chained_rounds_exits_cleanly_every_time():
    script = Path(__file__).with_name("teardown_script.py")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", str(script), str(RUNS)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "terminate called" not in done.stderr, (
        f"exit {done.returncode}\n{done.stderr[-2000:]}")


def test_end_process_group_frees_a_hooked_ddp_left_in_a_cycle_before_the_group(tmp_path):
    """A DDP its function left in a reference cycle is collected while the group is still up:
    freed after the group is destroyed, its reducer frees the group, under the GIL, and gloo's
    destructor can wait forever for a thread that needs the GIL (docs/ddp.md, Teardown)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import gradcomp.comm
    from gradcomp.evaluation.common.env import end_process_group

    group_up_when_freed = []

    def train():
        ddp = DDP(torch.nn.Linear(4, 4))
        gradcomp.comm.register(ddp, "fp16", start_iter=0)

        def step():
            ddp(torch.randn(2, 4)).sum().backward()
        ddp.step = step  # a cycle the collector sees: ddp -> step -> ddp
        ddp.step()
        weakref.finalize(ddp, lambda: group_up_when_freed.append(dist.is_initialized()))
        return weakref.ref(ddp)

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    gc.disable()  # no collection but the ones here
    try:
        alive = train()
        assert alive() is not None  # the cycle kept it past its function
        end_process_group()
        gc.collect()
    finally:
        gc.enable()
        if dist.is_initialized():
            dist.destroy_process_group()
    assert group_up_when_freed == [True]
