"""Compressed gradient communication for FSDP2 (`torch.distributed.fsdp.fully_shard`):

    state = gradcomp.fsdp.register(model, "int8")

replaces the reduce-scatter of every FSDP module of `model` by an all-to-all of compressed
chunks that each shard's owner decodes and sums in float32 (`alltoall`), and

    gradcomp.fsdp.register_replicas(model, replicate_group, "powersgd")

compresses HSDP's all-reduce across replicas with the DDP hook's communicators (`replicas`).
"""
from .register import METHODS, fsdp_modules, register
from .replicas import ReplicaAllReduce, ReplicaState, register_replicas
from .reduce_scatter import CompressedReduceScatter
from .state import FSDPState

__all__ = ["CompressedReduceScatter", "FSDPState", "METHODS", "ReplicaAllReduce", "ReplicaState",
           "fsdp_modules", "register", "register_replicas"]
