"""How `auto`'s choice (`choice`) reduces its samples across ranks once it has decided.

After a decision the samples are reduced as they come (one all-reduce of five values per
bucket and iteration), never waited for right after backward's compute (a blocking one there
cost about 3 ms per iteration on the 2-worker testbed: the rank that came early could not
encode while it waited): a step launches the reduction (`Launch`) and the next step reads it.
The step runs at an iteration's first bucket, before its collectives, so every rank issues the
reduction at the same place in its order of collectives, whatever else the program runs on the
group (on the CPU and on CUDA alike). Launching it as the iteration's last bucket finished
instead cost 2-3 ms more per iteration, about 3% of an iteration, on the 2-worker testbed at
1 Gbit/s (interleaved runs, each in fresh processes).

That reduction is the one collective a settled `auto` adds to those of its chosen candidates,
over every rank. While the slowdown check reads the samples, the step before every
`SLOWDOWN_EVERY`-th iteration since the decision launches those of every iteration since the
last launch, so a slower link in iteration i is acted on SLOWDOWN_EVERY + 1 iterations later
at most (2 with a launch per iteration). Launched every iteration it cost more: auto ran a
median 4.0% over the fixed hook of the candidate it chose, against 2.5% launched every five
(one job per rate and layout, six in all, on the 2-core two-tier testbed,
`testbed-two-tier-2026-11-29-margin`). With `slowdown=None` nothing reads the samples between
the periodic checks, so they are launched together at the step before each check (the same
samples, the same decisions: one all-reduce per `check_every` iterations).
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from .pricing import Sample

#: Iterations whose samples one launch holds while the slowdown check reads them (at most:
#: the largest divisor of `check_every` up to it).
SLOWDOWN_EVERY = 5
#: reduce(tensor) -> the element-wise maximum of `tensor` over all ranks.
Reduce = Callable[[torch.Tensor], torch.Tensor]
#: launch(tensor) -> wait: `reduce(tensor)` started without blocking; wait() returns it.
Launch = Callable[[torch.Tensor], Callable[[], torch.Tensor]]


class SampleStream:
    """The streamed reduction of a decided `Chooser`'s samples (its `samples`, `pending`,
    `decisions`, `decided_at`, `slowdown` and `check_every`)."""

    def _start(self, first: int, last: int, launch: Launch) -> tuple:
        """(iterations, buckets, wait): the reduction of the samples of iterations `first` to
        `last` of the decided buckets (a bucket a rank did not measure in an iteration: no
        evidence), started by `launch`; the samples up to `last` leave `samples`."""
        iterations, buckets = list(range(first, last + 1)), sorted(self.decisions)
        kept = {(s.iteration, s.bucket): s for s in self.samples if s.iteration >= first}
        self.samples = [s for s in self.samples if s.iteration > last]
        rows = []
        for key in ((i, b) for i in iterations for b in buckets):
            s = kept.get(key)
            rows.append([s.codec_s, -s.comm_s, -float(s.idle_link), float(s.candidate),
                         float(s.nbytes)] if s is not None
                        else [-math.inf, -math.inf, 0.0, -1.0, 0.0])
        return iterations, buckets, launch(
            torch.tensor(rows, dtype=torch.float64).reshape(len(rows), 5))

    def _stream(self, iteration: int, reduce: Reduce, launch: Launch | None) -> list[Sample]:
        """The reduced samples of the latest iterations whose reduction is ready: with
        `launch`, those launched at the last step are read, and at the step before every
        `_every()`-th iteration the samples since the last launch are launched (`_batch`);
        without, iteration - 1's are reduced now."""
        if launch is None:
            ready = self._start(iteration - 1, iteration - 1, lambda rows: lambda: reduce(rows))
        else:
            batch = self._batch(iteration)
            ready = self.pending
            self.pending = None if batch is None else self._start(*batch, launch)
            if ready is None:
                return []
        iterations, checked, wait = ready
        keys = [(i, b) for i in iterations for b in checked]
        return [Sample(i, b, int(candidate), codec, -minus_comm, nbytes, minus_idle == -1)
                for (i, b), (codec, minus_comm, minus_idle, candidate, nbytes)
                in zip(keys, wait().tolist()) if candidate >= 0]

    def _batch(self, iteration: int) -> tuple[int, int] | None:
        """(first, last): the iterations whose samples the step at `iteration` launches: at
        the step before every `_every()`-th iteration since the decision, every iteration
        since the last launch; else none."""
        every = self._every()
        if (iteration + 1 - self.decided_at) % every:
            return None
        return max(self.decided_at, iteration - every), iteration - 1

    def _every(self) -> int:
        """Iterations between launches: while the slowdown check reads the samples, the
        largest divisor of `check_every` up to `SLOWDOWN_EVERY` (a periodic check falls on
        a launch's read), else `check_every`."""
        if self.slowdown is None:
            return self.check_every
        return max(d for d in range(1, SLOWDOWN_EVERY + 1) if self.check_every % d == 0)
