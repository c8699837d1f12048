"""The communicator interface, and the one place where a bucket is averaged.

Every communicator averages a bucket in one call, the same way whatever the method:

    done = communicator.average(bucket, record)   # a Future; its value: the bucket's buffer

    start(bucket)     encode (compress, locally); each rank's share of what the exchange
                      sums divided by the world size
    exchange(sent)    the collectives (a Future)
    end(sent, got)    sums averaged only after the exchange divided by the world size (PowerSGD's
                      Q); decode: the average written into the bucket's buffer

`record` (a `BucketRecord`) gets the bytes sent and, when it is timed, the moments the bucket
was encoded, exchanged and decoded. A communicator implements `encode`, `exchange` and `decode`
and says which tensors are summed (`Sent.shares`, `sums`); it never divides by the world size
itself.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import torch

from ...compressors import Compressor
from ..ranks import Ranks
from ..telemetry import BucketRecord


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
    `shares`: the wire tensors the exchange sums, each rank's share divided by the world size
    before it leaves (`average`); `nbytes` is what this rank sends (a communicator whose traffic
    depends on the other ranks sets it in `decode`); `between_s`: host seconds of codec work
    done inside the exchange (PowerSGD's second round is computed between its two
    all-reduces), which the communication time of the exchange includes but is not
    communication."""

    bucket: Bucket
    wire: list[torch.Tensor]
    nbytes: int
    context: Any = None
    between_s: float = 0.0
    shares: list[torch.Tensor] = field(default_factory=list)


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

    # -- the one bucket path --------------------------------------------------------------
    def average(self, bucket: Bucket, record: BucketRecord,
                encoded: Callable[[Sent], None] | None = None) -> torch.futures.Future:
        """Average `bucket.buffer` across `ranks`: `start`, `exchange`, `end` (module
        docstring); the future's value is the buffer, holding the average (or the
        exchange's error). `encoded(sent)` is called after `start`, before the exchange."""
        sent = self.start(bucket)
        record.encoded = record.now()
        record.bytes_sent = sent.nbytes
        if encoded is not None:
            encoded(sent)

        def finish(fut: torch.futures.Future) -> torch.Tensor:
            received = fut.value()  # raises if a collective failed
            record.exchanged = record.now()
            out = self.end(sent, received)
            record.decoded = record.now()
            record.bytes_sent, record.between_s = sent.nbytes, sent.between_s
            return out

        return self.exchange(sent).then(finish)

    def start(self, bucket: Bucket) -> Sent:
        """`encode`, then each rank's share of a sum divided by the world size."""
        sent = self.encode(bucket)
        self._divide(sent.shares)
        return sent

    def end(self, sent: Sent, received) -> torch.Tensor:
        """The `sums` divided by the world size, then `decode`."""
        self._divide(self.sums(sent, received))
        return self.decode(sent, received)

    def _divide(self, tensors: list[torch.Tensor]) -> None:
        """The hook path's only division by the world size (`tests/test_layout.py`)."""
        for t in tensors:
            t.div_(self.ranks.world_size)

    # -- what each communicator implements ------------------------------------------------
    @abstractmethod
    def encode(self, bucket: Bucket) -> Sent:
        """Compress the bucket; nothing leaves this rank yet."""

    @abstractmethod
    def exchange(self, sent: Sent) -> torch.futures.Future:
        """Issue the collectives; the future's value is what `decode` takes."""

    def sums(self, sent: Sent, received) -> list[torch.Tensor]:
        """Sums in `received` that are averaged after the exchange (none but PowerSGD's Q)."""
        return []

    @abstractmethod
    def decode(self, sent: Sent, received) -> torch.Tensor:
        """Write the average into `sent.bucket.buffer` and return it."""


def write_back(buf: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """Copy `result` into the bucket buffer `buf` unless it already is that memory."""
    flat = result.reshape(-1)
    if flat.data_ptr() != buf.data_ptr() or flat.dtype != buf.dtype:
        buf.copy_(flat)
    return buf
