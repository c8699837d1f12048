"""Exact resume across DDP's bucket rebuild.

DDP groups gradients into buckets one way in its first iteration and regroups them by the order
gradients became ready after it. A run resumed from a checkpoint therefore sees the initial
buckets in its first iteration, while the run it continues had the rebuilt ones; residuals,
PowerSGD memories and block boundaries belong to the latter. For that one iteration the hook
holds back every bucket that differs from the saved layout and, once the last bucket has
arrived, averages the gradients grouped as the saved buckets were, then writes the results
into DDP's buckets. Needs the parameter positions recorded by `HookState.track_parameters`
(done by `register`).
"""
import torch

from .state import HookState


def defer_if_moved(state: HookState, bucket, params, iteration: int, average):
    """Hold `bucket` back (returning a future completed later) unless it matches the saved
    bucket of the same index and nothing has been held back yet; None means: go on normally.
    `average(state, flat, index, shapes, iteration)` is the hook's averaging of one bucket."""
    saved = state.resuming
    if params is None:
        state.resuming = None
        return None
    if not state.deferred and saved.get(bucket.index()) == params:
        if bucket.is_last():
            state.resuming = None
        return None
    buf = bucket.buffer()
    fut = torch.futures.Future(devices=[buf.device] if buf.is_cuda else None)
    state.deferred.append((buf, dict(zip(params, bucket.gradients())), fut))
    if bucket.is_last():
        _average_as_saved(state, saved, iteration, average)
        state.resuming = None
        state.layout = dict(saved)  # what the residuals belong to, for the next checkpoint
    return fut


def _average_as_saved(state: HookState, saved: dict, iteration: int, average) -> None:
    held, state.deferred = state.deferred, []
    grads = {p: g for _, views, _ in held for p, g in views.items()}
    indices = sorted(i for i, params in saved.items() if params and params[0] in grads)
    if sorted(p for i in indices for p in saved[i]) != sorted(grads):
        error = RuntimeError("the checkpoint's bucket layout does not match this model's "
                             "parameters: was it saved from another model?")
        for _, _, fut in held:
            fut.set_exception(error)
        return
    flats = {i: torch.cat([grads[p].reshape(-1) for p in saved[i]]) for i in indices}
    futs = [average(state, flats[i], i, [grads[p].shape for p in saved[i]], iteration)
            for i in indices]

    def scatter_back(done):
        try:
            for f in done.value():
                f.value()
            for i in indices:
                offset = 0
                for p in saved[i]:
                    g = grads[p]
                    g.copy_(flats[i][offset : offset + g.numel()].view_as(g))
                    offset += g.numel()
        except Exception as exc:  # noqa: BLE001 - handed to DDP through the futures
            for _, _, fut in held:
                fut.set_exception(exc)
            return
        for buf, _, fut in held:
            fut.set_result(buf)

    torch.futures.collect_all(futs).then(scatter_back)
