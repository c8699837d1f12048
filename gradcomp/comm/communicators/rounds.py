"""Two all-reduce rounds with work between them, for a `TwoRoundCompressor` (PowerSGD: P, then
Q = M^T P from the summed P), on each parameter's own matrix.

One path on every backend: round 1, then round 2 issued once round 1 is done (`after`).
Collectives must be issued in the same order on every rank, and a round issued from a callback
could interleave with another bucket's collectives; so round 2 is issued from round 1's
callback only where `Ranks.round_group` gives the bucket its own gloo group (gloo, default
group, CPU tensors), and elsewhere (NCCL, CUDA tensors on gloo, a custom process group) in the
hook's call after waiting for round 1: on NCCL a stream wait that does not block the CPU; on
gloo it holds the backward pass for one round trip.

The plain pieces (vectors, matrices too small to compress) travel with round 1 in one
all-reduce: on the 2-worker testbed at 2.5 Gbit/s a separate all-reduce for them, concurrent
with round 1 on another group, made the MLP's PowerSGD exchange 10-17 ms where one all-reduce
makes it 7-9.5 ms (and the iteration 65-77 ms where it is 62-70 ms), with the same result.
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from .. import wire
from .base import Bucket, Communicator, Sent


class TwoRounds(Communicator):
    """Average a bucket through the compressor's `begin` / `next_round` / `finish`: the plain
    pieces are shares of round 1's sum, Q's sum is averaged after round 2."""

    def pays(self, bucket: Bucket, min_compression_rate: float) -> bool:
        return True  # the method decides per matrix itself (its own min_compression_rate)

    def encode(self, bucket: Bucket) -> Sent:
        buf = bucket.buffer
        shapes = bucket.tensor_shapes()
        if sum(s.numel() for s in shapes) != buf.numel():
            shapes = [buf.shape]
        step = self.compressor.begin(buf, shapes, key=bucket.index)
        plain = step.plain()
        return Sent(bucket, [plain, step.first()], step.nbytes(), step, shares=[plain])

    def exchange(self, sent: Sent) -> torch.futures.Future:
        """Round 1 sums the plain pieces and P, round 2 Q = M^T P (`next_round`); the future's
        value is [summed plain pieces, summed Q]. Each round's group is looked up when it is
        issued, never held by a callback (see `ranks`)."""
        plain, first = sent.wire
        index, device = sent.bucket.index, first.device
        chained = self.ranks.round_group(index, device) is not None

        def group():
            return self.ranks.round_group(index, device) if chained else self.ranks.group

        def round_two() -> torch.futures.Future:
            return wire.all_reduce_sum([self._next_round(sent, first)], group())

        round_one = wire.all_reduce_sum([plain, first], group())
        return after(round_one, round_two, chained).then(lambda f: [plain, *f.value()])

    def sums(self, sent: Sent, received) -> list[torch.Tensor]:
        return [received[1]]

    def decode(self, sent: Sent, received) -> torch.Tensor:
        plain_mean, q_mean = received
        buf = sent.bucket.buffer
        self.compressor.finish(sent.context, plain_mean, q_mean, out=buf)
        return buf

    def _next_round(self, sent: Sent, first: torch.Tensor) -> torch.Tensor:
        """Round 2's payload from the summed round 1, its host seconds kept in `sent`."""
        start = time.perf_counter()
        second = self.compressor.next_round(sent.context, first)
        sent.between_s += time.perf_counter() - start
        return second


def after(first: torch.futures.Future, issue: Callable[[], torch.futures.Future],
          chained: bool) -> torch.futures.Future:
    """The future of `issue()`, called once `first` is done: from `first`'s callback where
    the rounds are `chained` (on the bucket's own group), else in this call, after waiting for
    `first`."""
    if not chained:
        first.wait()
        return issue()
    done = torch.futures.Future()

    def issue_next(fut):
        try:
            fut.value()
            issued = issue()
        except Exception as exc:  # noqa: BLE001 - handed on through the future
            done.set_exception(exc)
            return
        issued.then(lambda f: _settle(done, f))

    first.then(issue_next)
    return done


def _settle(target: torch.futures.Future, source: torch.futures.Future) -> None:
    try:
        target.set_result(source.value())
    except Exception as exc:  # noqa: BLE001 - handed on through the future
        target.set_exception(exc)
