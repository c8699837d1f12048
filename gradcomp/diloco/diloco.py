"""DiLoCo and Streaming DiLoCo with the outer gradients compressed by any gradcomp method.

The algorithms: DiLoCo (Douillard et al. 2023, "DiLoCo: Distributed Low-Communication Training
of Language Models", arXiv:2311.08105, Algorithm 1): every worker takes `sync_every` (H) steps
of its inner optimizer alone, then the workers average the pseudo-gradient (the global weights
of the last sync minus the local weights) and the outer optimizer (SGD with Nesterov momentum
in the paper) steps the global weights with it. Streaming DiLoCo (Douillard et al. 2025,
"Streaming DiLoCo with overlapping communication", arXiv:2501.18512): the model is cut into
fragments synced in turn, one every H / fragments steps, and each exchange overlaps `tau`
(`sync_delay`) further inner steps before its result is applied. The schedule is torchft's
(`torchft.local_sgd.DiLoCo`), whose API this class follows without its fault-tolerance
manager.

    inner = torch.optim.AdamW(model.parameters(), lr=4e-4)
    outer = torch.optim.SGD(model.parameters(), lr=0.7, momentum=0.9, nesterov=True)
    with gradcomp.diloco.DiLoCo(model, inner, outer, sync_every=100, method="int8",
                                error_feedback=True):
        for x, y in batches:
            loss_fn(model(x), y).backward()
            inner.step()            # every 100th step also syncs
            inner.zero_grad()

The exchange is the DDP hook's (`gradcomp.comm.hooks.average`): each fragment's flat
pseudo-gradient is one bucket, encoded, exchanged and decoded by the method's communicator,
with its error feedback, telemetry and rank agreement.
"""
from __future__ import annotations

import hashlib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from ..checks import check_int
from ..comm.agreement import check_agreement
from ..comm.hooks import average, build_state
from .fragments import Fragment, split

#: The format of `DiLoCo.state_dict()`.
FORMAT = "gradcomp.diloco/1"


@dataclass
class Pending:
    """One fragment's exchange in flight, applied after inner step `due`: one future per
    group of the fragment, whose value is the group's buffer holding the average."""

    fragment: int
    due: int
    futures: list


