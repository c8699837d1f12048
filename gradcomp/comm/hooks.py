"""Drop-in DDP communication hooks for every gradcomp compressor.

    state = gradcomp.comm.register(ddp_model, "topk", ratio=0.01, error_feedback=True)

or, like torch's own hooks:

    ddp_model.register_comm_hook(HookState(gradcomp.compressor("fp16")), hook)

Every bucket takes the same path: the state's route picks its communicator (the method's
own, `auto`'s candidate, or the uncompressed all-reduce before `start_iter` and where
compression does not pay), the communicator averages it in one call (`Communicator.average`:
encode, exchange as a Future: all-reduce, all-gather, the block-sparse all-reduce or PowerSGD's
two rounds, decode into the buffer), and the route learns from its record. With
`hierarchical=True` a bucket takes that path on this rank's shard, between a reduce-scatter
and an all-gather inside its node (`gradcomp.comm.hierarchical`). Work is chained on futures;
nothing waits inside a future callback. The first call in a process, and the first after a
resume, first checks that every rank runs the same hook (`agreement`).
"""
# No `from __future__ import annotations`: DDP checks the hook's annotations at runtime.
from typing import Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..compressors import Compressor, compressor as build_compressor, option_names
from .agreement import RankMismatch, check_agreement, explained, settings
from .auto import AUTO_OPTIONS, AutoState
from ..collectives.blocksparse import DEFAULT_BLOCK_SIZE
from .communicators import Bucket, Communicator
from .state import HookState
from .telemetry import BucketRecord


def hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP communication hook: average `bucket` across ranks through `state.compressor`."""
    if not isinstance(bucket, dist.GradBucket):
        raise RuntimeError(f"gradcomp's hook was called with {type(bucket).__name__} instead of "
                           f"a DDP GradBucket: {PYTHON_REDUCER}")
    try:
        return _hook(state, bucket)
    except RuntimeError as exc:  # a failed collective: say why where another rank knows
        _raise_explained(exc, state)


def _hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    if not state.agreed:
        if state.tiers is None:
            check_agreement(settings(state, bucket), state.ranks, bucket.buffer().device)
        else:
            state.tiers.check_agreement(settings(state, bucket), bucket.buffer().device)
        state.agreed = True
    iteration = state.iteration
    if bucket.is_last():
        state.iteration += 1
    params = state.buckets.record(bucket)
    fut = None
    if state.buckets.resuming is not None:
        fut = state.buckets.defer_if_moved(bucket, params, iteration,
                                           lambda b, i: average(state, b, i))
    if fut is None:
        # Only PowerSGD asks for the parameters' shapes (asking DDP for them costs a little).
        shapes = lambda: [g.shape for g in bucket.gradients()]  # noqa: E731
        fut = average(state, Bucket(bucket.buffer(), bucket.index(), shapes), iteration)
    if bucket.is_last():
        state.end_iteration(iteration)
    return fut


def _raise_explained(exc: RuntimeError, state: HookState):
    """Raise `exc`, or the `CheckpointMismatch` that made the collective fail."""
    why = explained(exc, state.ranks)
    if why is exc or isinstance(exc, RankMismatch):
        raise exc
    raise why from exc


#: Why DDP's python reducer is refused (docs/trainers.md: torch.compile).
PYTHON_REDUCER = (
    "torch._dynamo.config.optimize_ddp='python_reducer' (the mode compiled autograd needs) makes "
    "DDP call comm hooks once per parameter, not per bucket, and gradcomp's hooks compress and "
    "exchange whole buckets: it is not supported. For this DDP model choose optimize_ddp="
    "'ddp_optimizer' (True, the default; torch.compile(ddp_model) works with every method) or "
    "'no_optimization' (False), and an uncompiled backward")


def average(state: HookState, bucket: Bucket, iteration: int) -> torch.futures.Future:
    """Average `bucket.buffer` across ranks; the future's value is the buffer, holding the
    result: `exchange`, or (hierarchical) through the two tiers, `exchange` on a shard."""
    if state.tiers is not None:
        return state.tiers.average(state, bucket, iteration, exchange)
    return exchange(state, bucket, iteration)


def exchange(state: HookState, bucket: Bucket, iteration: int,
             bind: Callable[[Communicator], Communicator] | None = None,
             describe: Callable[[str], BucketRecord] | None = None) -> torch.futures.Future:
    """The route picks a communicator for `bucket`, the communicator averages it, the route
    learns from its record; the future's value is the buffer, holding the average.
    `bind(communicator)`: the one that moves it instead (the same on other groups);
    `describe(name)`: its telemetry record."""
    communicator = state.communicator_for(bucket, iteration)  # the route picks
    buf = bucket.buffer
    record = (describe(communicator.name) if describe is not None else
              BucketRecord(iteration, bucket.index, communicator.name, buf.numel(),
                           buf.numel() * buf.element_size(), 0))
    state.start_record(record, buf.device)
    moving = communicator if bind is None else bind(communicator)

    def encoded(sent):  # why it travels uncompressed, before its exchange can finish
        record.uncompressed = state.uncompressed_reason(communicator, buf, sent.nbytes,
                                                        iteration)

    averaged = moving.average(bucket, record, encoded)  # the communicator averages

    def learn(fut):
        try:
            out = fut.value()  # raises if a collective failed
        except RuntimeError as exc:
            _raise_explained(exc, state)
        state.finished(record)  # the route learns
        return out

    return averaged.then(learn)


def build_state(method: str | Compressor = "none", *, process_group=None, start_iter: int = 1,
                min_compression_rate: float | None = None, error_feedback: bool | None = None,
                telemetry_limit: int = 100_000, communicator: str = "default",
                block_size: int = DEFAULT_BLOCK_SIZE, hierarchical: bool = False,
                gpus_per_node: int | None = None, intra: str = "none", **options) -> HookState:
    """The `HookState` that `register` registers, from the same arguments (every option is
    checked here; needs no DDP model). "auto" gives an `AutoState` (options `AUTO_OPTIONS`)."""
    hook_options = dict(process_group=process_group, start_iter=start_iter,
                        min_compression_rate=1.0 if min_compression_rate is None
                        else min_compression_rate, telemetry_limit=telemetry_limit,
                        hierarchical=hierarchical, gpus_per_node=gpus_per_node, intra=intra)
    if method == "auto":
        return _auto_state(options, error_feedback, communicator, hook_options)
    if isinstance(method, Compressor):
        if options or error_feedback is not None:
            raise TypeError("pass options with a method name, not with a built compressor")
        comp = method
    else:
        if min_compression_rate is not None and "min_compression_rate" in option_names(method):
            options["min_compression_rate"] = min_compression_rate
            min_compression_rate = None
        comp = build_compressor(method, error_feedback=error_feedback, **options)
    return HookState(comp, communicator=communicator, block_size=block_size, **hook_options)


def register(ddp_model, method: str | Compressor = "none", **options) -> HookState:
    """Register gradcomp's hook with `method` on a DistributedDataParallel model ("auto": the
    fastest of several methods per bucket, see `gradcomp.comm.auto`).

    Hook options: `process_group`, `start_iter`, `min_compression_rate`, `error_feedback`,
    `telemetry_limit`, `communicator`, `block_size`, `hierarchical`, `gpus_per_node` and
    `intra` go to `HookState` ("blocksparse": the block-sparse all-reduce, for topk, threshold
    and randomk; `hierarchical=True`: the method only between nodes, with every method,
    "auto" included, see `gradcomp.comm.hierarchical`); the other `options` go to the
    compressor (`gradcomp.compressor(method, **options)`); `min_compression_rate` goes to the
    compressor when it has that option (PowerSGD), else to the hook. Returns the `HookState`
    (checkpoint it with `gradcomp.comm.save_state(ddp_model)` or `state.state_dict()`).
    """
    if not isinstance(ddp_model, DistributedDataParallel):
        raise TypeError(f"ddp_model must be a torch.nn.parallel.DistributedDataParallel, got "
                        f"{type(ddp_model).__name__}: wrap the model in DDP first")
    if getattr(ddp_model, "_use_python_reducer", False):  # set by DDP from torch._dynamo.config
        raise ValueError(PYTHON_REDUCER)
    state = build_state(method, **options)
    state.track_parameters(ddp_model.module)
    ddp_model.register_comm_hook(state, hook)
    return state


def _auto_state(options: dict, error_feedback, communicator: str, hook_options: dict):
    if error_feedback is not None or communicator != "default":
        raise TypeError("'auto' takes error_feedback and communicator per candidate, e.g. "
                        "candidates=[('topk', {'ratio': 0.01, 'error_feedback': True})]")
    unknown = sorted(set(options) - set(AUTO_OPTIONS))
    if unknown:
        raise TypeError(f"option {unknown[0]!r} is not accepted by 'auto'; its options are: "
                        f"{', '.join(AUTO_OPTIONS)} (a candidate's options go with it in "
                        "candidates)")
    return AutoState(**options, **hook_options)
