"""The uncompressed all-reduce: DDP's own averaging, used before `start_iter` and for buckets
the method would not make smaller."""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..ranks import Ranks
from .base import Bucket, Communicator, Sent


class DenseAllReduce(Communicator):
    """Average the bucket in place with one all-reduce (NCCL averages inside the collective;
    elsewhere the bucket is each rank's share of the sum)."""

    label = "allreduce"

    def __init__(self, ranks: Ranks):
        super().__init__(None, ranks)

    def pays(self, bucket: Bucket, min_compression_rate: float) -> bool:
        return True

    def encode(self, bucket: Bucket) -> Sent:
        buf = bucket.buffer
        summed = self.ranks.world_size > 1 and not self._averages()
        return Sent(bucket, [buf], buf.numel() * buf.element_size(),
                    shares=[buf] if summed else [])

    def exchange(self, sent: Sent) -> torch.futures.Future:
        op = dist.ReduceOp.AVG if self._averages() else dist.ReduceOp.SUM
        work = dist.all_reduce(sent.wire[0], op=op, group=self.ranks.group, async_op=True)
        return work.get_future()

    def decode(self, sent: Sent, received) -> torch.Tensor:
        return sent.bucket.buffer

    def _averages(self) -> bool:
        """Whether the all-reduce itself averages (NCCL, more than one rank)."""
        return self.ranks.world_size > 1 and self.ranks.backend == "nccl"
