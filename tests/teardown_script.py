"""A short DDP run with PowerSGD's chained rounds (per-bucket gloo groups), ended as tutorials end
it: destroy_process_group(), then the model goes out of scope and the process exits. Run by
test_teardown.py under torchrun: `teardown_script.py RUNS` ends RUNS runs on each rank, the
first RUNS - 1 each in a child forked from this rank (torch already imported: a run costs its
training and its exit, not a fresh interpreter's start-up) that exits as a script does, through
the interpreter's own shutdown; the last in the torchrun worker itself. A run that does not
exit 0 ends the worker with its number and exit status, so torchrun reports the job failed.
The imports are frozen out of the collector's sight before the forks (`gc.freeze`, as the
testbed's fork server does): a child's exit then does not walk them, copying every page they
are on (about 1.8 CPU s a run); what a run creates, its process groups too, is collected as
before."""
import gc
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp.comm


def main(steps: int = 5, run: int | None = None) -> None:
    """One run; `run`: a forked run's number, which keeps its process group apart from the
    other runs' on torchrun's store."""
    if run is None:
        dist.init_process_group("gloo")
    else:
        store, rank, world_size = next(dist.rendezvous("env://"))
        dist.init_process_group("gloo", store=dist.PrefixStore(f"run{run}", store), rank=rank,
                                world_size=world_size)
    torch.manual_seed(0)
    ddp = DDP(nn.Sequential(nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                            nn.Linear(256, 1)))
    gradcomp.comm.register(ddp, "powersgd", rank=2)
    x = torch.randn(64, 20)
    for _ in range(steps):
        ddp(x).square().mean().backward()
    dist.destroy_process_group()


def forked(run: int) -> bool:
    """Run `main` in a child process and check how it exited; True in the child (which must
    then fall off the end of the script), False here."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        main(run=run)
        return True
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status != 0:
        sys.exit(f"run {run} on rank {os.environ['RANK']}: exit {status}")
    return False


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    if runs > 1:
        import torch._dynamo  # noqa: F401 - what DDP's constructor imports (seconds), once
        gc.freeze()
    for run in range(runs - 1):
        if forked(run):
            break
    else:
        main()
