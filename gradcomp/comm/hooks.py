"""Drop-in DDP communication hooks for every gradcomp compressor.

    state = gradcomp.comm.register(ddp_model, "topk", ratio=0.01, error_feedback=True)

or, like torch's own hooks:

    ddp_model.register_comm_hook(HookState(gradcomp.compressor("fp16")), hook)

Per bucket the hook compresses the flat gradient buffer (PowerSGD: each parameter's matrix),
moves the payload by all-reduce or all-gather as the compressor declares, and writes the average
gradient back. Work is chained on futures; nothing waits inside a future callback.

PowerSGD needs two rounds (P, then Q from the summed P), and collectives must be issued in the
same order on every rank: a Q issued from a callback could interleave with another bucket's
collectives. On gloo with the default group and CPU tensors, each bucket gets its own gloo
group for its P and Q (created once, in bucket order), so the second round is chained on the
first without waiting. With NCCL, CUDA tensors on gloo (the chained rounds are tested on CPU
only) or a custom process group, the hook waits for P's all-reduce before computing Q: on NCCL
a stream wait that does not block the CPU; on gloo it holds the backward pass for one round
trip.

With `communicator="blocksparse"` (topk, threshold, randomk) each rank decodes its own payload
to a dense, mostly zero bucket and sums it with `blocksparse.block_sparse_all_reduce`, whose
three rounds are chained on the bucket's own gloo group in the same way, or waited for where
PowerSGD waits. Its result is the all-gather path's average up to the order of the additions;
`bytes_sent` counts this rank's bitmap, blocks sent to other owners and shard.
"""

import torch
import torch.distributed as dist

from ..compressors import Compressor, compressor as build_compressor, option_names
from . import resume, wire
from .blocksparse import DEFAULT_BLOCK_SIZE, block_sparse_all_reduce
from .state import HookState, check_shared_randomness
from .telemetry import BucketRecord, mark


def hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP communication hook: average `bucket` across ranks through `state.compressor`."""
    iteration = state.iteration
    if bucket.is_last():
        state.iteration += 1
    params = state.record_layout(bucket)
    if state.resuming is not None:
        deferred = resume.defer_if_moved(state, bucket, params, iteration, average)
        if deferred is not None:
            return deferred
    # Only PowerSGD needs the parameters' shapes (asking DDP for them costs a little).
    shapes = ([g.shape for g in bucket.gradients()] if state.per_matrix
              else [bucket.buffer().shape])
    return average(state, bucket.buffer(), bucket.index(), shapes, iteration)


def average(state: HookState, buf: torch.Tensor, index: int, shapes, iteration: int):
    """Average the flat gradient `buf` (tensors of `shapes`, laid end to end) across ranks;
    the future's value is `buf`, holding the result."""
    rec = None
    if state.telemetry is not None:
        rec = state.telemetry.start(BucketRecord(iteration, index, state.compressor.name,
                                                 buf.numel(), buf.numel() * buf.element_size(),
                                                 0), buf.device)
    if iteration < state.start_iter or not state.worth_compressing(index, buf.numel(), buf.dtype):
        return _plain_allreduce(state, buf, rec)
    if state.compressor.shared_randomness and not state.checked_shared_randomness:
        check_shared_randomness(state, buf.device)
    if state.per_matrix:
        return _powersgd(state, buf, index, rec, shapes)
    if state.communicator == "blocksparse":
        return _block_sparse(state, buf, index, rec)
    if state.compressor.aggregation == "allreduce":
        return _compressed_allreduce(state, buf, index, rec)
    return _compressed_allgather(state, buf, index, rec)


def _mark(rec: BucketRecord | None, device) -> None:
    if rec is not None:
        rec.marks.append(mark(device))


def _plain_allreduce(state: HookState, buf: torch.Tensor, rec: BucketRecord | None):
    if rec:
        rec.method = "allreduce"
        rec.bytes_sent = rec.bytes_original
    op = dist.ReduceOp.SUM
    if state.world_size > 1:
        if state.backend == "nccl":  # NCCL averages inside the collective: no extra pass
            op = dist.ReduceOp.AVG
        else:
            buf.div_(state.world_size)
    _mark(rec, buf.device)

    def done(fut):
        fut.value()  # raises if the collective failed
        _mark(rec, buf.device)
        _mark(rec, buf.device)
        return buf

    work = dist.all_reduce(buf, op=op, group=state.group, async_op=True)
    return work.get_future().then(done)


