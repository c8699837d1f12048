"""How the `auto` hook chooses a candidate per bucket: an exploration schedule, measurements,
a small performance model fitted to them (`pricing`), and decisions all ranks take alike.

Schedule: from `start` on, every candidate carries every bucket for `explore_iters`
consecutive iterations (the first of each is a warm-up, not measured), in `order` (the hook
gives the most compressing first); then each bucket goes with the candidate of least
predicted time until the next exploration, `redecide_every` iterations later. A candidate
whose warm-up spent more than `SKIP_FACTOR` times as long communicating every bucket as the
fastest candidate explored so far took for it in all (encode + communication + decode)
cannot win: its other iterations are skipped, and it is priced from its warm-up (on a slow
link the uncompressed candidates cost one iteration each, not `explore_iters`).

Confirmation: that scan leaves each candidate `explore_iters` - 1 measured iterations, one
after another, and on a busy machine a single iteration's time varies by 30-50% (the 2-core
testbed under load), more than the 3-10% between the best candidates there; measured in
separate stretches, a candidate explored while the machine was busier loses by that alone.
So when more than one candidate is priced within `confirm_margin` of a bucket's best (the
contenders: those candidates, over every such bucket), they carry every bucket in turn, two
iterations each (`trial.TURN`), for `confirm_rounds` rounds (each round's order rotated by
one, so that no contender always runs first), decided on the scan's reduced samples (every
rank runs the same rounds). Each turn's second iteration is timed (the first pays for the
switch), the slowest rank's (`trial`). The rounds race on: after every `confirm_rounds`, the
contenders clearly slower than the fastest leave (`trial.still_close`) and the others go on,
until one is left or they have had `confirm_max_rounds` rounds. The table is then priced
from the medians of all samples: a bucket whose best is priced within the margin of other
contenders takes the one of least median iteration time (`rounds`), which also holds what a
codec costs the compute beside it (the table alone picked candidates 12-13% slower per
iteration than the fastest at 2 of 6 configurations of the 2-core two-tier testbed). That
stands while they stay within the margin.

Agreement: every rank measures its own clock, so the samples are reduced across ranks before
anything is decided: codec times are the slowest rank's; communication times the least any
rank saw (a rank that reached the collective early also waited for the others), idle links
only where idle on every rank. Every decision is then the same function of the same numbers
on every rank. During an exploration the samples are reduced when they are needed (one
all-reduce each). After a decision the samples are reduced as they come, a few iterations'
at a time, never waited for (`stream`).

Drift: every `check_every` iterations after a decision, the codec times of the chosen
candidates and the bandwidth refitted from the reduced samples since the last check (the
transfers whose bytes cost at least their latency) are compared with the table (codec changes
relative to the bucket's predicted time); when one moved by more than `drift`, the table takes
the new values and every bucket is decided again (no new exploration needed: the model
re-prices every candidate with the new network). Sudden slowdowns are not left to the next
check: when a bucket whose link was idle took over `slowdown` times its predicted time, the
bandwidth is refitted as soon as the ranks have agreed on that sample, from the transfers
since its iteration alone (the window's would still be mostly the old rate's) and, when it
moved by more than `drift`, every bucket is decided again (codec times are left to the
periodic check).

Trial: a re-pricing that would move buckets moves none yet: the decisions in force and the
proposed ones take `confirm_rounds` timed turns each, and the proposal is taken only when its
median iteration took less time (`trial`; untimed, the table's word). Its times become the
`rounds`, so a later re-pricing within the margin decides by them.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import torch

from .pricing import (Sample, Transfer, by_bucket_and_candidate, fit_network, idle_points,
                      refit_bandwidth, relative_change)
from .stream import Launch, Reduce, SampleStream
from .trial import TURN, Trial, still_close, turn_seconds

#: A warm-up's communication over the best bucket time that ends an exploration early (a
#: margin for the noise of single samples: the uncompressed candidates skipped on a slow link
#: communicate 10-30x longer than a compressed one takes).
SKIP_FACTOR = 2.0


@dataclass
class Chooser(SampleStream):
    """The per-bucket choice of `auto` (module docstring); `state_dict()` checkpoints it."""

    transfers: list[Transfer]
    workers: int
    start: int = 1
    explore_iters: int = 3
    check_every: int = 10
    redecide_every: int = 1000
    drift: float = 0.2
    slowdown: float | None = 2.0  # None: periodic checks only
    order: list[int] | None = None  # exploration order of the candidates (None: as given)
    confirm_rounds: int = 5
    confirm_max_rounds: int = 20
    confirm_margin: float = 1.0
    contenders: list[int] = field(default_factory=list)  # confirmed from `confirm_start` on
    confirm_start: int | None = None
    stage_rounds: int = 0  # rounds from `confirm_start` on
    rounds_done: int = 0  # rounds before `confirm_start`
    turn_times: dict[int, list[float]] = field(default_factory=dict)  # contender -> seconds
    explore_start: int | None = None  # None: explore from `start`
    skips: list[tuple[int, int]] = field(default_factory=list)  # (position, from iteration)
    decisions: dict[int, int] = field(default_factory=dict)
    rounds: dict[int, float] = field(default_factory=dict)  # contender -> median round seconds
    codec: dict[tuple[int, int], float] = field(default_factory=dict)
    nbytes: dict[tuple[int, int], float] = field(default_factory=dict)
    alpha: float = 0.0
    x: float = 0.0
    decided_at: int | None = None
    codec_moved: bool = False  # the last check saw a codec time move by more than `drift`
    samples: list[Sample] = field(default_factory=list)  # measured, not yet reduced
    explored: list[Sample] = field(default_factory=list)  # this exploration's, reduced
    window: list[Sample] = field(default_factory=list)  # reduced since the last check
    pending: tuple | None = None  # a launched reduction: (iterations, buckets, wait)
    marks: dict = field(default_factory=dict)  # iteration -> the end of the one before (rounds)
    trial: Trial | None = None  # a re-pricing's proposal, timed against the decisions
    last_trial: tuple | None = None  # (its end, seconds in force, proposed, taken)

    @property
    def first(self) -> int:
        """The first iteration of the current (or next) exploration."""
        return self.start if self.explore_start is None else self.explore_start

    @property
    def scan_end(self) -> int:
        """The first iteration after every candidate's stretch of the exploration."""
        position, since = self.skips[-1] if self.skips else (0, self.first)
        return since + (len(self.transfers) - position) * self.explore_iters

    @property
    def explore_end(self) -> int:
        """The first iteration after the exploration (its confirmation rounds included)."""
        if self.confirm_start is None:
            return self.scan_end
        return self.confirm_start + TURN * self.stage_rounds * len(self.contenders)

    def _slot(self, iteration: int) -> tuple[int, int]:
        """(position in the order, first iteration) of the candidate exploring `iteration`."""
        position, since = next(((p, i) for p, i in reversed(self.skips) if i <= iteration),
                               (0, self.first))
        steps = (iteration - since) // self.explore_iters
        return position + steps, since + steps * self.explore_iters

    def exploring(self, iteration: int) -> bool:
        return self.first <= iteration < self.explore_end

    def _candidate_at(self, position: int) -> int:
        return position if self.order is None else self.order[position]

    def choice(self, bucket: int, iteration: int) -> int:
        """The candidate that carries `bucket` in `iteration`."""
        if self.exploring(iteration):
            if self.confirm_start is not None and iteration >= self.confirm_start:
                return self._contender_at(iteration)
            return self._candidate_at(self._slot(iteration)[0])
        decided, trial = self.decisions.get(bucket, 0), self.trial
        if trial is not None and trial.running(iteration) and trial.proposing(iteration):
            return trial.proposed.get(bucket, decided)
        return decided

    def _contender_at(self, iteration: int) -> int:  # in a confirmation round
        turn, n = (iteration - self.confirm_start) // TURN, len(self.contenders)
        return self.contenders[(turn + turn // n) % n]

    def measured(self, iteration: int) -> bool:
        """Whether samples of `iteration` are kept (all while exploring, `warmup` marked)."""
        return self.exploring(iteration) or self.decided_at is not None

    def warmup(self, iteration: int) -> bool:
        """Whether `iteration` is a candidate's first in the scan (the rounds have none)."""
        return (self.exploring(iteration) and iteration < self.scan_end
                and self._slot(iteration)[1] == iteration)

    def timing(self, iteration: int) -> bool:
        """Whether `step` keeps `iteration`'s mark: a round's end, or where the rounds may
        start: the scan's end, or the iteration after the last candidate's warm-up (a skip of
        its exploration, decided in `step`, would end the scan there); after a decision, a
        trial's turns and its end."""
        if self.decided_at is not None:
            return self.trial is not None and self.trial.timing(iteration)
        if not self.confirm_rounds:
            return False
        if self.confirm_start is not None:
            return self.confirm_start < iteration <= self.explore_end
        last, warm = len(self.transfers) - 1, iteration - 1
        return iteration == self.scan_end or (
            last > 0 and self.first <= warm < self.scan_end and self._slot(warm) == (last, warm))

    def step(self, iteration: int, reduce: Reduce, launch: Launch | None = None,
             mark=None) -> bool:
        """At the start of `iteration` (every rank alike): decide after an exploration, check
        for drift, start a periodic exploration; True when the decisions changed. `launch`:
        reduce the samples after a decision without waiting. `mark`: this rank's mark of the
        end of the iteration before, where `timing` holds (None: untimed, the table decides)."""
        if (mark is not None and self.decided_at is None and self.confirm_start is not None
                and self.timing(iteration)):
            self.marks[iteration] = mark
        if self.decided_at is None and self.first <= iteration - 1 < self.scan_end:
            self._skip_if_hopeless(iteration, reduce)
        if iteration == self.explore_end and self.decided_at is None:
            if self._decide_from_exploration(reduce, iteration, mark):
                self.decided_at = iteration
                return True
        if self.decided_at is None or self.exploring(iteration):
            self.pending = None
            return False
        if iteration - self.decided_at >= self.redecide_every:
            self.explore_start, self.decided_at, self.codec_moved = iteration, None, False
            self.trial = None
            self.contenders, self.confirm_start, self.rounds, self.marks = [], None, {}, {}
            self.stage_rounds, self.rounds_done, self.turn_times = 0, 0, {}
            self.samples.clear()
            self.skips, self.explored, self.window, self.pending = [], [], [], None
            return False
        latest = self._stream(iteration, reduce, launch)
        self.window += latest
        if self.trial is not None:
            if mark is not None and self.trial.timing(iteration):
                self.trial.marks[iteration] = mark
            return iteration >= self.trial.end and self._end_trial(iteration, reduce)
        slowed = self._slowed(latest) if self.slowdown is not None else None
        if slowed is not None:
            return self._check_network(iteration, since=slowed)
        if (iteration - self.decided_at) % self.check_every == 0:
            return self._check_drift(iteration)
        return False

    # -- deciding ---------------------------------------------------------------------------
    def _skip_if_hopeless(self, iteration: int, reduce: Reduce) -> None:
        """Right after a candidate's warm-up (not the first candidate's): skip the rest of
        its exploration when, on every bucket, its communication alone took `SKIP_FACTOR`
        times as long as the fastest candidate explored so far took in all (idle links
        only)."""
        position, since = self._slot(iteration - 1)
        if since != iteration - 1 or position == 0:
            return
        self.explored += self._reduced(reduce)
        candidate = self._candidate_at(position)
        best: dict[int, float] = {}
        for (b, c), mine in by_bucket_and_candidate(self.explored).items():
            if c != candidate:
                total = (statistics.median(s.codec_s for s in mine)
                         + statistics.median(s.comm_s for s in mine))
                best[b] = min(best.get(b, math.inf), total)
        warm = [s for s in self.explored if s.iteration == iteration - 1]
        if warm and all(s.idle_link and s.comm_s > SKIP_FACTOR * best.get(s.bucket, math.inf)
                        for s in warm):
            self.skips.append((position + 1, iteration))

    def _decide_from_exploration(self, reduce: Reduce, iteration: int, mark=None) -> bool:
        """Price every candidate from the exploration's samples and decide; at the scan's
        end, when contenders are close, start their confirmation rounds instead (the
        samples kept for the decision after them): False. After the rounds, their
        iteration times take part in the decision (`_decide`)."""
        if self.confirm_start is not None:
            if self._race_on(reduce, iteration, mark):
                return False
            self.rounds = {c: statistics.median(t) for c, t in sorted(self.turn_times.items())}
        samples = self.explored + self._reduced(reduce)
        measured = {s.candidate for s in samples if not s.warmup}
        # a skipped candidate has its warm-up only: priced from it (an upper bound)
        samples = [s for s in samples if not s.warmup or s.candidate not in measured]
        self.alpha, self.x = fit_network(idle_points(samples, self.transfers, self.workers))
        buckets = sorted({s.bucket for s in samples})
        groups = by_bucket_and_candidate(samples)
        for b in buckets:
            for c in range(len(self.transfers)):
                mine = groups.get((b, c), [])
                # unmeasured (a run resumed during the exploration): never chosen
                self.codec[b, c] = (statistics.median(s.codec_s for s in mine) if mine
                                    else math.inf)
                self.nbytes[b, c] = statistics.median(s.nbytes for s in mine) if mine else 0.0
        self._decide(buckets)
        contenders = self._contenders(buckets)
        if self.confirm_start is None and self.confirm_rounds and len(contenders) > 1:
            self.explored, self.contenders, self.confirm_start = samples, contenders, iteration
            self.stage_rounds = min(self.confirm_rounds, self.confirm_max_rounds)
            self.marks = {} if mark is None else {iteration: mark}
            return False
        self.explored, self.marks = [], {}
        return True

    def _race_on(self, reduce: Reduce, iteration: int, mark) -> bool:
        """The stage's turns join `turn_times`; True when rounds are left and 2+ `still_close`."""
        turns = range(self.confirm_start + TURN - 1, self.explore_end, TURN)
        stage = turn_seconds(self.marks, turns, self._contender_at, reduce)
        for c, seconds in stage.items():
            self.turn_times[c] = self.turn_times.get(c, []) + seconds
        self.rounds_done += self.stage_rounds
        close = still_close({c: self.turn_times.get(c, []) for c in self.contenders})
        if len(close) < 2 or self.rounds_done >= self.confirm_max_rounds:
            return False
        self.contenders, self.confirm_start = close, iteration
        self.stage_rounds = min(self.confirm_rounds, self.confirm_max_rounds - self.rounds_done)
        self.marks = {} if mark is None else {iteration: mark}
        return True

    def _contenders(self, buckets) -> list[int]:
        """The candidates priced within `confirm_margin` of a bucket's best where more than
        one is (a bucket with a clear winner adds none)."""
        close = set()
        for b in buckets:
            best = self.predict(b, self.decisions[b])
            near = {c for c in range(len(self.transfers))
                    if self.predict(b, c) <= (1 + self.confirm_margin) * best}
            close |= near if len(near) > 1 else set()
        return sorted(close)

    def _reduced(self, reduce: Reduce) -> list[Sample]:
        """The samples measured so far, reduced across ranks (module docstring), in the same
        order on every rank; `samples` is emptied."""
        samples = sorted(self.samples, key=lambda s: (s.iteration, s.bucket))
        self.samples = []
        n = len(samples)
        counts = reduce(torch.tensor([n, -n], dtype=torch.float64))
        if counts[0] != -counts[1]:  # the table's all-reduce would not match
            raise RuntimeError("auto: ranks measured different numbers of buckets "
                               f"({int(-counts[1])} to {int(counts[0])}); do all ranks "
                               "train the same model?")
        values = [[s.codec_s, -s.comm_s, -float(s.idle_link), float(s.nbytes)] for s in samples]
        table = reduce(torch.tensor(values, dtype=torch.float64).reshape(n, 4))
        return [Sample(s.iteration, s.bucket, s.candidate, float(row[0]), float(-row[1]),
                       float(row[3]), bool(-row[2] == 1), s.warmup)
                for s, row in zip(samples, table)]

    def _decide(self, buckets) -> None:
        """Each bucket's candidate of least predicted time; where that is a timed contender
        and others are priced within `confirm_margin` of it, the one of them whose rounds
        took least time (module docstring)."""
        decisions = {}
        for b in buckets:
            price = {c: self.predict(b, c) for c in range(len(self.transfers))}
            best = min(price, key=price.get)
            near = [c for c in self.rounds if price[c] <= (1 + self.confirm_margin) * price[best]]
            decisions[b] = (min(near, key=self.rounds.get) if best in self.rounds
                            and len(near) > 1 else best)
        self.decisions = decisions

    def predict(self, bucket: int, candidate: int) -> float:
        """Predicted seconds of `bucket` with `candidate`: codec + communication."""
        return self.codec[bucket, candidate] + self.transfers[candidate].seconds(
            self.workers, self.nbytes[bucket, candidate], self.alpha, self.x)

    def _slowed(self, samples: list[Sample]) -> int | None:
        """The first iteration in which a bucket whose link was idle on every rank took over
        `slowdown` times the predicted time of the candidate that carried it (a margin for
        the noise of single samples); None if none did. Only slowdowns: a faster link barely
        changes the time of a candidate chosen for a slow one; the periodic check's bandwidth
        refit sees it."""
        for s in samples:
            predicted = self.predict(s.bucket, s.candidate) if s.idle_link else math.inf
            if math.isfinite(predicted) and s.codec_s + s.comm_s > self.slowdown * predicted:
                return s.iteration
        return None

    def _check_drift(self, iteration: int) -> bool:
        """The periodic check (module docstring), from the window's samples. A codec time
        that moved is priced only when it moved at the last check too: one window's noise
        (a busy machine) priced at once could send a bucket to another candidate, whose
        cost is not measured again before the next exploration, and no later check would
        see the old one recover."""
        samples, self.window = self.window, []
        codec_now, drift = {}, 0.0
        for b in sorted(self.decisions):
            c = self.decisions[b]
            mine = [s.codec_s for s in samples if s.bucket == b and s.candidate == c]
            codec_now[b] = statistics.median(mine) if mine else self.codec[b, c]
            # against the bucket's predicted time: a tiny codec time may double unnoticed
            total = self.predict(b, c)
            if total > 0:
                drift = max(drift, abs(codec_now[b] - self.codec[b, c]) / total)
        moved = drift > self.drift
        if moved and not self.codec_moved:  # a first move waits for the next check
            codec_now, drift = {}, 0.0
        self.codec_moved = moved and not self.codec_moved
        return self._reprice(iteration, self._refit_bandwidth(samples), codec_now, drift)

    def _check_network(self, iteration: int, since: int) -> bool:
        """After a slowdown: the bandwidth refitted from the transfers from iteration `since`
        on alone, which stay the window (the older ones would mix the old rate's in); codec
        times stay (one iteration's are too noisy to price from; the periodic check
        re-measures them)."""
        self.window = [s for s in self.window if s.iteration >= since]
        return self._reprice(iteration, self._refit_bandwidth(self.window), {}, 0.0)

    def _reprice(self, iteration: int, x_now: float, codec_now: dict[int, float],
                 drift: float) -> bool:
        """Take the new bandwidth and codec times of the chosen candidates and decide again
        when one moved by more than `drift`: a decision that changed is tried first, from
        the next iteration on (`Trial`; with `confirm_rounds` 0, taken at once). True when a
        decision changed now."""
        drift = max(drift, relative_change(x_now, self.x))
        if drift <= self.drift:
            return False
        self.x = x_now
        for b, codec in codec_now.items():
            self.codec[b, self.decisions[b]] = codec
        before = dict(self.decisions)
        self._decide(sorted(self.decisions))
        if self.decisions == before or not self.confirm_rounds:
            return self.decisions != before
        proposed = {b: c for b, c in self.decisions.items() if before[b] != c}
        self.decisions, self.trial = before, Trial(iteration + 1, proposed, self.confirm_rounds)
        return False

    def _end_trial(self, iteration: int, reduce: Reduce) -> bool:
        """The trial's verdict: the proposal taken unless the decisions in force took no
        more time per iteration (untimed: taken, the table's word); True when taken. Timed,
        its times are the `rounds` from then on (each moved bucket's candidates, in force and
        proposed): a later re-pricing within the margin decides by them, rather than propose
        the same move again."""
        now, proposed = self.trial.seconds(reduce)
        taken = not now <= proposed
        if not (math.isnan(now) or math.isnan(proposed)):
            self.rounds = {}
            for b, c in self.trial.proposed.items():
                self.rounds[self.decisions[b]], self.rounds[c] = now, proposed
        if taken:
            self.decisions.update(self.trial.proposed)
        self.trial, self.last_trial = None, (iteration, now, proposed, taken)
        return taken

    def _refit_bandwidth(self, samples) -> float:
        return refit_bandwidth(idle_points(samples, self.transfers, self.workers), self.alpha,
                               self.x)

    # -- checkpoints ------------------------------------------------------------------------
    def __getstate__(self):
        """Picklable (as the hook state that holds it): a launched reduction and the marks
        stay behind."""
        trial = None if self.trial is None else Trial(**self.trial.state_dict())
        return {**self.__dict__, "pending": None, "marks": {}, "trial": trial}

    def state_dict(self) -> dict:
        return {"explore_start": self.explore_start, "skips": list(self.skips),
                "contenders": list(self.contenders), "confirm_start": self.confirm_start,
                "stage_rounds": self.stage_rounds, "rounds_done": self.rounds_done,
                "turn_times": {c: list(t) for c, t in self.turn_times.items()},
                "decisions": dict(self.decisions), "rounds": dict(self.rounds),
                "codec": dict(self.codec), "nbytes": dict(self.nbytes), "alpha": self.alpha,
                "x": self.x, "decided_at": self.decided_at, "codec_moved": self.codec_moved,
                "trial": None if self.trial is None else self.trial.state_dict(),
                "last_trial": self.last_trial}

    def load_state_dict(self, state: dict) -> None:
        for name, value in state.items():
            setattr(self, name, dict(value) if isinstance(value, dict) else value)
        self.skips = [tuple(s) for s in self.skips]
        if "stage_rounds" not in state and self.confirm_start is not None:  # before racing
            self.stage_rounds = self.confirm_rounds
        self.trial = None if self.trial is None else Trial(**self.trial)
        self.last_trial = None if self.last_trial is None else tuple(self.last_trial)
        self.samples, self.explored, self.window, self.pending = [], [], [], None
        self.marks = {}

