"""Two all-reduce rounds with work between them, for a `TwoRoundCompressor` (PowerSGD: P, then
Q = M^T P from the summed P), on each parameter's own matrix.

Collectives must be issued in the same order on every rank, and a round issued from a
callback could interleave with another bucket's collectives. Where `Ranks.round_group` gives the
bucket its own gloo group (gloo, default group, CPU tensors), round 2 is chained on round 1
there without waiting. Elsewhere (NCCL,
CUDA tensors on gloo, a custom process group) `exchange` waits for round 1 before computing
round 2: on NCCL a stream wait that does not block the CPU; on gloo it holds the backward pass
for one round trip.

The plain pieces (vectors, matrices too small to compress) travel with round 1 in one
all-reduce: on the 2-worker testbed at 2.5 Gbit/s a separate all-reduce for them, concurrent
with round 1 on another group, made the MLP's PowerSGD exchange 10-17 ms where one all-reduce
makes it 7-9.5 ms (and the iteration 65-77 ms where it is 62-70 ms), with the same result.
"""
from __future__ import annotations

import time

import torch

from .. import wire
from .base import Bucket, Communicator, Sent


class TwoRounds(Communicator):
    """Average a bucket through the compressor's `begin` / `next_round` / `finish`."""

    def pays(self, bucket: Bucket, min_compression_rate: float) -> bool:
        return True  # the method decides per matrix itself (its own min_compression_rate)

    def encode(self, bucket: Bucket) -> Sent:
        buf = bucket.buffer
        shapes = bucket.tensor_shapes()
        if sum(s.numel() for s in shapes) != buf.numel():
            shapes = [buf.shape]
        step = self.compressor.begin(buf, shapes, key=bucket.index)
        plain = step.plain().div_(self.ranks.world_size)
        return Sent(bucket, [plain, step.first()], step.nbytes(), step)

    def exchange(self, sent: Sent) -> torch.futures.Future:
        plain, first = sent.wire
        group = self.ranks.group
        index = sent.bucket.index
        if self.ranks.round_group(index, first.device) is None:
            wire.all_reduce_sum([plain, first], group).wait()
            return wire.all_reduce_sum([self._next_round(sent, first)], group).then(
                lambda f: [plain, *f.value()])
        return self._second_round(sent, plain, first, index).then(
            lambda f: [plain, *f.value()])

    def decode(self, sent: Sent, received) -> torch.Tensor:
        plain_sum, second_sum = received
        buf = sent.bucket.buffer
        self.compressor.finish(sent.context, plain_sum,
                               second_sum.div_(self.ranks.world_size), out=buf)
        return buf

    def _next_round(self, sent: Sent, first: torch.Tensor) -> torch.Tensor:
        """Round 2's payload from the summed round 1, its host seconds kept in `sent`."""
        start = time.perf_counter()
        second = self.compressor.next_round(sent.context, first)
        sent.between_s += time.perf_counter() - start
        return second

    def _second_round(self, sent: Sent, plain: torch.Tensor, first: torch.Tensor,
                      index: int) -> torch.futures.Future:
        """Sum round 1 with the plain pieces, compute round 2 from it and sum that, all on
        bucket `index`'s own group (looked up, never held by the callback: see `ranks`); the
        future's value is [summed round 2]."""
        device = first.device
        done = torch.futures.Future(devices=[device] if device.type == "cuda" else None)

        def after_first(fut):
            try:
                fut.value()
                second = wire.all_reduce_sum([self._next_round(sent, first)],
                                             self.ranks.round_group(index, device))
            except Exception as exc:  # noqa: BLE001 - handed on through the future
                done.set_exception(exc)
                return
            second.then(lambda f: _settle(done, f))

        wire.all_reduce_sum([plain, first], self.ranks.round_group(index, device)).then(
            after_first)
        return done


def _settle(target: torch.futures.Future, source: torch.futures.Future) -> None:
    try:
        target.set_result(source.value())
    except Exception as exc:  # noqa: BLE001 - handed on through the future
        target.set_exception(exc)
