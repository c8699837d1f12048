"""Minor page faults and thread CPU seconds of a method's encode (`Communicator.start`) and
decode (`Communicator.end`), per call: (1) in DDP training of the mlp (batch 64, 25 MB buckets,
one gloo process, one thread; after 5 iterations, 10 timed), (2) in the hook-path bench
(`measure_hook_path` of the same workload's gradient, as `gradcomp validate` runs it, its
`evict` between phases), (3) in the same bench with, instead of `evict`, what training runs
between two hook calls before each encode (the optimizer step, zero_grad, forward and
backward of the workload) and nothing before the decode. All are counted per call (``getrusage``, ``thread_time``), so other
work on the machine moves them little. One process per call of this script: the allocator
starts fresh each time.

    PYTHONPATH=$PWD python faults.py METHOD     (e.g. int8; prints three lines)
"""
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import gradcomp.comm as gc
import gradcomp.evaluation.benches.hookpath as hookpath
from gradcomp.comm.communicators.base import Communicator
from gradcomp.evaluation.workloads.load import load_workload

calls = []


def counted(phase, fn):
    def call(*args):
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        cpu = time.thread_time()
        out = fn(*args)
        calls.append((phase, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults,
                      time.thread_time() - cpu))
        return out
    return call


def summary(rows) -> str:
    text = []
    for phase in ("encode", "decode"):
        mine = [r for r in rows if r[0] == phase]
        text.append(f"{phase} faults {statistics.median(r[1] for r in mine):.0f}, "
                    f"cpu {statistics.median(r[2] for r in mine) * 1e3:.1f} ms")
    return "; ".join(text)


def main(method: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PORT", "29871"))
    dist.init_process_group("gloo", rank=0, world_size=1)
    Communicator.start = counted("encode", Communicator.start)
    Communicator.end = counted("decode", Communicator.end)
    workload = load_workload("mlp", "model", batch_size=64)
    ddp = DistributedDataParallel(workload.model, bucket_cap_mb=25)
    gc.register(ddp, method)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    inputs, targets = workload.batch(0, 0, "cpu")
    for _ in range(15):
        opt.zero_grad()
        workload.loss(ddp(inputs), targets).backward()
        opt.step()
    print(f"{method} in training:  " + summary(calls[10:]))
    calls.clear()
    gradient = hookpath.workload_gradient("mlp", 64, 25.0, 0)
    hookpath.measure_hook_path(method, {}, gradient.values.numel(), world_size=1, repeats=10,
                               warmup=2, gradient=gradient)
    print(f"{method} hook-path bench: " + summary(calls[4:]))
    calls.clear()
    phases = []

    def training_step(nbytes, device):  # before the encode only (timed calls alternate)
        phases.append(None)
        if len(phases) % 2:
            opt.step()
            opt.zero_grad()
            workload.loss(workload.model(inputs), targets).backward()

    hookpath.evict = training_step
    hookpath.measure_hook_path(method, {}, gradient.values.numel(), world_size=1, repeats=10,
                               warmup=2, gradient=gradient)
    print(f"{method} bench, a training step before encode: " + summary(calls[4:]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
