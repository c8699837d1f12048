"""The profile of a workload as FSDP2 runs it without communicating: sharded as the FSDP
training bench shards it (`train_fsdp.shard_model`), every FSDP module's all-gather and
reduce-scatter replaced by local ones that move nothing between ranks (the all-gather leaves
the other ranks' slices as they are: FSDP has already copied this rank's shard into its
slice; the reduce-scatter copies this rank's chunk of the flat gradient out), so that
forward, backward and the optimizer step hold what FSDP computes around its collectives
(copies into and out of the all-gather and reduce-scatter buffers, the sharded parameters'
and gradients' bookkeeping, the step on this rank's shards) and nothing of the network.

The gradients' sizes and ready times (backward order) are the unsharded model's
(`train.model_profile`), the ready times scaled to the FSDP backward; forward (zero_grad,
forward and loss), backward and optimizer are the FSDP iteration's, each the slowest rank's
in every repeat (on a CPU each of FSDP's collectives waits for the slowest rank, as the
codec bench's `slowest_rank` prices it), medians over `repeats` after `warmup`. Call it on
every rank of the default process group at once; each phase starts after a barrier.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

from ...fsdp import fsdp_modules
from ..common.timing import Clock
from ..profiles.profiles import Profile
from ..workloads.load import load_workload
from .train import model_profile
from .train_fsdp import shard_model


class LocalAllGather(AllGather):
    """An all-gather that communicates nothing; its buffers are zero-filled once per size and
    kept (so that the other ranks' slices hold finite values, and no time goes to filling
    them)."""

    def __init__(self):
        self.buffers: dict = {}

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        key = (tuple(size), dtype, device)
        if key not in self.buffers:
            self.buffers[key] = torch.zeros(*size, dtype=dtype, device=device)
        return self.buffers[key]

    def __call__(self, output_tensor, input_tensor, group, async_op: bool = False):
        return None


class LocalReduceScatter(ReduceScatter):
    """A reduce-scatter that communicates nothing: this rank's chunk of its own gradient."""

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op: bool = False):
        parts = dist.get_world_size(group)
        output_tensor.copy_(input_tensor.view(parts, -1)[dist.get_rank(group)]
                            .view(output_tensor.shape))
        return None


def measure_fsdp_profile(name: str, batch_size: int | None = None, repeats: int = 20,
                         warmup: int = 5) -> Profile:
    """The profile of workload `name` (module docstring) on this rank's CPU."""
    plain = model_profile(name, batch_size, repeats=repeats, warmup=warmup)
    workload = load_workload(name, "model", batch_size=batch_size)
    model = shard_model(workload.model)
    gather = LocalAllGather()
    for module in fsdp_modules(model):
        module.set_custom_all_gather(gather)
        module.set_custom_reduce_scatter(LocalReduceScatter())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs, targets = workload.batch(dist.get_rank(), 0, torch.device("cpu"))
    clock = Clock(torch.device("cpu"))
    times = {"forward": [], "backward": [], "optimizer": []}

    def timed(fn):
        dist.barrier()
        start = clock.mark()
        out = fn()
        return clock.seconds(start, clock.mark()), out

    def forward():
        opt.zero_grad(set_to_none=True)
        return workload.loss(model(inputs), targets)

    for step in range(warmup + repeats):
        forward_s, loss = timed(forward)
        backward_s, _ = timed(loss.backward)
        optimizer_s, _ = timed(opt.step)
        slowest = torch.tensor([forward_s, backward_s, optimizer_s], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        if step >= warmup:
            for phase, seconds in zip(times, slowest.tolist()):
                times[phase].append(seconds)
    forward, backward, optimizer = (float(torch.tensor(v).median()) for v in times.values())
    scale = backward / plain.backward_s if plain.backward_s > 0 else 1.0
    return dataclasses.replace(
        plain, ready_s=tuple(min(r * scale, backward) for r in plain.ready_s),
        forward_s=forward, backward_s=backward, optimizer_s=optimizer, finalize_s=0.0,
        assumptions=plain.assumptions + f"; forward, backward and optimizer as FSDP2 runs "
        f"them on {dist.get_world_size()} ranks with collectives that communicate nothing "
        "(gradcomp.evaluation.benches.fsdp_profile), ready times scaled to that backward")
