"""`TwoTiers`: how the hierarchical hook averages one bucket.

    scatter  inside the node: reduce-scatter of the bucket into G shards (`inside`)
    across   the hook's method on this rank's shard, among the ranks of the same local rank
             on the other nodes (the flat hook's encode -> exchange -> decode, on the shard)
    gather   inside the node: all-gather of the averaged shards into the bucket

Collectives must be issued in the same order on every rank of a group. On gloo's default
group with CPU tensors each bucket's three steps chain on futures without waiting, on gloo
groups of the bucket's own (a node group and an across group per bucket index, created at its
first call, in bucket order, and kept for the process like `Ranks.round_group`'s), so a step
issued from another bucket's callback never interleaves with this bucket's. The encodes still
run one after another in bucket order (each waits for the previous bucket's): compressors draw
random numbers from one generator for all buckets, and ranks that drew in another order would
disagree. Elsewhere (NCCL, CUDA tensors, a process group of the user's) the steps run on the
node groups created at registration, one after another in the hook's call, each waiting for
the last (on NCCL a stream wait that does not block the CPU).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from ..agreement import RankMismatch, check_agreement, digest, explained
from ..communicators import Bucket, Communicator
from ..ranks import Ranks
from ..telemetry import BucketRecord, mark, span
from .inside import Inside, shard_shapes
from .nodes import Nodes, find_nodes, node_groups

#: exchange(state, bucket, iteration, bind, record) -> Future: the flat hook's encode ->
#: exchange -> decode of one bucket (`hooks.exchange`).
Exchange = Callable[..., torch.futures.Future]


@dataclass
class TierRecord(BucketRecord):
    """A bucket's telemetry on both tiers: the fields of `BucketRecord` describe the shard
    across nodes (`numel`, `bytes_original`: the shard; `bytes_sent`: what this rank's method
    sent across; encode, communication and decode seconds), the rest the node: the bucket's
    size, the bytes this rank sent inside its node, and when its reduce-scatter started and
    ended (`scatter_started`, `scattered`) and its all-gather ended (`gathered`)."""

    bucket_numel: int = 0
    intra_bytes: int = 0
    scatter_started: Any = None
    scattered: Any = None
    gathered: Any = None

    def row(self) -> dict:
        return {**super().row(), "bucket_numel": self.bucket_numel,
                "intra_bytes": self.intra_bytes,
                "scatter_s": span(self.scatter_started, self.scattered),
                "gather_s": span(self.decoded, self.gathered)}


class TwoTiers:
    """The two tiers of a hook state on `ranks` (every rank): nodes of `gpus_per_node`
    (`find_nodes`, checked on every rank alike), their groups (created here, collectively),
    and the averaging of a bucket through them (module docstring)."""

    def __init__(self, ranks: Ranks, gpus_per_node: int, intra: str):
        self.ranks = ranks
        self.nodes: Nodes = find_nodes(ranks, gpus_per_node)
        self.inside = Inside(gpus_per_node, self.nodes.local, intra)
        backend = None if ranks.process_group is None else ranks.backend
        self.node, self.across = node_groups(self.nodes, backend)
        self._own: dict[int, tuple[Ranks, Ranks]] = {}  # bucket -> its own groups (chained)
        self._bound: dict[tuple[int, int], Communicator] = {}
        self._encoded = _done(None)  # the last bucket's encode (chained: in bucket order)

    def chained(self, device: torch.device) -> bool:
        """Whether a bucket's steps chain on its own groups: gloo on the default group, CPU
        tensors (where the flat hook chains its rounds, `Ranks.can_chain`)."""
        return self.ranks.can_chain(device)

    def bound(self, communicator: Communicator, across: Ranks, index: int) -> Communicator:
        """`communicator` moving bucket `index`'s payloads over its own `across` group: a
        shallow copy (its buffers and caches, kept per bucket index, stay shared)."""
        key = (id(communicator), index)
        twin = self._bound.get(key)
        if twin is None or twin.ranks is not across:
            twin = self._bound[key] = copy.copy(communicator)
            twin.ranks = across
        return twin

    def groups(self, index: int, chained: bool) -> tuple[Ranks, Ranks]:
        """(node, across) for bucket `index`: its own gloo groups when `chained` (created at
        its first call, in bucket order, the same on every rank), else the node groups."""
        if not chained:
            return self.node, self.across
        if index not in self._own:
            self._own[index] = node_groups(self.nodes, "gloo", index)
        return self._own[index]

    def average(self, state, bucket: Bucket, iteration: int,
                exchange: Exchange) -> torch.futures.Future:
        """Average `bucket.buffer` over every rank through the two tiers; the future's value
        is the buffer, holding the result."""
        buf = bucket.buffer
        device = buf.device
        state.prepare(iteration, device)  # `auto`'s collectives, in the hook's call
        chained = self.chained(device)
        node, across = self.groups(bucket.index, chained)
        bind = (lambda c: self.bound(c, across, bucket.index)) if chained else None
        scatter_started = mark(device)
        shard, scattered = self.inside.scatter(buf, bucket.index, node)
        record = TierRecord(iteration, bucket.index, "", shard.numel(),
                            shard.numel() * shard.element_size(), 0, bucket_numel=buf.numel(),
                            intra_bytes=self.inside.sent_bytes(buf.numel(), buf.dtype),
                            scatter_started=scatter_started)

        def describe(name: str) -> TierRecord:
            record.method = name
            return record

        start, stop = self.inside.shard_range(buf.numel())
        shard_bucket = Bucket(shard, bucket.index,
                              lambda: shard_shapes(bucket.tensor_shapes(), start, stop))

        def across_nodes() -> torch.futures.Future:
            record.scattered = mark(device)
            return exchange(state, shard_bucket, iteration, bind, describe)

        def gather() -> torch.futures.Future:
            def gathered(fut):
                fut.value()  # raises if the all-gather failed
                record.gathered = mark(device)
                return buf
            return self.inside.gather(shard, buf, bucket.index, node).then(gathered)

        if not chained:
            scattered.wait()
            across_nodes().wait()
            return gather()
        return self._chain(scattered, across_nodes, gather)

    def _chain(self, scattered, across_nodes, gather) -> torch.futures.Future:
        """scattered -> across_nodes() (after the previous bucket's encode) -> gather(), on
        futures; the result's value is gather's."""
        done = torch.futures.Future()
        encoded, previous = torch.futures.Future(), self._encoded
        self._encoded = encoded

        def fail(exc: BaseException) -> None:
            done.set_exception(explained(exc, self.ranks))

        def across(fut):
            try:
                for f in fut.value():
                    f.value()  # raises if the reduce-scatter failed
                averaged = across_nodes()
            except Exception as exc:  # noqa: BLE001 - handed to DDP through the future
                encoded.set_result(None)
                fail(exc)
                return
            encoded.set_result(None)
            averaged.then(then_gather)

        def then_gather(fut):
            try:
                fut.value()
                gather().then(finish)
            except Exception as exc:  # noqa: BLE001
                fail(exc)

        def finish(fut):
            try:
                done.set_result(fut.value())
            except Exception as exc:  # noqa: BLE001
                fail(exc)

        torch.futures.collect_all([scattered, previous]).then(across)
        return done

    def check_agreement(self, mine: dict[str, str], device: torch.device) -> None:
        """`agreement.check_agreement` over every rank, but the shared random state (random-k's
        indices, PowerSGD's initial Qs) only among the ranks that exchange across nodes: the
        ranks of one local rank draw for the same shard, other local ranks for others. Every
        rank raises alike (the digests of all ranks are compared on each)."""
        mine = dict(mine)
        random = mine.pop("shared random state")
        check_agreement(mine, self.ranks, device)
        if self.ranks.world_size == 1:
            return
        local = torch.tensor([digest(random)], dtype=torch.int64, device=device)
        everyone = [torch.empty_like(local) for _ in range(self.ranks.world_size)]
        dist.all_gather(everyone, local, group=self.ranks.group)
        values = torch.cat(everyone).tolist()
        g = self.nodes.gpus_per_node
        for l in range(g):
            peers = list(range(l, len(values), g))
            if len({values[r] for r in peers}) > 1:
                seen = ", ".join(f"rank {r} {values[r]:x}" for r in peers)
                raise RankMismatch(
                    f"ranks disagree on the gradcomp hook's shared random state among the ranks "
                    f"that exchange across nodes ({seen}): register the same method and "
                    "options on every rank, and resume every rank from the same checkpoint")


def _done(value) -> torch.futures.Future:
    fut = torch.futures.Future()
    fut.set_result(value)
    return fut
