"""Payloads that do not sum (top-k, QSGD, sign, ...): one all-gather of every rank's bytes,
then the compressor's `aggregate` (the mean, or a majority vote)."""
from __future__ import annotations

import torch

from .. import wire
from .base import Bucket, Communicator, Sent


class AllGather(Communicator):
    """Each rank packs its payload into one byte buffer; every rank receives all of them (into
    receive buffers kept per bucket: the rows of one tensor, so that a method with a kernel for
    it decodes their aggregate in one pass) and decodes their aggregate."""

    def __init__(self, compressor, ranks):
        super().__init__(compressor, ranks)
        self._receive: dict[int, tuple[torch.Tensor, list[torch.Tensor]]] = {}

    def encode(self, bucket: Bucket) -> Sent:
        payload = self.compressor.compress(bucket.buffer, key=bucket.index)
        return Sent(bucket, [wire.pack_bytes(payload.tensors)], payload.nbytes, payload)

    def exchange(self, sent: Sent) -> torch.futures.Future:
        send = sent.wire[0]
        receive = self.receive_buffers(sent.bucket.index, send.numel(), send.device)
        return wire.all_gather_bytes(send, receive, self.ranks.group)

    def decode(self, sent: Sent, received) -> torch.Tensor:
        mine = sent.context
        rows = self._rows_of(sent.bucket.index, received)
        if rows is not None:
            out = self.compressor.aggregate_rows(rows, wire.offsets(mine.tensors), mine,
                                                 sent.bucket.buffer)
            if out is not None:
                return out
        payloads = [mine.with_tensors(wire.unpack_bytes(r, mine.tensors)) for r in received]
        return self.compressor.aggregate_into(payloads, sent.bucket.buffer)

    def receive_buffers(self, bucket_index: int, nbytes: int, device) -> list[torch.Tensor]:
        """One receive buffer per rank for a bucket, reused across iterations: the first
        `nbytes` of each row of one uint8 tensor whose rows are 16-byte aligned."""
        kept = self._receive.get(bucket_index)
        if kept is None or kept[1][0].numel() != nbytes or kept[0].device != device:
            rows = torch.empty(self.ranks.world_size, -(-nbytes // 16) * 16, dtype=torch.uint8,
                               device=device)
            kept = rows, list(rows[:, :nbytes].unbind(0))
            self._receive[bucket_index] = kept
        return kept[1]

    def _rows_of(self, bucket_index: int, received) -> torch.Tensor | None:
        """The rows tensor behind `received` (whole rows, padding included) when it is this
        bucket's receive buffers."""
        kept = self._receive.get(bucket_index)
        if kept is None or len(received) != len(kept[1]) or any(
                r is not b for r, b in zip(received, kept[1])):
            return None
        return kept[0]
