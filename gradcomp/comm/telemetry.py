"""Per-bucket timings of the hook: encode, communication and decode, and bytes.

On CUDA the marks are events on the current stream (read only when asked, so the hook never
synchronises); on CPU they are `time.perf_counter()` readings.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

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


@dataclass
class BucketRecord:
    iteration: int
    bucket: int
    method: str
    numel: int
    bytes_original: int
    bytes_sent: int
    marks: list = field(default_factory=list)  # start, encoded, communicated, decoded
    uncompressed: str = ""  # why the bucket went uncompressed ("": it did not)

    def row(self) -> dict:
        names = ("encode_s", "comm_s", "decode_s")
        times = {n: float("nan") for n in names}
        for name, a, b in zip(names, self.marks, self.marks[1:]):
            times[name] = seconds_between(a, b)
        return {"iteration": self.iteration, "bucket": self.bucket, "method": self.method,
                "numel": self.numel, "bytes_original": self.bytes_original,
                "bytes_sent": self.bytes_sent, **times, "uncompressed": self.uncompressed}


class Telemetry:
    """A bounded log of `BucketRecord`s (the newest `limit` buckets)."""

    def __init__(self, limit: int = 100_000):
        self.records: deque[BucketRecord] = deque(maxlen=limit)

    def start(self, record: BucketRecord, device: torch.device) -> BucketRecord:
        record.marks.append(mark(device))
        self.records.append(record)
        return record

    def rows(self) -> list[dict]:
        """One dict per recorded bucket (complete records only)."""
        return [r.row() for r in list(self.records) if len(r.marks) == 4]

    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows())

    def clear(self) -> None:
        self.records.clear()
