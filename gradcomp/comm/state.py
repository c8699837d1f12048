"""The hook's state between iterations: its options, counters, telemetry, the uncompressed
all-reduce and its route; `state_dict()` checkpoints it.

A route says which communicator carries a bucket: `FixedRoute` (the method's own
communicator) or `auto`'s (`gradcomp.comm.auto.AutoRoute`: a candidate per bucket, chosen from
measurements). The state asks it, for each bucket from `start_iter` on:

    route.prepare(iteration, device)    collectives at an iteration's first bucket (auto's)
    route.pick(bucket, iteration)       the communicator (the state falls back to the
                                        uncompressed all-reduce where it would not pay)
    route.learn(record)                 the bucket's finished record (auto learns from it)
"""
from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from ..checks import check_int, check_number, check_saved_method
from ..compressors import Compressor
from ..collectives.blocksparse import DEFAULT_BLOCK_SIZE
from .communicators import Bucket, Communicator, DenseAllReduce, build
from .hierarchical import TwoTiers, hierarchy_options
from .ranks import Ranks
from .resume import BucketLayout
from .telemetry import BucketRecord, Telemetry

#: What `load_state_dict` needs (checkpoints from before the communicator option lack it).
_REQUIRED = ("method", "options", "iteration", "start_iter", "min_compression_rate", "layout",
             "compressor")


class Route(ABC):
    """The interface (defaults: a route that prepares and learns nothing).

    `method`: what the state checkpoints and compares across ranks as the method (name,
    options, shared random state, `state_dict`). `communicator`, `block_size`: the hook's
    options of those names. `learns`: buckets are timed for `learn` even with telemetry off.
    `warns`: the state warns once when an iteration sent every bucket uncompressed.
    `reports`: attributes a hook state shows as its own (`auto`'s choices)."""

    learns: ClassVar[bool] = False
    reports: ClassVar[tuple[str, ...]] = ()
    communicator: str = "default"
    block_size: int = DEFAULT_BLOCK_SIZE
    method: Any

    @property
    def warns(self) -> bool:
        return True

    def connect(self, ranks: Ranks, exchange_ranks: Ranks) -> None:
        """Build what lives in this process only (communicators) for `exchange_ranks`, the
        ranks a payload is exchanged among; `ranks`: every rank of the hook."""

    def options(self) -> dict[str, Any]:
        """Options of the route that ranks must agree on, beside the hook's."""
        return {}

    def prepare(self, iteration: int, device) -> None:
        pass

    @abstractmethod
    def pick(self, bucket: Bucket, iteration: int) -> Communicator:
        """The communicator for `bucket` (from `start_iter` on)."""

    def learn(self, record: BucketRecord) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        """Entries of the route beside the hook state's own."""
        return {}

    def check_checkpoint(self, state: dict[str, Any]) -> None:
        """Raise ValueError if `state` (a hook checkpoint) was saved by another route."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load the route's entries of `state` (the whole hook checkpoint)."""


class FixedRoute(Route):
    """Every bucket by `method`'s own communicator (`communicators.build`)."""

    def __init__(self, method: Compressor, communicator: str = "default",
                 block_size: int = DEFAULT_BLOCK_SIZE):
        self.method = method
        self.communicator = communicator
        self.block_size = block_size
        self.compressed: Communicator | None = None

    @property
    def warns(self) -> bool:
        return self.method.name != "none"  # the identity: uncompressed by design

    def connect(self, ranks: Ranks, exchange_ranks: Ranks) -> None:
        self.compressed = build(self.method, exchange_ranks, self.communicator, self.block_size)

    def pick(self, bucket: Bucket, iteration: int) -> Communicator:
        return self.compressed

    def __getstate__(self):
        return {**self.__dict__, "compressed": None}


