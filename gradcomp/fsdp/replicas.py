"""HSDP with a compressed replica all-reduce: the model is sharded by `fully_shard` over the
shard dimension of a 2-D mesh only, and each FSDP module's all-reduce hook
(`FSDPModule.set_all_reduce_hook`) averages its reduce-scatter output across the replicas
through the DDP hook's communicators (`gradcomp.comm`): any DDP method, PowerSGD included on
the shards' own matrices.

    mesh = init_device_mesh("cuda", (replicas, shard), mesh_dim_names=("replicate", "shard"))
    fully_shard(block, mesh=mesh["shard"]); fully_shard(model, mesh=mesh["shard"])
    gradcomp.fsdp.register(model, "int8")                      # inside a shard group
    gradcomp.fsdp.register_replicas(model, mesh.get_group("replicate"), "int4")  # across

The hook averages over the replicas; FSDP has averaged over the shard group (or divides by
its size afterwards), so each shard ends with the mean over every rank.
"""
from __future__ import annotations

import hashlib
from typing import Any

import torch
import torch.distributed as dist

from ..comm.agreement import check_agreement
from ..comm.communicators import Bucket
from ..comm.hooks import average, build_state
from ..comm.state import HookState
from .register import fsdp_modules


class ReplicaAllReduce:
    """The all-reduce hook of FSDP module `index`: average its reduce-scatter output across
    `state`'s process group (the replicas), then return (FSDP waits for nothing)."""

    def __init__(self, state: HookState, index: int, module):
        self.state = state
        self.index = index
        self.module = module
        self.calls = 0

    def shard_shapes(self) -> list[torch.Size]:
        """The padded shard shapes laid end to end in the reduce-scatter output (PowerSGD
        compresses each as a matrix)."""
        group = self.module._get_fsdp_state()._fsdp_param_group
        return [p.padded_sharded_param_size for p in group.fsdp_params]

    def settings(self, flat: torch.Tensor) -> dict[str, str]:
        """What every replica must agree on (see `gradcomp.comm.agreement`)."""
        comp = self.state.compressor
        random = comp.shared_state() if comp.shared_randomness else b""
        return {"method": comp.name, "options": repr(sorted(comp.options().items())),
                "hook options": repr(sorted(self.state.hook_options().items())),
                "shard": f"module {self.index}, {flat.numel()} x {str(flat.dtype)[6:]}",
                "iteration": str(self.calls),
                "shared random state": hashlib.sha256(random).hexdigest()[:12]}

    def __call__(self, reduce_output: torch.Tensor) -> None:
        if not self.state.agreed:
            check_agreement(self.settings(reduce_output), self.state.ranks, reduce_output.device)
            self.state.agreed = True
        iteration, self.calls = self.calls, self.calls + 1
        self.state.iteration = max(self.state.iteration, self.calls)
        bucket = Bucket(reduce_output.view(-1), self.index, self.shard_shapes)
        average(self.state, bucket, iteration).wait()


class ReplicaState(HookState):
    """The DDP hook's state for the replica all-reduce; its checkpoint also names the global
    rank, since ranks of different shard groups have the same rank among their replicas but
    hold different shards' residuals and memories."""

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "global_rank": dist.get_rank()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("global_rank") if isinstance(state, dict) else None
        if saved is not None and saved != dist.get_rank():
            raise ValueError(f"this checkpoint holds the replica state of global rank {saved}; "
                             f"this is rank {dist.get_rank()}: the state is per rank (it holds "
                             "this rank's shards), so load each rank its own")
        super().load_state_dict(state)


def register_replicas(model, replicate_group, method: str = "bf16", **options) -> ReplicaState:
    """Average the gradients of every FSDP module of `model` across `replicate_group` with the
    DDP hook's `method` and options (`gradcomp.comm.build_state`; compression from the first
    iteration unless `start_iter` says otherwise; "auto" is not offered here). Returns the
    `ReplicaState` (telemetry rows: `bucket` is the FSDP module's index; `state_dict()` per
    rank)."""
    if method == "auto":
        raise ValueError("method='auto' is not allowed for the replica all-reduce: choose a "
                         "method by name (e.g. 'bf16', 'int8', 'powersgd')")
    options.setdefault("start_iter", 0)
    checked = build_state(method, process_group=replicate_group, **options)
    state = ReplicaState(checked.compressor, process_group=replicate_group,
                         start_iter=checked.start_iter,
                         min_compression_rate=checked.min_compression_rate,
                         telemetry_limit=checked.telemetry_limit,
                         communicator=checked.communicator, block_size=checked.block_size)
    for index, module in enumerate(fsdp_modules(model)):
        module.set_all_reduce_hook(ReplicaAllReduce(state, index, module))
    return state
