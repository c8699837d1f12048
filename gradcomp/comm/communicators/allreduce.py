"""Summable payloads (fp16, bf16, random-k with a shared seed): one all-reduce per wire dtype."""
from __future__ import annotations

import torch

from .. import wire
from .base import Bucket, Communicator, Sent, write_back


class AllReduce(Communicator):
    """Each rank compresses its bucket; its floating-point wire tensors are its shares of the
    sums, which decode to the average (the compressor's `decompress` is linear)."""

    def encode(self, bucket: Bucket) -> Sent:
        payload = self.compressor.compress(bucket.buffer, key=bucket.index)
        tensors = list(payload.tensors)
        return Sent(bucket, tensors, payload.nbytes, payload,
                    shares=[t for t in tensors if t.is_floating_point()])

    def exchange(self, sent: Sent) -> torch.futures.Future:
        return wire.all_reduce_sum(sent.wire, self.ranks.group)

    def decode(self, sent: Sent, received) -> torch.Tensor:
        average = self.compressor.decompress(sent.context.with_tensors(received))
        return write_back(sent.bucket.buffer, average)