def _write_back(buf: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    flat = result.reshape(-1)
    if flat.data_ptr() != buf.data_ptr() or flat.dtype != buf.dtype:
        buf.copy_(flat)
    return buf


def _compressed_allreduce(state: HookState, buf: torch.Tensor, index: int, rec):
    comp = state.compressor
    payload = comp.compress(buf, key=index)
    wires = list(payload.tensors)
    for t in wires:
        if t.is_floating_point():
            t.div_(state.world_size)
    if rec:
        rec.bytes_sent = payload.nbytes
    _mark(rec, buf.device)

    def decode(fut):
        _mark(rec, buf.device)
        out = _write_back(buf, comp.decompress(payload.with_tensors(fut.value())))
        _mark(rec, buf.device)
        return out

    return wire.all_reduce_sum(wires, state.group).then(decode)


def _compressed_allgather(state: HookState, buf: torch.Tensor, index: int, rec):
    comp = state.compressor
    payload = comp.compress(buf, key=index)
    send = wire.pack_bytes(payload.tensors)
    recv = state.gather_buffers(index, send.numel(), send.device)
    if rec:
        rec.bytes_sent = payload.nbytes
    _mark(rec, buf.device)

    def decode(fut):
        _mark(rec, buf.device)
        payloads = [payload.with_tensors(wire.unpack_bytes(r, payload.tensors))
                    for r in fut.value()]
        out = _write_back(buf, comp.aggregate(payloads))
        _mark(rec, buf.device)
        return out

    return wire.all_gather_bytes(send, recv, state.group).then(decode)


def _block_sparse(state: HookState, buf: torch.Tensor, index: int, rec):
    """Decode this rank's own payload to a dense, mostly zero bucket and sum it with the
    block-sparse all-reduce (on the bucket's own gloo group, chained, where `round_group`
    gives one; else waiting for its rounds, as PowerSGD does)."""
    comp = state.compressor
    dense = comp.decompress(comp.compress(buf, key=index)).reshape(-1)
    dense.div_(state.world_size)
    _mark(rec, buf.device)

    def decode(fut):
        exchange = fut.value()  # raises if a collective failed
        _mark(rec, buf.device)
        if rec:
            rec.bytes_sent = exchange.bytes_sent
        out = _write_back(buf, exchange.tensor)
        _mark(rec, buf.device)
        return out

    own_group = state.round_group(index, buf.device)
    if own_group is not None:
        return block_sparse_all_reduce(dense, state.block_size, own_group,
                                       async_op=True).then(decode)
    done = torch.futures.Future()
    done.set_result(block_sparse_all_reduce(dense, state.block_size, state.group))
    return done.then(decode)


def _powersgd(state: HookState, buf: torch.Tensor, index: int, rec, shapes):
    comp = state.compressor
    if sum(s.numel() for s in shapes) != buf.numel():
        shapes = [buf.shape]
    step = comp.begin(buf, shapes, key=index)
    plain = step.plain().div_(state.world_size)
    p = step.p_flat()
    if rec:
        rec.bytes_sent = (plain.numel() * plain.element_size()
                          + (p.numel() + step.q_flat().numel()) * p.element_size())
    _mark(rec, buf.device)
    own_group = state.round_group(index, buf.device)
    if own_group is None:  # see the module docstring
        wire.all_reduce_sum([p], state.group).wait()
        sums = wire.all_reduce_sum([plain, comp.next_round(step, p)], state.group)
    else:
        sums = torch.futures.collect_all([wire.all_reduce_sum([plain], state.group),
                                          _second_round(step, p, own_group, comp, buf.device)])
        sums = sums.then(lambda f: [t for part in f.value() for t in part.value()])

    def decode(fut):
        plain_sum, q_sum = fut.value()  # raises if a collective failed
        _mark(rec, buf.device)
        comp.finish(step, plain_sum, q_sum.div_(state.world_size), out=buf)
        _mark(rec, buf.device)
        return buf

    return sums.then(decode)


def _second_round(step, p: torch.Tensor, group, comp, device) -> torch.futures.Future:
    """All-reduce P, then Q = M^T P, all-reduce Q, all on the bucket's own group (so the Q
    issued from a callback cannot interleave with another bucket's collectives); the future's
    value is [summed Q]."""
    done = torch.futures.Future(devices=[device] if device.type == "cuda" else None)

    def after_p(fut):
        try:
            fut.value()
            q_fut = wire.all_reduce_sum([comp.next_round(step, p)], group)
        except Exception as exc:  # noqa: BLE001 - handed on through the future
            done.set_exception(exc)
            return
        q_fut.then(lambda f: _settle(done, f))

    wire.all_reduce_sum([p], group).then(after_p)
    return done


def _settle(target: torch.futures.Future, source: torch.futures.Future) -> None:
    try:
        target.set_result(source.value())
    except Exception as exc:  # noqa: BLE001 - handed on through the future
        target.set_exception(exc)


def register(ddp_model, method: str | Compressor = "none", *, process_group=None,
             start_iter: int = 1, min_compression_rate: float | None = None,
             error_feedback: bool | None = None, telemetry_limit: int = 100_000,
             communicator: str = "default", block_size: int = DEFAULT_BLOCK_SIZE,
             **options) -> HookState:
    """Register gradcomp's hook with `method` on a DistributedDataParallel model.

    `communicator` and `block_size` go to `HookState` ("blocksparse": the block-sparse
    all-reduce, for topk, threshold and randomk); `options` go to the compressor
    (`gradcomp.compressor(method, **options)`);
    `min_compression_rate` goes to the compressor when it has that option (PowerSGD), else to
    the hook. Returns the `HookState` (checkpoint it with `state_dict()`).
    """
    if isinstance(method, Compressor):
        if options or error_feedback is not None:
            raise TypeError("pass options with a method name, not with a built compressor")
        comp = method
    else:
        if min_compression_rate is not None and "min_compression_rate" in option_names(method):
            options["min_compression_rate"] = min_compression_rate
            min_compression_rate = None
        comp = build_compressor(method, error_feedback=error_feedback, **options)
    state = HookState(comp, process_group=process_group, start_iter=start_iter,
                      min_compression_rate=1.0 if min_compression_rate is None
                      else min_compression_rate, telemetry_limit=telemetry_limit,
                      communicator=communicator, block_size=block_size)
    state.track_parameters(ddp_model.module)
    ddp_model.register_comm_hook(state, hook)
    return state
