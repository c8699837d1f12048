"""The hook's state between iterations: its options, counters, telemetry and communicators;
`state_dict()` checkpoints it."""
from __future__ import annotations

import warnings
from typing import Any

from ..checks import check_int, check_number
from ..compressors import Compressor
from ..collectives.blocksparse import DEFAULT_BLOCK_SIZE
from .communicators import Bucket, Communicator, DenseAllReduce, Sent, build
from .hierarchical import TwoTiers, hierarchy_options
from .ranks import Ranks
from .resume import BucketLayout
from .telemetry import Telemetry

#: What `load_state_dict` needs (checkpoints from before the communicator option lack it).
_REQUIRED = ("method", "options", "iteration", "start_iter", "min_compression_rate", "layout",
             "compressor")


class HookState:
    """Everything the hook keeps between iterations; `state_dict()` checkpoints it.

    compressor: the method (with or without error feedback).
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
    """

    def __init__(self, compressor: Compressor, process_group=None, start_iter: int = 1,
                 min_compression_rate: float = 1.0, telemetry_limit: int = 100_000,
                 communicator: str = "default", block_size: int = DEFAULT_BLOCK_SIZE,
                 hierarchical: bool = False, gpus_per_node: int | None = None,
                 intra: str = "none"):
        if not isinstance(compressor, Compressor):
            raise TypeError("compressor must be a gradcomp Compressor, e.g. "
                            "gradcomp.compressor('topk', ratio=0.01)")
        check_int(start_iter, "start_iter", 0)
        check_int(telemetry_limit, "telemetry_limit", 0)
        check_number(min_compression_rate, "min_compression_rate", 0)
        self.compressor = compressor
        self.communicator = communicator
        self.block_size = check_int(block_size, "block_size", 1)
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
        compressor.set_rank(self.ranks.rank)

    def _connect(self, process_group) -> None:
        """Build what lives in this process only: the ranks, tiers, communicators and
        telemetry."""
        self.connect_tiers(process_group)
        self.compressed = build(self.compressor, self.exchange_ranks, self.communicator,
                                self.block_size)
        self.dense = DenseAllReduce(self.exchange_ranks)
        self.telemetry = Telemetry(self.telemetry_limit) if self.telemetry_limit else None

    def connect_tiers(self, process_group) -> None:
        """The ranks of `process_group`, and (hierarchical) their nodes' `TwoTiers`."""
        self.ranks = Ranks(process_group)
        self.tiers = TwoTiers(self.ranks, **self.hierarchy) if self.hierarchy else None

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
        """The compressed communicator from `start_iter` on where compression pays, else the
        uncompressed all-reduce."""
        if iteration < self.start_iter or not self.compressed.pays(bucket,
                                                                   self.min_compression_rate):
            return self.dense
        return self.compressed

    def hook_options(self) -> dict[str, Any]:
        """The options that decide when and how the hook communicates (ranks must agree on
        them)."""
        return {"start_iter": self.start_iter,
                "min_compression_rate": self.min_compression_rate,
                **({"hierarchical": True, **self.hierarchy} if self.hierarchy else {})}

    def prepare(self, iteration: int, device) -> None:
        """Collectives the state runs at an iteration's first bucket, before the bucket's own
        (none here; `AutoState`'s choice): the hierarchical hook calls it before its
        reduce-scatter, so that they run in the hook's call."""

    def start_record(self, record, device):
        """Start timing one bucket: its telemetry record, or None when telemetry is off."""
        return self.telemetry.start(record, device) if self.telemetry is not None else None

    def finished(self, record, communicator: Communicator, sent: Sent) -> None:
        """A bucket's record is complete (`AutoState` learns from it)."""

    def uncompressed_reason(self, communicator: Communicator, sent: Sent, iteration: int) -> str:
        """Why `sent` travels uncompressed ("" when it is compressed): "start_iter", or
        "min_compression_rate" where the method does not make it small enough (e.g. fp16 on
        bfloat16 gradients, PowerSGD on small or 1-D tensors). Remembered for `end_iteration`."""
        buf = sent.bucket.buffer
        if communicator is self.dense:
            reason = "start_iter" if iteration < self.start_iter else "min_compression_rate"
        elif 0 < buf.numel() * buf.element_size() <= sent.nbytes:
            reason = "min_compression_rate"
        else:
            reason = ""
        self._iteration_reasons.setdefault(iteration, set()).add(
            (reason, str(buf.dtype).replace("torch.", "")))
        return reason

    def end_iteration(self, iteration: int) -> None:
        """After an iteration's last bucket: warn, once, if no bucket of an iteration from
        `start_iter` on was compressed (hierarchical: of the iteration before, the last whose
        buckets are all encoded by now: they are encoded after their reduce-scatter)."""
        if self.tiers is not None:
            iteration -= 1
        done = [i for i in list(self._iteration_reasons) if i <= iteration]  # (list: atomic)
        seen = {i: self._iteration_reasons.pop(i) for i in done}.get(iteration, set())
        if (iteration < self.start_iter or not seen or any(r == "" for r, _ in seen)
                or self.compressor.name == "none"):  # the identity: uncompressed by design
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
                "hierarchy": self.hierarchy}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = [k for k in _REQUIRED if k not in state] if isinstance(state, dict) else _REQUIRED
        if missing:
            raise ValueError(f"state is not a gradcomp hook checkpoint (it lacks "
                             f"{', '.join(missing)}): pass what HookState.state_dict() returned")
        saved = (state["method"], state["options"])
        mine = (self.compressor.name, self.compressor.options())
        if saved != mine:
            raise ValueError(f"this checkpoint was saved by method {saved[0]!r} with options "
                             f"{saved[1]}; this hook runs {mine[0]!r} with {mine[1]}: build "
                             "the hook with the same method and options before loading")
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

    def __getstate__(self):
        """Picklable like torch's hook states: the process group, tiers, communicators and
        telemetry stay behind (a pickled state runs on the default group; a hierarchical one
        builds its tiers again when unpickled, a collective: on every rank)."""
        return {k: v for k, v in self.__dict__.items()
                if k not in ("ranks", "tiers", "compressed", "dense", "telemetry")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.agreed = False
        self._connect(None)