class DiLoCo:
    """A context manager over `inner_optimizer.step()`: every `sync_every` inner steps (one
    fragment every `sync_every // fragments`) average the pseudo-gradients across the ranks of
    `process_group` (None: the default group) with `method` and apply them with
    `outer_optimizer` from the weights of the last sync.

    model: a plain module, the same weights on every rank at the start (not wrapped in DDP).
    inner_optimizer: steps the local weights every step (e.g. AdamW).
    outer_optimizer: built over `model.parameters()` (e.g. SGD lr 0.7, momentum 0.9, Nesterov);
        it sees the averaged pseudo-gradient as the gradient of the global weights (parameters
        of other fragments have no gradient during a fragment's outer step, so it skips them).
    sync_every: H, inner steps between two syncs of the same fragment.
    method, error_feedback, **method_options: the gradcomp method for the pseudo-gradients
        and its options, as for `gradcomp.comm.register` (hook options `min_compression_rate`,
        `telemetry_limit`, `communicator`, `block_size` too; error feedback keeps each
        fragment's residual from one sync to the next).
    fragments: parameters cut into this many consecutive fragments of about equal size
        (Streaming DiLoCo); sync_every must be a multiple of it.
    sync_delay: inner steps the exchange overlaps before its result is applied (tau);
        less than sync_every // fragments, so that one exchange is in flight at a time.

    Telemetry (`telemetry_rows()`) has one row per exchanged bucket like the hooks': iteration
    is the inner step (counted from 0) whose `step()` started the exchange, bucket the
    fragment's bucket (one per dtype and device).
    """

    def __init__(self, model: torch.nn.Module, inner_optimizer: torch.optim.Optimizer,
                 outer_optimizer: torch.optim.Optimizer, sync_every: int, method: str = "none",
                 process_group=None, fragments: int = 1, sync_delay: int = 0,
                 error_feedback: bool | None = None, **method_options):
        _check_objects(model, inner_optimizer, outer_optimizer)
        self.interval = check_schedule(sync_every, fragments, sync_delay)
        if method == "auto":
            raise ValueError("method='auto' is not allowed for DiLoCo: choose a method by name "
                             "(e.g. 'none', 'int8', 'topk')")
        params = [p for p in model.parameters() if p.requires_grad]
        _check_outer(params, outer_optimizer)
        self.state = build_state(method, process_group=process_group, start_iter=0,
                                 error_feedback=error_feedback, **method_options)
        self.model = model
        self.inner_optimizer = inner_optimizer
        self.outer_optimizer = outer_optimizer
        self.sync_every = sync_every
        self.sync_delay = sync_delay
        self.fragments: list[Fragment] = split(params, fragments)
        self.local_step = 0  # inner steps taken
        self.pending: Pending | None = None
        self._handles: list = []

    # -- the context manager ----------------------------------------------------------------
    def __enter__(self) -> "DiLoCo":
        if self._handles:
            raise RuntimeError("this DiLoCo is already entered")
        self._handles.append(self.inner_optimizer.register_step_post_hook(self._after_step))
        return self

    def __exit__(self, *exc) -> bool:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self.pending is not None and exc[0] is None:
            for fut in self.pending.futures:  # no collective left running; applied if re-entered
                fut.wait()
        return False

    def _after_step(self, *_) -> None:
        self.local_step += 1
        step = self.local_step
        if (step + self.sync_delay) % self.interval == 0:
            self._start((step + self.sync_delay) // self.interval - 1)
        if self.pending is not None and step == self.pending.due:
            self._apply()

    # -- one sync ------------------------------------------------------------------------------
    def _start(self, sync: int) -> None:
        """Take fragment `sync % fragments`' pseudo-gradient and start averaging it."""
        fragment = self.fragments[sync % len(self.fragments)]
        if not self.state.agreed:
            check_agreement(self.settings(), self.state.ranks, fragment.groups[0].buffer.device)
            self.state.agreed = True
        step = self.local_step
        iteration = step - 1  # counted from 0, as the hooks count DDP's iterations
        futures = [average(self.state, group.pseudo_gradient(), iteration)
                   for group in fragment.groups]
        self.state.end_iteration(iteration)  # warns once if the method saved nothing
        self.pending = Pending(fragment.index, step + self.sync_delay, futures)

    @torch.no_grad()
    def _apply(self) -> None:
        """Wait for the exchange and step the fragment's global weights with the outer
        optimizer; the local weights start again from them."""
        pending, self.pending = self.pending, None
        for fut in pending.futures:
            fut.wait()
        fragment = self.fragments[pending.fragment]
        everything = [p for f in self.fragments for p in f.params]
        grads = [p.grad for p in everything]
        for p in everything:
            p.grad = None
        for group in fragment.groups:
            for p, backup, mean in zip(group.params, group.backup, group.views()):
                p.copy_(backup)
                p.grad = mean
        self.outer_optimizer.step()
        for group in fragment.groups:
            for p, backup in zip(group.params, group.backup):
                backup.copy_(p)
        for p, grad in zip(everything, grads):
            p.grad = grad

    # -- what the ranks compare, report and checkpoint -----------------------------------------
    def settings(self) -> dict[str, str]:
        """What must agree across ranks (see `gradcomp.comm.agreement`)."""
        comp = self.state.compressor
        random = comp.shared_state() if comp.shared_randomness else b""
        return {
            "method": comp.name,
            "options": repr(sorted(comp.options().items())),
            "hook options": ", ".join(f"{k}={v}" for k, v in self.state.hook_options().items()),
            "communicator": f"{self.state.communicator} (block_size={self.state.block_size})",
            "schedule": f"sync_every={self.sync_every}, fragments={len(self.fragments)}, "
                        f"sync_delay={self.sync_delay}",
            "fragments": "; ".join(f.describe() for f in self.fragments),
            "inner step": str(self.local_step),
            "global weights": self._weights_digest(),
            "shared random state": hashlib.sha256(random).hexdigest()[:12],
        }

    def _weights_digest(self) -> str:
        """SHA-256 of the global weights (equal on every rank unless they started apart)."""
        sha = hashlib.sha256()
        for fragment in self.fragments:
            for group in fragment.groups:
                for backup in group.backup:
                    sha.update(backup.reshape(-1).view(torch.uint8).cpu().numpy().tobytes())
        return sha.hexdigest()[:16]

    @contextmanager
    def global_weights(self):
        """Inside the block the model holds the global weights (each fragment's as of its
        last sync, e.g. to evaluate them), after it its local weights again."""
        params = [p for f in self.fragments for p in f.params]
        backups = [b for f in self.fragments for g in f.groups for b in g.backup]
        local = [p.detach().clone() for p in params]
        try:
            with torch.no_grad():
                for p, b in zip(params, backups):
                    p.copy_(b)
            yield self.model
        finally:
            with torch.no_grad():
                for p, saved in zip(params, local):
                    p.copy_(saved)

    def telemetry_rows(self) -> list[dict]:
        """Per exchanged bucket: bytes original and sent, encode/comm/decode seconds."""
        return self.state.telemetry_rows()

    def state_dict(self) -> dict[str, Any]:
        """This rank's DiLoCo state: the step, the global weights, the averaged exchange not
        yet applied (waited for here) and the method's state (residuals); the model and both
        optimizers are checkpointed by their own `state_dict()`."""
        pending = None
        if self.pending is not None:
            averages = [fut.wait().clone() for fut in self.pending.futures]
            pending = {"fragment": self.pending.fragment, "due": self.pending.due,
                       "averages": averages}
        return {"format": FORMAT, "schedule": self._schedule(), "local_step": self.local_step,
                "global_weights": [[b.clone() for b in g.backup]
                                   for f in self.fragments for g in f.groups],
                "pending": pending, "method": self.state.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError("state is not a gradcomp DiLoCo checkpoint: pass what "
                             "DiLoCo.state_dict() returned")
        if state["schedule"] != self._schedule():
            raise ValueError(f"this checkpoint was saved with {state['schedule']}; this DiLoCo "
                             f"runs {self._schedule()}: build it with the same options")
        groups = [g for f in self.fragments for g in f.groups]
        saved = state["global_weights"]
        shapes = [[tuple(t.shape) for t in ts] for ts in saved]
        if shapes != [[tuple(b.shape) for b in g.backup] for g in groups]:
            raise ValueError("this checkpoint's global weights do not match this model's "
                             "parameters: load it into the model it was saved from")
        self.state.load_state_dict(state["method"])
        with torch.no_grad():
            for group, tensors in zip(groups, saved):
                for backup, t in zip(group.backup, tensors):
                    backup.copy_(t)
        self.local_step = state["local_step"]
        self.pending = None
        if state["pending"] is not None:
            self.pending = _completed(state["pending"], self.fragments)

    def _schedule(self) -> dict[str, int]:
        return {"sync_every": self.sync_every, "fragments": len(self.fragments),
                "sync_delay": self.sync_delay}


def check_schedule(sync_every: int, fragments: int, sync_delay: int,
                   names=("sync_every", "fragments", "sync_delay")) -> int:
    """The inner steps between two syncs (sync_every // fragments); a ValueError naming the
    option (as `names` call them) that is not allowed."""
    every, parts, delay = names
    check_int(sync_every, every, 1)
    check_int(fragments, parts, 1)
    if sync_every < fragments or sync_every % fragments:
        raise ValueError(f"{every}={sync_every} is not allowed with {parts}={fragments}: "
                         f"{every} must be a multiple of {parts} (one fragment is synced every "
                         f"{every} // {parts} inner steps)")
    check_int(sync_delay, delay, 0)
    if sync_delay >= sync_every // fragments:
        raise ValueError(f"{delay}={sync_delay} is not allowed: it must be less than the "
                         f"{sync_every // fragments} inner step(s) between two syncs ({every} // "
                         f"{parts}), so that an exchange ends before the next begins")
    return sync_every // fragments


def _completed(saved: dict, fragments: list[Fragment]) -> Pending:
    """A saved exchange as one that has finished: its averages back in the buffers."""
    futures = []
    for group, mean in zip(fragments[saved["fragment"]].groups, saved["averages"]):
        group.buffer.copy_(mean)
        device = group.buffer.device
        fut = torch.futures.Future(devices=[device] if device.type == "cuda" else None)
        fut.set_result(group.buffer)
        futures.append(fut)
    return Pending(saved["fragment"], saved["due"], futures)


def _check_objects(model, inner_optimizer, outer_optimizer) -> None:
    if isinstance(model, DistributedDataParallel):
        raise TypeError("model must be a plain module, not DistributedDataParallel: DiLoCo "
                        "averages the weights itself every sync_every steps (pass ddp.module)")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for name, opt in (("inner_optimizer", inner_optimizer), ("outer_optimizer", outer_optimizer)):
        if not isinstance(opt, torch.optim.Optimizer):
            raise TypeError(f"{name} must be a torch.optim.Optimizer, got {type(opt).__name__}")
    if inner_optimizer is outer_optimizer:
        raise ValueError("inner_optimizer and outer_optimizer must be two optimizers (e.g. "
                         "AdamW inside, SGD with Nesterov momentum outside)")


def _check_outer(params: list, outer_optimizer) -> None:
    if not params:
        raise ValueError("model has no trainable parameters")
    held = {id(p) for g in outer_optimizer.param_groups for p in g["params"]}
    missing = sum(id(p) not in held for p in params)
    if missing:
        raise ValueError(f"outer_optimizer must be built over model.parameters(): it lacks "
                         f"{missing} of the model's {len(params)} trainable parameter tensors")
