"""The communicator interface: how one bucket's gradient travels between ranks.

A hook averages every bucket in the same three steps, whatever the method:

    sent = communicator.encode(bucket)                       # compress (local)
    received = communicator.exchange(sent)                   # a Future (collectives)
    result = communicator.decode(sent, received.value())     # write the average into the bucket
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import torch

from ...compressors import Compressor
from ..ranks import Ranks


@dataclass
class Bucket:
    """One bucket as a communicator sees it: the flat gradient (the average is written back
    into it), its index (the compressor's key for residuals and memories), and the shapes of
    the tensors laid end to end in it (asked for only by methods that need them)."""

    buffer: torch.Tensor
    index: int
    tensor_shapes: Callable[[], list[torch.Size]]


@dataclass
class Sent:
    """One bucket in flight: what `encode` put on the wire and what `decode` needs back.
    `nbytes` is what this rank sends (a communicator whose traffic depends on the other
    ranks sets it in `decode`); `between_s`: host seconds of codec work done inside the
    exchange (PowerSGD's second round is computed between its two all-reduces), which the
    communication time of the exchange includes but is not communication."""

    bucket: Bucket
    wire: list[torch.Tensor]
    nbytes: int
    context: Any = None
    between_s: float = 0.0


class Communicator(ABC):
    """Moves one bucket between ranks; built once per hook state, owns its buffers (the
    per-bucket gloo groups of chained rounds come from `Ranks.round_group`).

    `label` names it in telemetry (the method's name, or "allreduce" for the uncompressed
    path)."""

    label: ClassVar[str] = ""

    def __init__(self, compressor: Compressor | None, ranks: Ranks):
        self.compressor = compressor
        self.ranks = ranks
        self._pays: dict[tuple[int, int, torch.dtype], bool] = {}

    @property
    def name(self) -> str:
        return self.label or self.compressor.name

    def pays(self, bucket: Bucket, min_compression_rate: float) -> bool:
        """Whether compressing `bucket` makes it at least `min_compression_rate` times smaller
        (decided once per bucket index, size and dtype)."""
        buf = bucket.buffer
        key = (bucket.index, buf.numel(), buf.dtype)
        if key not in self._pays:
            sent = self.compressor.wire_nbytes(buf.numel(), buf.dtype)
            self._pays[key] = sent * min_compression_rate < buf.numel() * buf.dtype.itemsize
        return self._pays[key]

    @abstractmethod
    def encode(self, bucket: Bucket) -> Sent:
        """Compress the bucket; nothing leaves this rank yet."""

    @abstractmethod
    def exchange(self, sent: Sent) -> torch.futures.Future:
        """Issue the collectives; the future's value is what `decode` takes."""

    @abstractmethod
    def decode(self, sent: Sent, received) -> torch.Tensor:
        """Write the average into `sent.bucket.buffer` and return it."""


def write_back(buf: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """Copy `result` into the bucket buffer `buf` unless it already is that memory."""
    flat = result.reshape(-1)
    if flat.data_ptr() != buf.data_ptr() or flat.dtype != buf.dtype:
        buf.copy_(flat)
    return buf
