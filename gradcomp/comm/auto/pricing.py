"""What `auto`'s choice measures and how it prices a transfer (`choice`): a `Sample` of one
bucket, a candidate's `Transfer` priced by the collectives' cost model on a flat ring, and the
fit of that ring's latency and bandwidth to measured transfers.

Model (docs/model.md's costs, per bucket b and candidate c): time = codec(b, c) + comm(b, c), with
codec the measured encode + decode seconds and comm the evaluation model's price of the
collective (`gradcomp.collectives.costs.cost`, the same function) on a flat ring of p workers
at latency alpha and 1/x bytes/s, once per round (each round its share of the bytes): rounds *
k_alpha * alpha + k_bytes * bytes(b, c) * x for a ring all-reduce (k_alpha = 2(p-1), k_bytes =
2(p-1)/p) or an all-gather (p-1, p-1) (`costs.ring_factors`); alpha (latency) and x (seconds
per byte, 1/bandwidth) are fitted by non-negative least squares to the communication times of
buckets whose collective started on an idle link (the previous bucket's had finished), so
queueing behind other buckets does not count. On a cluster of several GPUs per node the fit
is of one effective tier: what the measured collectives took there."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ...collectives import costs


@dataclass(frozen=True)
class Transfer:
    """How a candidate's bytes travel: all-reduce or all-gather, in how many rounds."""

    kind: str  # "allreduce" or "allgather"
    rounds: int = 1

    def factors(self, workers: int) -> tuple[float, float]:
        """(latency steps, bytes factor) of one transfer of this route (all its rounds)."""
        steps, per_byte = costs.ring_factors(self.kind, workers)
        return self.rounds * steps, per_byte

    def seconds(self, workers: int, nbytes: float, alpha: float, x: float) -> float:
        """The collectives' price of sending `nbytes` this way (each round its share) on a
        flat ring of `workers` at latency `alpha` and `x` seconds per byte."""
        return self.rounds * costs.cost(self.kind, flat_ring(workers, alpha, x),
                                        nbytes / self.rounds)


@dataclass
class Sample:
    """One bucket carried by one candidate in one measured iteration."""

    iteration: int
    bucket: int
    candidate: int
    codec_s: float
    comm_s: float
    nbytes: int
    idle_link: bool  # its collective started after the previous bucket's had finished
    warmup: bool = False  # the first iteration of its candidate in an exploration


def fit_network(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(alpha, x) >= 0 minimising sum (a alpha + b x - t)^2 over points (a, b, t)."""
    if not points:
        return 0.0, 0.0
    saa = sum(a * a for a, _, _ in points)
    sbb = sum(b * b for _, b, _ in points)
    sab = sum(a * b for a, b, _ in points)
    sat = sum(a * t for a, _, t in points)
    sbt = sum(b * t for _, b, t in points)
    det = saa * sbb - sab * sab
    if det > 1e-12 * max(saa * sbb, 1e-300):
        alpha, x = (sat * sbb - sbt * sab) / det, (sbt * saa - sat * sab) / det
        if alpha >= 0 and x >= 0:
            return alpha, x
    only_x = max(sbt / sbb, 0.0) if sbb else 0.0
    only_alpha = max(sat / saa, 0.0) if saa else 0.0
    err_x = sum((b * only_x - t) ** 2 for _, b, t in points)
    err_alpha = sum((a * only_alpha - t) ** 2 for a, _, t in points)
    return (0.0, only_x) if err_x <= err_alpha else (only_alpha, 0.0)



@functools.lru_cache(maxsize=16)
def flat_ring(workers: int, alpha: float, x: float) -> costs.Tiers:
    """A ring of `workers` at latency `alpha` and `x` seconds per byte (built once per fit:
    the hook prices every bucket of an iteration with it)."""
    return costs.Tiers(workers, alpha=alpha, bytes_per_s=1 / x if x > 0 else math.inf)


def idle_points(samples, transfers: list[Transfer], workers: int
                ) -> list[tuple[float, float, float]]:
    """(latency steps, bytes x factor, seconds) of the samples whose link was idle, for
    `fit_network`."""
    points = []
    for s in samples:
        if s.idle_link:
            steps, per_byte = transfers[s.candidate].factors(workers)
            points.append((steps, per_byte * s.nbytes, s.comm_s))
    return points


def refit_bandwidth(points, alpha: float, x: float) -> float:
    """Seconds per byte from recent idle-link transfers (`idle_points`), latency `alpha` kept;
    `x` when there is nothing to fit. Only transfers whose bytes cost at least their latency
    (at `x`) count: the time of a small one (PowerSGD's factors) is mostly latency, and what
    the fitted latency over- or underestimates of it would read as a bandwidth change
    (measured on the testbed: x refitted to 0 from PowerSGD's transfers at 100 Mbit/s, which
    sent the next decision back to the uncompressed candidate)."""
    points = [(a, b, t - a * alpha) for a, b, t in points if x == 0 or b * x >= a * alpha]
    sbb = sum(b * b for _, b, _ in points)
    return max(sum(b * t for _, b, t in points) / sbb, 0.0) if sbb else x


def by_bucket_and_candidate(samples) -> dict[tuple[int, int], list[Sample]]:
    groups: dict[tuple[int, int], list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.bucket, s.candidate), []).append(s)
    return groups


def relative_change(now: float, then: float) -> float:
    if then <= 0:
        return 0.0 if now <= 0 else float("inf")
    return abs(now / then - 1)
