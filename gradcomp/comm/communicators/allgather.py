"""Payloads that do not sum (top-k, QSGD, sign, ...): one all-gather of every rank's bytes,
then the compressor's `aggregate` (the mean, or a majority vote)."""
from __future__ import annotations

import torch

from .. import wire
from .base import Bucket, Communicator, Sent


class AllGather(Communicator):
    """Each rank packs its payload into one byte buffer; every rank receives all of them (into
    receive buffers kept per bucket) and decodes their aggregate."""

    def __init__(self, compressor, ranks):
        super().__init__(compressor, ranks)
        self._receive: dict[int, list[torch.Tensor]] = {}

    def encode(self, bucket: Bucket) -> Sent:
        payload = self.compressor.compress(bucket.buffer, key=bucket.index)
        return Sent(bucket, [wire.pack_bytes(payload.tensors)], payload.nbytes, payload)

    def exchange(self, sent: Sent) -> torch.futures.Future:
        send = sent.wire[0]
        receive = self._buffers(sent.bucket.index, send.numel(), send.device)
        return wire.all_gather_bytes(send, receive, self.ranks.group)

    def decode(self, sent: Sent, received) -> torch.Tensor:
        mine = sent.context
        payloads = [mine.with_tensors(wire.unpack_bytes(r, mine.tensors)) for r in received]
        return self.compressor.aggregate_into(payloads, sent.bucket.buffer)

    def _buffers(self, bucket_index: int, nbytes: int, device) -> list[torch.Tensor]:
        """Receive buffers for one bucket, reused across iterations."""
        bufs = self._receive.get(bucket_index)
        if bufs is None or bufs[0].numel() != nbytes or bufs[0].device != device:
            bufs = [torch.empty(nbytes, dtype=torch.uint8, device=device)
                    for _ in range(self.ranks.world_size)]
            self._receive[bucket_index] = bufs
        return bufs
