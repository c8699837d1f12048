"""Bucket layouts, and exact resume across DDP's bucket rebuild.

DDP groups gradients into buckets one way in its first iteration and regroups them by the order
gradients became ready after it. A run resumed from a checkpoint therefore sees the initial
buckets in its first iteration, while the run it continues had the rebuilt ones; residuals,
PowerSGD memories and block boundaries belong to the latter. For that one iteration the hook
holds back every bucket that differs from the saved layout and, once the last bucket has
arrived, averages the gradients grouped as the saved buckets were, then writes the results
into DDP's buckets. Needs the parameter positions recorded by `BucketLayout.track` (done by
`register`).
"""
from __future__ import annotations

from typing import Callable

import torch

from .communicators import Bucket

#: average(bucket, iteration) -> Future: the hook's averaging of one bucket.
Average = Callable[[Bucket, int], torch.futures.Future]


class BucketLayout:
    """Which parameters (by position in the module) each bucket holds, and the saved layout a
    resumed run must follow in its first iteration."""

    def __init__(self):
        self.param_index: dict[int, int] | None = None
        self.layout: dict[int, tuple[int, ...]] = {}
        self.resuming: dict[int, tuple[int, ...]] | None = None
        self._iterations_seen = 0  # in this process
        self._held: list = []

    def track(self, module: torch.nn.Module) -> None:
        """Know parameters by their position in `module.parameters()`, so that a checkpoint
        records which parameters each bucket held."""
        self.param_index = {id(p): i for i, p in enumerate(module.parameters())}

    def record(self, bucket) -> tuple[int, ...] | None:
        """The positions of the parameters in DDP's `bucket` (None when parameters are not
        tracked). DDP regroups its buckets once, after its first iteration (a bucket may keep
        its index and size with its parameters in another order), so the layout is read
        afresh in the first two iterations of this process and remembered after that."""
        if self.param_index is None:
            return None
        params = self.layout.get(bucket.index()) if self._iterations_seen >= 2 else None
        if params is None:
            params = tuple(self.param_index[id(p)] for p in bucket.parameters())
        self.layout[bucket.index()] = params
        if bucket.is_last():
            for stale in [i for i in self.layout if i > bucket.index()]:
                del self.layout[stale]
            self._iterations_seen += 1
        return params

    def resume_from(self, saved: dict) -> None:
        """Follow the saved layout in the next iteration (an empty one: nothing to follow)."""
        self.resuming = dict(saved) if saved else None

    def defer_if_moved(self, bucket, params, iteration: int, average: Average):
        """Hold DDP's `bucket` back (returning a future completed later) unless it matches the
        saved bucket of the same index and nothing has been held back yet; None means: go on
        normally."""
        saved = self.resuming
        if params is None:
            raise RuntimeError("this hook state was loaded from a checkpoint but does not know "
                               "the model's parameters, so it cannot put the saved residuals "
                               "back on the buckets they belong to: build it with "
                               "gradcomp.comm.register(ddp_model, ...) (or call "
                               "state.track_parameters(model)) before loading the checkpoint")
        if not self._held and saved.get(bucket.index()) == params:
            if bucket.is_last():
                self.resuming = None
            return None
        buf = bucket.buffer()
        fut = torch.futures.Future(devices=[buf.device] if buf.is_cuda else None)
        self._held.append((buf, dict(zip(params, bucket.gradients())), fut))
        if bucket.is_last():
            self._average_as_saved(saved, iteration, average)
            self.resuming = None
            self.layout = dict(saved)  # what the residuals belong to, for the next checkpoint
        return fut

    def _average_as_saved(self, saved: dict, iteration: int, average: Average) -> None:
        held, self._held = self._held, []
        grads = {p: g for _, views, _ in held for p, g in views.items()}
        indices = sorted(i for i, params in saved.items() if params and params[0] in grads)
        if sorted(p for i in indices for p in saved[i]) != sorted(grads):
            error = RuntimeError("the checkpoint's bucket layout does not match this model's "
                                 "parameters: was it saved from another model?")
            for _, _, fut in held:
                fut.set_exception(error)
            return
        flats = {i: torch.cat([grads[p].reshape(-1) for p in saved[i]]) for i in indices}
        futs = [average(Bucket(flats[i], i, _shapes_of([grads[p] for p in saved[i]])),
                        iteration) for i in indices]

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

    def __getstate__(self):
        """Picklable: what was held back and the count of iterations stay behind."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_held", "_iterations_seen")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._iterations_seen = 0
        self._held = []


def _shapes_of(tensors) -> Callable[[], list[torch.Size]]:
    shapes = [t.shape for t in tensors]
    return lambda: shapes
