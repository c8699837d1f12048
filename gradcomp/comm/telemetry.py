"""Per-bucket timings of the hook: encode, communication and decode, and bytes.

On CUDA the marks are events on the current stream (read only when asked, so the hook never
synchronises); on CPU they are `time.perf_counter()` readings.
"""
from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch


def mark(device: torch.device):
    if device.type == "cuda":
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event
    return time.perf_counter()


def seconds_between(start, end) -> float:
    """Seconds from mark `start` to mark `end` (CUDA events: waits for `end`)."""
    if isinstance(start, float):
        return end - start
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def span(start, end) -> float:
    """`seconds_between`, NaN where a mark was not taken."""
    return math.nan if start is None or end is None else seconds_between(start, end)


@dataclass
class BucketRecord:
    """One bucket's trip through a communicator: what it was, what this rank sent, and when
    it `started` and was `encoded`, `exchanged` and `decoded` (marks, taken on `device` once
    `time` is called; None: not reached, or untimed). `between_s`: host seconds of codec work
    done inside the exchange (PowerSGD's second round, computed between its all-reduces),
    which the communication time includes but is not communication."""

    iteration: int
    bucket: int
    method: str
    numel: int
    bytes_original: int
    bytes_sent: int
    uncompressed: str = ""  # why the bucket went uncompressed ("": it did not)
    device: torch.device | None = None
    started: Any = None
    encoded: Any = None
    exchanged: Any = None
    decoded: Any = None
    between_s: float = 0.0

    def time(self, device: torch.device) -> BucketRecord:
        """Start timing on `device`: mark `started`."""
        self.device = device
        self.started = mark(device)
        return self

    def now(self):
        """A mark now, or None when the record is untimed."""
        return None if self.device is None else mark(self.device)

    @property
    def complete(self) -> bool:
        return self.started is not None and self.decoded is not None

    def row(self) -> dict:
        return {"iteration": self.iteration, "bucket": self.bucket, "method": self.method,
                "numel": self.numel, "bytes_original": self.bytes_original,
                "bytes_sent": self.bytes_sent, "encode_s": span(self.started, self.encoded),
                "comm_s": span(self.encoded, self.exchanged),
                "decode_s": span(self.exchanged, self.decoded),
                "uncompressed": self.uncompressed}


class Telemetry:
    """A bounded log of `BucketRecord`s (the newest `limit` buckets)."""

    def __init__(self, limit: int = 100_000):
        self.records: deque[BucketRecord] = deque(maxlen=limit)

    def start(self, record: BucketRecord, device: torch.device) -> BucketRecord:
        """Keep `record` and start timing it."""
        self.records.append(record.time(device))
        return record

    def rows(self) -> list[dict]:
        """One dict per recorded bucket (complete records only)."""
        return [r.row() for r in list(self.records) if r.complete]

    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows())

    def clear(self) -> None:
        self.records.clear()
