"""Hook overhead: one DDP iteration with DDP's built-in all-reduce, gradcomp's `none` and
`fp16` hooks and torch's `fp16_compress_hook`, side by side in one run.

A world-size-1 gloo group in this process makes communication nearly free, so the differences
are the hook paths themselves (the harshest setting for the 3% target). Compare the groups'
means in one run: `make bench` or
`pytest benchmarks/bench_hooks.py --benchmark-enable --benchmark-group-by=param:width`.
"""
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp.comm
from gradcomp.evaluation.common.env import end_process_group


@pytest.fixture(scope="module", autouse=True)
def single_process_group():
    if dist.is_initialized():
        yield
        return
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(tmp, 's')}",
                                rank=0, world_size=1)
        yield
        end_process_group()  # the tests' hooked DDPs freed first


def make_ddp(width: int, hook: str) -> DDP:
    torch.manual_seed(0)
    layers = [nn.Linear(width, width) for _ in range(6)]
    ddp = DDP(nn.Sequential(*layers), bucket_cap_mb=1)
    if hook == "torch_fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook != "ddp":
        gradcomp.comm.register(ddp, hook, start_iter=0, telemetry_limit=1000)
    return ddp


@pytest.mark.parametrize("width", [256, 1024])
@pytest.mark.parametrize("hook", ["ddp", "none", "fp16", "torch_fp16"])
def test_iteration(benchmark, width, hook):
    ddp = make_ddp(width, hook)
    x = torch.randn(32, width)

    def step():
        ddp.zero_grad(set_to_none=False)
        ddp(x).square().mean().backward()

    for _ in range(3):
        step()
    benchmark.pedantic(step, rounds=20, iterations=3, warmup_rounds=1)
    grads = [p.grad for p in ddp.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
