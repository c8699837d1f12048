"""Timed turns of `auto`'s choice (`choice`): iterations carried in turn by different
candidates, each timed on every rank from the end of the iteration before to its own end
(when its last bucket was decoded), the slowest rank's time kept.

A turn is `TURN` iterations, and only its last is timed: the first after a switch pays for
it (the previous candidate's error-feedback residual added to the gradient, the new one's
buffers made afresh). With every iteration timed, a candidate's turns took a median 18%
longer than its fixed hook's iterations in the same job for top-k with error feedback, 9% for
PowerSGD, 7% for bf16 and 13% for the uncompressed all-reduce, on the 2-core two-tier
testbed: the rounds held top-k's switches against it (`testbed-two-tier-2026-11-29-margin`).

Ends, not starts: the ranks leave a collective together, but each reaches an iteration's
first bucket when its own backward gets there. Timed from first bucket to first bucket, the
slowest and the fastest rank's time of one turn lay a median 25% of an iteration apart, and
the rounds put the fastest candidate first in 2 of 5 jobs at flat 2.5 Gbit/s; from end to
end, 10% apart, and 2 of 3 (`testbed-two-tier-2026-11-29-turns`). Separate DDP models
carrying iterations in the same turns ran their steady time: the turns themselves cost
nothing measurable.

`Trial`: before a re-pricing moves buckets to other candidates on the table's word, the
decisions in force and the proposed ones carry the buckets in turn for `rounds` turns each
(now, proposed, proposed, now, now, ... by iteration: the decisions in force carried the one
before, so the first is a turn's last; neither always follows the other), and the proposal
is taken only when its median iteration took less time. A bucket's
price is fitted to few noisy samples: on the 2-core two-tier testbed one iteration's
bandwidth refit (a bucket slower than twice its price) halved the bandwidth and moved a run
from bf16 to PowerSGD for good, and re-pricings moved two runs to the uncompressed all-reduce
(one priced it at 11.5 ms against bf16's 30.9): 215 and 218 ms per iteration against 187 and
194 for the two runs that stayed on bf16 (`testbed-two-tier-2026-11-29-codec-share`).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..telemetry import seconds_between

#: Iterations of one turn; the first is not timed (module docstring).
TURN = 2


def turn_seconds(marks: dict, iterations, group_of: Callable[[int], int], reduce
                 ) -> dict[int, list[float]]:
    """group -> the seconds of `iterations` it carried, each from the iteration's mark to the
    next's, the slowest rank's (`reduce`: the element-wise maximum over ranks); an iteration
    a rank did not time (e.g. across a resume) is no evidence."""
    iterations = list(iterations)
    own = [seconds_between(marks[i], marks[i + 1]) if i in marks and i + 1 in marks
           else -math.inf for i in iterations]
    slowest = reduce(torch.tensor(own, dtype=torch.float64)).tolist()
    times: dict[int, list[float]] = {}
    for i, s in zip(iterations, slowest):
        if s >= 0:
            times.setdefault(group_of(i), []).append(s)
    return times


#: Standard errors by which a contender's median turn must exceed the fastest's to leave
#: the confirmation rounds (`still_close`).
CLEARLY_BEHIND = 2.0


def still_close(times: dict[int, list[float]], behind: float = CLEARLY_BEHIND) -> list[int]:
    """The contenders (of `times`: contender -> its timed turns' seconds) whose median turn is
    within `behind` standard errors of the fastest's: on the log scale, each median's
    error 1.2533 sigma / sqrt(n) (a normal sample's), sigma pooled from every turn's distance
    to its contender's median (1.4826 x their median). On the 2-core two-tier testbed one
    iteration's time varies by sigma 9-14% around a fixed hook's median, where the best two
    candidates lie 1-6% apart (`testbed-two-tier-2026-11-29-turns`): five turns each tell
    apart only what is 15-20% behind."""
    logs = {c: [math.log(t) for t in ts] for c, ts in times.items() if ts}
    if not logs:
        return []
    middle = {c: statistics.median(v) for c, v in logs.items()}
    sigma = 1.4826 * statistics.median(abs(x - middle[c]) for c, v in logs.items() for x in v)
    best = min(middle, key=middle.get)
    return [c for c in sorted(logs) if middle[c] - middle[best] <= behind * 1.2533 * sigma
            * math.sqrt(1 / len(logs[c]) + 1 / len(logs[best]))]


@dataclass
class Trial:
    """The decisions in force against `proposed` (bucket -> candidate), from `start` on."""

    start: int
    proposed: dict[int, int]
    rounds: int
    marks: dict = field(default_factory=dict)  # iteration -> this rank's mark

    @property
    def end(self) -> int:
        """The first iteration after the trial (its last turn's time ends there)."""
        return self.start + 2 * TURN * self.rounds

    def running(self, iteration: int) -> bool:
        return self.start <= iteration < self.end

    def timing(self, iteration: int) -> bool:
        """Whether `iteration`'s mark is wanted: a turn's start or the last one's end."""
        return self.start <= iteration <= self.end

    def proposing(self, iteration: int) -> bool:
        """Whether the proposal carries `iteration`: odd turns of `TURN` iterations, the
        first turn (the decisions in force) one iteration shorter (now, proposed, proposed,
        now, ...)."""
        return (iteration - self.start + 1) // TURN % 2 == 1

    def seconds(self, reduce) -> tuple[float, float]:
        """(in force, proposed): the median seconds of each one's turns (their last
        iterations), NaN where none was timed."""
        times = turn_seconds(self.marks, range(self.start + TURN - 2, self.end, TURN),
                             lambda i: int(self.proposing(i)), reduce)
        return tuple(statistics.median(times[g]) if times.get(g) else math.nan
                     for g in (0, 1))

    def state_dict(self) -> dict:
        return {"start": self.start, "proposed": dict(self.proposed), "rounds": self.rounds}
