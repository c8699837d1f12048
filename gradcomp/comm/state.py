"""The hook's state between iterations: the compressor, counters, buffers, bucket layouts,
telemetry; `state_dict()` checkpoints it."""
import hashlib
from typing import Any

import torch
import torch.distributed as dist

from ..compressors import Compressor
from ..checks import check_int
from .blocksparse import DEFAULT_BLOCK_SIZE
from .telemetry import Telemetry

COMMUNICATORS = ("default", "blocksparse")
#: Methods whose decoded payload is mostly zero, so the block-sparse all-reduce can carry it.
BLOCK_SPARSE_METHODS = ("topk", "threshold", "randomk")


class SharedRandomnessMismatch(RuntimeError):
    """Ranks would draw different 'shared' random numbers (different seeds or options)."""


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
        all-gather) or "blocksparse" (sparsifying methods only: each rank decodes its own
        payload to a dense, mostly zero bucket and `block_sparse_all_reduce`s it).
    block_size: elements per block of the block-sparse all-reduce.
    """

    def __init__(self, compressor: Compressor, process_group=None, start_iter: int = 1,
                 min_compression_rate: float = 1.0, telemetry_limit: int = 100_000,
                 communicator: str = "default", block_size: int = DEFAULT_BLOCK_SIZE):
        if not isinstance(compressor, Compressor):
            raise TypeError("compressor must be a gradcomp Compressor, e.g. "
                            "gradcomp.compressor('topk', ratio=0.01)")
        if isinstance(start_iter, bool) or not isinstance(start_iter, int) or start_iter < 0:
            raise ValueError(f"start_iter={start_iter!r} is not allowed: it must be an integer >= 0")
        if not isinstance(min_compression_rate, (int, float)) or not min_compression_rate >= 0:
            raise ValueError(f"min_compression_rate={min_compression_rate!r} is not allowed: "
                             "it must be a number >= 0")
        if communicator not in COMMUNICATORS:
            raise ValueError(f"communicator={communicator!r} is not allowed: choose one of "
                             f"{', '.join(map(repr, COMMUNICATORS))}")
        if communicator == "blocksparse" and compressor.name not in BLOCK_SPARSE_METHODS:
            raise ValueError(f"communicator='blocksparse' is not allowed for method "
                             f"{compressor.name!r}: it carries the mostly zero gradients of "
                             f"{', '.join(map(repr, BLOCK_SPARSE_METHODS))}")
        self.communicator = communicator
        self.block_size = check_int(block_size, "block_size", 1)
        self.compressor = compressor
        self.process_group = process_group
        self._world_size: int | None = None
        self._backend: str | None = None
        self.start_iter = start_iter
        self.min_compression_rate = float(min_compression_rate)
        self.iteration = 0
        self.telemetry_limit = telemetry_limit
        self.telemetry = Telemetry(telemetry_limit) if telemetry_limit else None
        self.checked_shared_randomness = False
        self._gather_buffers: dict[int, list[torch.Tensor]] = {}
        self._round_groups: dict = {}
        self._worth_compressing: dict[tuple[int, int, torch.dtype], bool] = {}
        # Bucket layouts as parameter positions (known once `track_parameters` was called).
        self.param_index: dict[int, int] | None = None
        self.layout: dict[int, tuple[int, ...]] = {}
        self._iterations_seen = 0  # in this process, for `record_layout`
        self.resuming: dict[int, tuple[int, ...]] | None = None
        self.deferred: list = []
        compressor.set_rank(self.rank)

    def track_parameters(self, module: torch.nn.Module) -> None:
        """Know parameters by their position in `module.parameters()`, so that a checkpoint
        records which parameters each bucket held (see `gradcomp.comm.resume`)."""
        self.param_index = {id(p): i for i, p in enumerate(module.parameters())}

    def record_layout(self, bucket) -> tuple[int, ...] | None:
        """The positions of the parameters in `bucket` (None when parameters are not tracked).
        DDP regroups its buckets once, after its first iteration (a bucket may keep its index
        and size with its parameters in another order), so the layout is read afresh in the
        first two iterations of this process and remembered after that."""
        if self.param_index is None:
            return None
        params = self.layout.get(bucket.index()) if self._layout_settled else None
        if params is None:
            params = tuple(self.param_index[id(p)] for p in bucket.parameters())
        self.layout[bucket.index()] = params
        if bucket.is_last():
            for stale in [i for i in self.layout if i > bucket.index()]:
                del self.layout[stale]
            self._iterations_seen += 1
        return params

    @property
    def _layout_settled(self) -> bool:
        return self._iterations_seen >= 2

    @property
    def group(self):
        return self.process_group if self.process_group is not None else dist.group.WORLD

    @property
    def world_size(self) -> int:
        if self._world_size is None:
            self._world_size = dist.get_world_size(self.group) if dist.is_initialized() else 1
        return self._world_size

    @property
    def rank(self) -> int:
        return dist.get_rank(self.group) if dist.is_initialized() else 0

    @property
    def backend(self) -> str:
        if self._backend is None:
            self._backend = dist.get_backend(self.group) if dist.is_initialized() else "none"
        return self._backend

    @property
    def per_matrix(self) -> bool:
        """Whether the method compresses each parameter's matrix in rounds (PowerSGD's
        begin / next_round / finish) rather than the flat bucket."""
        return hasattr(self.compressor, "begin")

    def round_group(self, bucket_index: int, device: torch.device):
        """A gloo group of all ranks for one bucket's multi-round exchange (None where the hook
        must wait instead: NCCL, CUDA tensors on gloo, a custom process group, or one rank)."""
        if (self.process_group is not None or self.world_size == 1
                or self.backend != "gloo" or device.type != "cpu"):
            return None
        if bucket_index not in self._round_groups:
            self._round_groups[bucket_index] = dist.new_group(backend="gloo")
        return self._round_groups[bucket_index]

    def worth_compressing(self, bucket_index: int, numel: int, dtype: torch.dtype) -> bool:
        key = (bucket_index, numel, dtype)
        if key not in self._worth_compressing:
            if self.per_matrix:  # the method decides per matrix itself
                ok = True
            else:
                sent = self.compressor.wire_nbytes(numel, dtype)
                ok = sent * self.min_compression_rate < numel * dtype.itemsize
            self._worth_compressing[key] = ok
        return self._worth_compressing[key]

    def gather_buffers(self, bucket_index: int, nbytes: int, device) -> list[torch.Tensor]:
        """Receive buffers for one bucket's all-gather, reused across iterations."""
        bufs = self._gather_buffers.get(bucket_index)
        if bufs is None or bufs[0].numel() != nbytes or bufs[0].device != device:
            bufs = [torch.empty(nbytes, dtype=torch.uint8, device=device)
                    for _ in range(self.world_size)]
            self._gather_buffers[bucket_index] = bufs
        return bufs

    def telemetry_rows(self) -> list[dict]:
        """Per-bucket bytes and encode/communication/decode seconds recorded so far."""
        return self.telemetry.rows() if self.telemetry else []

    def state_dict(self) -> dict[str, Any]:
        return {"method": self.compressor.name, "options": self.compressor.options(),
                "communicator": self.communicator, "block_size": self.block_size,
                "iteration": self.iteration, "start_iter": self.start_iter,
                "min_compression_rate": self.min_compression_rate,
                "checked_shared_randomness": self.checked_shared_randomness,
                "layout": dict(self.layout), "compressor": self.compressor.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = (state["method"], state["options"])
        mine = (self.compressor.name, self.compressor.options())
        if saved != mine:
            raise ValueError(f"this checkpoint was saved by method {saved[0]!r} with options "
                             f"{saved[1]}; this hook runs {mine[0]!r} with {mine[1]}: build "
                             "the hook with the same method and options before loading")
        saved_comm = state.get("communicator", "default")
        if saved_comm != self.communicator:
            raise ValueError(f"this checkpoint was saved with communicator={saved_comm!r}; this "
                             f"hook runs communicator={self.communicator!r}: build the hook "
                             "with the same communicator before loading")
        self.iteration = state["iteration"]
        self.start_iter = state["start_iter"]
        self.min_compression_rate = state["min_compression_rate"]
        self.checked_shared_randomness = state["checked_shared_randomness"]
        self.compressor.load_state_dict(state["compressor"])
        # The first iteration after a restart runs on DDP's initial buckets; the hook regroups
        # gradients into the saved buckets for it, so compression continues exactly.
        self.resuming = dict(state["layout"]) if state["layout"] else None

    def __getstate__(self):
        """Picklable like torch's hook states: the process group and caches stay behind."""
        return {k: v for k, v in self.__dict__.items()
                if k not in ("process_group", "_gather_buffers", "telemetry", "deferred",
                             "_world_size", "_backend", "_round_groups", "_iterations_seen")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.process_group = None
        self._world_size = None
        self._backend = None
        self._iterations_seen = 0
        self._round_groups = {}
        self._gather_buffers = {}
        self.deferred = []
        self.telemetry = Telemetry(self.telemetry_limit) if self.telemetry_limit else None


def fingerprint(compressor: Compressor) -> int:
    """A digest of what must agree across ranks: method, options and random generator states."""
    h = hashlib.sha256(repr((compressor.name, sorted(compressor.options().items()))).encode())
    h.update(compressor.shared_state())
    return int.from_bytes(h.digest()[:7], "little")


def check_shared_randomness(state: HookState, device: torch.device) -> None:
    """Compare the compressor's fingerprint across ranks once; raise on a mismatch."""
    mine = torch.tensor([fingerprint(state.compressor)], dtype=torch.int64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(state.world_size)]
    dist.all_gather(everyone, mine, group=state.group)
    values = [int(t.item()) for t in everyone]
    if len(set(values)) > 1:
        raise SharedRandomnessMismatch(
            f"ranks disagree on the shared random state of {state.compressor.name!r} "
            f"(options {state.compressor.options()}): build the compressor with the same seed "
            f"and options on every rank (fingerprints by rank: {values})")
    state.checked_shared_randomness = True


