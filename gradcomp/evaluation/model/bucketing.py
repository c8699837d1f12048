"""How gradients are grouped into buckets (fused buffers) that are communicated one at a time.

* `DDP` (PyTorch DistributedDataParallel): gradients in backward order fill a bucket until
  its size reaches the limit; the tensor that crosses the limit stays in the bucket. The first
  bucket's limit is `first_bucket_mb` (torch's ``_DEFAULT_FIRST_BUCKET_BYTES``, 1 MiB), the
  others' `bucket_cap_mb` (default 25 MiB). Sizes count the gradient's own dtype.
* `Horovod` tensor fusion as NetAI 2020 simulated it: gradients accumulate until the backward
  time accumulated since the last flush reaches `cycle_ms` (5 ms) or the buffer reaches
  `fusion_mb` (64 MiB), then the buffer is sent; the remainder at the end of backward.

A bucket is ready when its last gradient is.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..profiles.profiles import Profile

MIB = 1024 * 1024


@dataclass(frozen=True)
class Bucket:
    """Gradient indices (into the profile, ready order) and when the last one is ready."""

    params: tuple[int, ...]
    ready_s: float


def _positive(value, option):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{option}={value!r} is not allowed: it must be a number > 0")


@dataclass(frozen=True)
class DDP:
    bucket_cap_mb: float = 25.0
    first_bucket_mb: float = 1.0

    def __post_init__(self):
        _positive(self.bucket_cap_mb, "bucket_cap_mb")
        _positive(self.first_bucket_mb, "first_bucket_mb")

    def assign(self, profile: Profile) -> list[Bucket]:
        limit, buckets, current, size = self.first_bucket_mb * MIB, [], [], 0
        for i, numel in enumerate(profile.sizes):
            current.append(i)
            size += numel * profile.dtype_bytes
            if size >= limit:
                buckets.append(Bucket(tuple(current), profile.ready_s[i]))
                limit, current, size = self.bucket_cap_mb * MIB, [], 0
        if current:
            buckets.append(Bucket(tuple(current), profile.ready_s[current[-1]]))
        return buckets


@dataclass(frozen=True)
class Horovod:
    cycle_ms: float = 5.0
    fusion_mb: float = 64.0

    def __post_init__(self):
        _positive(self.cycle_ms, "cycle_ms")
        _positive(self.fusion_mb, "fusion_mb")

    def assign(self, profile: Profile) -> list[Bucket]:
        buckets, current, size, since = [], [], 0, 0.0
        for i, numel in enumerate(profile.sizes):
            current.append(i)
            size += numel * profile.dtype_bytes
            if profile.ready_s[i] - since >= self.cycle_ms / 1e3 or size >= self.fusion_mb * MIB:
                buckets.append(Bucket(tuple(current), profile.ready_s[i]))
                current, size, since = [], 0, profile.ready_s[i]
        if current:
            buckets.append(Bucket(tuple(current), profile.ready_s[current[-1]]))
        return buckets


POLICIES = {"ddp": DDP, "horovod": Horovod}


def bucketing_policy(policy) -> DDP | Horovod:
    """A policy from its name ("ddp", "horovod", with defaults) or a DDP / Horovod object."""
    if isinstance(policy, (DDP, Horovod)):
        return policy
    if policy in POLICIES:
        return POLICIES[policy]()
    raise ValueError(f"bucketing={policy!r} is not allowed: choose one of "
                     f"{', '.join(map(repr, POLICIES))} or pass a DDP / Horovod object")
