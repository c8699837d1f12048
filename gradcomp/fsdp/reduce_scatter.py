"""The object FSDP calls in place of its reduce-scatter (`FSDPModule.set_custom_reduce_scatter`)."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter

from .state import FSDPState


class CompressedReduceScatter(ReduceScatter):
    """FSDP's reduce-scatter of one FSDP module, through `state` (synchronous: it returns
    None, and FSDP waits on nothing). FSDP passes op SUM when told
    `set_force_sum_reduction_for_comms(True)` (which `register` does) and AVG otherwise;
    other ops (a pre-multiplied sum) are refused."""

    def __init__(self, state: FSDPState, module_index: int):
        self.state = state
        self.module_index = module_index

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group,
                 op, async_op: bool = False):
        if op not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            raise ValueError(f"gradcomp's FSDP reduce-scatter sums or averages, and FSDP asked "
                             f"for {op}: call set_force_sum_reduction_for_comms(True) on the "
                             "module (gradcomp.fsdp.register does)")
        self.state.reduce_scatter(self.module_index, output_tensor, input_tensor, group,
                                  average=op == dist.ReduceOp.AVG)
        return None