class HookState:
    """Everything the hook keeps between iterations; `state_dict()` checkpoints it.

    method: the compressor (with or without error feedback), or a `Route` (`auto`'s).
    process_group: the group to reduce over (None: the default group).
    start_iter: iterations of plain all-reduce before compression starts (DDP rebuilds its
        buckets after the first iteration, so compressing from iteration 1 keeps residuals
        and PowerSGD memories on the final bucket layout).
    min_compression_rate: a bucket is sent uncompressed unless the method makes it at least
        this many times smaller (methods with their own option, such as PowerSGD, apply it
        per matrix themselves).
    telemetry_limit: how many per-bucket records to keep (0: none).
    communicator: "default" (the payload travels as the method declares: all-reduce or
        all-gather, or PowerSGD's two rounds) or "blocksparse" (sparsifying methods only:
        each rank decodes its own payload to a dense, mostly zero bucket and
        `block_sparse_all_reduce`s it).
    block_size: elements per block of the block-sparse all-reduce.
    hierarchical: average in two tiers (`gradcomp.comm.hierarchical`): inside each node of
        `gpus_per_node` ranks (None: torchrun's LOCAL_WORLD_SIZE) a reduce-scatter,
        uncompressed or in bfloat16 (`intra="bf16"`); between nodes the method on this rank's
        shard, among the ranks of its local rank; an all-gather inside the node. Every rank
        checks the node size with the others here (a collective: build it on every rank).
    The route's `reports` (`auto`'s `chooser`, `switches`, `choices_text()`, ...) read as the
    state's own attributes.
    """

    def __init__(self, method: Compressor | Route, process_group=None, start_iter: int = 1,
                 min_compression_rate: float = 1.0, telemetry_limit: int = 100_000,
                 communicator: str = "default", block_size: int = DEFAULT_BLOCK_SIZE,
                 hierarchical: bool = False, gpus_per_node: int | None = None,
                 intra: str = "none"):
        if isinstance(method, Compressor):
            method = FixedRoute(method, communicator, check_int(block_size, "block_size", 1))
        elif not isinstance(method, Route):
            raise TypeError("method must be a gradcomp Compressor, e.g. "
                            "gradcomp.compressor('topk', ratio=0.01), or a Route")
        elif (communicator, block_size) != ("default", DEFAULT_BLOCK_SIZE):
            raise TypeError(f"a {type(method).__name__} takes no communicator or block_size")
        check_int(start_iter, "start_iter", 0)
        check_int(telemetry_limit, "telemetry_limit", 0)
        check_number(min_compression_rate, "min_compression_rate", 0)
        self.route = method
        self.start_iter = start_iter
        self.min_compression_rate = float(min_compression_rate)
        self.telemetry_limit = telemetry_limit
        self.hierarchy = hierarchy_options(hierarchical, gpus_per_node, intra)
        self.iteration = 0
        self.agreed = False  # across ranks, in this process since the last resume
        self.buckets = BucketLayout()
        self._iteration_reasons: dict[int, set[tuple[str, str]]] = {}  # iteration -> reasons
        self._warned_uncompressed = False
        self._connect(process_group)
        self.compressor.set_rank(self.ranks.rank)

    def _connect(self, process_group) -> None:
        """Build what lives in this process only: the ranks, tiers, communicators and
        telemetry."""
        self.connect_tiers(process_group)
        self.route.connect(self.ranks, self.exchange_ranks)
        self.dense = DenseAllReduce(self.exchange_ranks)
        self.telemetry = Telemetry(self.telemetry_limit) if self.telemetry_limit else None

    def connect_tiers(self, process_group) -> None:
        """The ranks of `process_group`, and (hierarchical) their nodes' `TwoTiers`."""
        self.ranks = Ranks(process_group)
        self.tiers = TwoTiers(self.ranks, **self.hierarchy) if self.hierarchy else None

    def __getattr__(self, name: str):
        route = self.__dict__.get("route")
        if route is not None and name in route.reports:
            return getattr(route, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def compressor(self):
        """The method: a compressor, or `auto`'s candidates."""
        return self.route.method

    @property
    def communicator(self) -> str:
        return self.route.communicator

    @property
    def block_size(self) -> int:
        return self.route.block_size

    @property
    def exchange_ranks(self) -> Ranks:
        """The ranks a bucket's payload is exchanged among: every rank, or (hierarchical)
        this rank's peers of the same local rank on the other nodes."""
        return self.ranks if self.tiers is None else self.tiers.across

    def shard_numel(self, numel: int) -> int:
        """How many elements of a bucket of `numel` this rank's method compresses: all, or
        (hierarchical) its shard, padded."""
        return numel if not self.hierarchy else -(-numel // self.hierarchy["gpus_per_node"])

    @property
    def process_group(self):
        return self.ranks.process_group

    @property
    def world_size(self) -> int:
        return self.ranks.world_size

    def track_parameters(self, module) -> None:
        """Record bucket layouts by parameter position, for exact resume (see `resume`)."""
        self.buckets.track(module)

    def communicator_for(self, bucket: Bucket, iteration: int) -> Communicator:
        """The route's communicator from `start_iter` on where compression pays, else the
        uncompressed all-reduce."""
        if iteration < self.start_iter:
            return self.dense
        chosen = self.route.pick(bucket, iteration)
        return chosen if chosen.pays(bucket, self.min_compression_rate) else self.dense

    def hook_options(self) -> dict[str, Any]:
        """The options that decide when and how the hook communicates (ranks must agree on
        them)."""
        return {"start_iter": self.start_iter,
                "min_compression_rate": self.min_compression_rate,
                **({"hierarchical": True, **self.hierarchy} if self.hierarchy else {}),
                **self.route.options()}

    def prepare(self, iteration: int, device) -> None:
        """Collectives the route runs at an iteration's first bucket from `start_iter` on,
        before the bucket's own (`auto`'s choice): the hierarchical hook calls it before its
        reduce-scatter, so that they run in the hook's call."""
        if iteration >= self.start_iter:
            self.route.prepare(iteration, device)

    def start_record(self, record: BucketRecord, device) -> BucketRecord:
        """Start one bucket's record: kept and timed with telemetry on; else timed only for a
        route that learns from it."""
        if self.telemetry is not None:
            return self.telemetry.start(record, device)
        return record.time(device) if self.route.learns else record

    def finished(self, record: BucketRecord) -> None:
        """A bucket's record is complete: the route learns from it."""
        if record.iteration >= self.start_iter:
            self.route.learn(record)

    def uncompressed_reason(self, communicator: Communicator, buf: torch.Tensor, nbytes: int,
                            iteration: int) -> str:
        """Why bucket `buf`, encoded to `nbytes`, travels uncompressed ("" when it is
        compressed): "start_iter", or "min_compression_rate" where the method does not make it
        small enough (e.g. fp16 on bfloat16 gradients, PowerSGD on small or 1-D tensors).
        Remembered for `end_iteration`."""
        if communicator is self.dense:
            reason = "start_iter" if iteration < self.start_iter else "min_compression_rate"
        elif 0 < buf.numel() * buf.element_size() <= nbytes:
            reason = "min_compression_rate"
        else:
            reason = ""
        self._iteration_reasons.setdefault(iteration, set()).add(
            (reason, str(buf.dtype).replace("torch.", "")))
        return reason

    def end_iteration(self, iteration: int) -> None:
        """After an iteration's last bucket: warn, once, if no bucket of an iteration from
        `start_iter` on was compressed (hierarchical: of the iteration before, the last whose
        buckets are all encoded by now: they are encoded after their reduce-scatter). No
        warning for a route that does not warn (`auto`: an uncompressed bucket is its choice,
        not a silent no-op)."""
        if not self.route.warns:
            self._iteration_reasons.clear()
            return
        if self.tiers is not None:
            iteration -= 1
        done = [i for i in list(self._iteration_reasons) if i <= iteration]  # (list: atomic)
        seen = {i: self._iteration_reasons.pop(i) for i in done}.get(iteration, set())
        if iteration < self.start_iter or not seen or any(r == "" for r, _ in seen):
            return
        if not self._warned_uncompressed:
            self._warned_uncompressed = True
            dtypes = ", ".join(sorted({d for _, d in seen}))
            warnings.warn(
                f"gradcomp: iteration {iteration} sent every bucket uncompressed: "
                f"{self.compressor.name!r} does not make these {dtypes} gradients smaller by "
                f"min_compression_rate (the hook's, {self.min_compression_rate}, or the "
                "method's own per matrix), so the hook saves nothing; telemetry's "
                "'uncompressed' column says why per bucket", RuntimeWarning, stacklevel=2)

    def telemetry_rows(self) -> list[dict]:
        """Per-bucket bytes and encode/communication/decode seconds recorded so far."""
        return self.telemetry.rows() if self.telemetry else []

    def state_dict(self) -> dict[str, Any]:
        return {"method": self.compressor.name, "options": self.compressor.options(),
                "communicator": self.communicator, "block_size": self.block_size,
                "iteration": self.iteration, "start_iter": self.start_iter,
                "min_compression_rate": self.min_compression_rate,
                "layout": dict(self.buckets.layout), "compressor": self.compressor.state_dict(),
                "rank": self.ranks.rank, "world_size": self.world_size,
                "hierarchy": self.hierarchy, **self.route.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if isinstance(state, dict):
            self.route.check_checkpoint(state)
        missing = [k for k in _REQUIRED if k not in state] if isinstance(state, dict) else _REQUIRED
        if missing:
            raise ValueError(f"state is not a gradcomp hook checkpoint (it lacks "
                             f"{', '.join(missing)}): pass what HookState.state_dict() returned")
        check_saved_method(state, self.compressor, "hook runs", "build the hook with")
        if state.get("hierarchy") != self.hierarchy:  # residuals are per shard or per bucket
            raise ValueError(f"this checkpoint was saved by a hook with hierarchy "
                             f"{state.get('hierarchy')}; this hook runs {self.hierarchy} "
                             "(None: flat): build the hook with the same hierarchical, "
                             "gpus_per_node and intra before loading")
        saved_comm = state.get("communicator", "default")
        if saved_comm != self.communicator:
            raise ValueError(f"this checkpoint was saved with communicator={saved_comm!r}; this "
                             f"hook runs communicator={self.communicator!r}: build the hook "
                             "with the same communicator before loading")
        # Residuals and PowerSGD memories are per rank: rank 0's state on rank 1 would train
        # on without error, differently (checkpoints from before these fields lack them).
        saved_ranks = (state.get("rank", self.ranks.rank),
                       state.get("world_size", self.world_size))
        if saved_ranks != (self.ranks.rank, self.world_size):
            raise ValueError(f"this checkpoint holds the hook state of rank {saved_ranks[0]} of "
                             f"{saved_ranks[1]}; this is rank {self.ranks.rank} of "
                             f"{self.world_size}: the state is per rank, so save every rank's "
                             "(gradcomp.comm.save_state gathers them into one dictionary) and "
                             "load each rank its own")
        self.iteration = state["iteration"]
        self.start_iter = state["start_iter"]
        self.min_compression_rate = state["min_compression_rate"]
        self.agreed = False
        self.compressor.load_state_dict(state["compressor"])
        # The first iteration after a restart runs on DDP's initial buckets; the hook regroups
        # gradients into the saved buckets for it, so compression continues exactly.
        self.buckets.resume_from(state["layout"])
        self.route.load_state_dict(state)

    def __getstate__(self):
        """Picklable like torch's hook states: the process group, tiers, communicators (the
        route's too) and telemetry stay behind (a pickled state runs on the default group; a
        hierarchical one builds its tiers again when unpickled, a collective: on every
        rank)."""
        return {k: v for k, v in self.__dict__.items()
                if k not in ("ranks", "tiers", "dense", "telemetry")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.agreed = False
        self._connect(None)
