"""Measure a profile of the user's model on the local device.

Per repeat: forward (including the loss), backward with the time each parameter's gradient is
accumulated (`register_post_accumulate_grad_hook`; on CUDA a timed event recorded in the hook,
so asynchronous kernels are counted where they run), and one SGD step (momentum 0.9) on
clones of the parameters and gradients, so the model's weights are not changed (clones and
optimizer persist across repeats, so the timed steps update momentum buffers). Warm-up
iterations first; the device is synchronised around every timed phase; each time is the
median over the repeats. Gradients are listed in the order they become ready (median ready
time); parameters that receive no gradient are left out. The model's ``.grad`` are cleared.

`measure_ddp_profile` measures the same iteration as DistributedDataParallel runs it, with a
comm hook that communicates nothing (each bucket's future holds its own buffer), on every
rank of a process group at once: DDP copies each gradient into its bucket during backward and
the buckets back into the gradients after the last one is averaged. Backward then ends when
the last bucket is handed to the hook, and the time from there to the end of
``loss.backward()`` is the profile's `finalize_s`.
"""
from __future__ import annotations

import statistics
import torch

from ..common.timing import Clock
from ..workloads.contract import Workload
from ..workloads.contract import autocast as autocast_context
from ..workloads.load import call_factory, check_workload, load_factory, load_workload, takes
from .profiles import Profile


def _default_loss(output) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output.float().mean()
    values = output.values() if isinstance(output, dict) else output
    tensors = [v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()]
    if not tensors:
        raise ValueError("loss_fn=None needs a model output with a floating-point tensor; "
                         "pass loss_fn")
    return sum(t.float().mean() for t in tensors)


def _call(model, inputs):
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def measure_profile(model: torch.nn.Module, example_inputs, loss_fn=None, repeats: int = 10,
                    warmup: int = 3, name: str | None = None,
                    autocast: str = "none") -> Profile:
    """A `Profile` of `model` on `example_inputs` (a tensor, a tuple of positional arguments
    or a dict of keyword arguments) with `loss_fn(output) -> scalar` (default: the mean of
    the output, summed over floating-point outputs), median of `repeats` after `warmup`;
    forward and loss under `autocast` ("none" or "bf16")."""
    return _measure(model, example_inputs, loss_fn, repeats, warmup, name, None, autocast)


def _measure(model, example_inputs, loss_fn, repeats: int, warmup: int, name: str | None,
             last_hook_call: list | None, autocast: str) -> Profile:
    """`measure_profile`; `last_hook_call` (a list a DDP comm hook appends its last bucket's
    mark to) splits backward into backward and `finalize_s`."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} is not allowed: it must be an integer >= 1")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup={warmup!r} is not allowed: it must be an integer >= 0")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no parameters that require gradients")
    loss_fn = loss_fn or _default_loss
    clock = Clock(params[0].device)
    marks: dict[int, object] = {}
    handles = [p.register_post_accumulate_grad_hook(
        lambda p, i=i: marks.__setitem__(i, clock.mark())) for i, p in enumerate(params)]
    times = {"forward": [], "backward": [], "optimizer": [], "finalize": []}
    ready: dict[int, list[float]] = {}
    optimizer = None
    try:
        for step in range(warmup + repeats):
            for p in params:
                p.grad = None
            marks.clear()
            if last_hook_call is not None:
                last_hook_call.clear()
            clock.sync()
            t0 = clock.mark()
            with autocast_context(clock.device, autocast):
                loss = loss_fn(_call(model, example_inputs))
            t1 = clock.mark()
            loss.backward()
            t2 = clock.mark()
            if optimizer is None:  # one optimizer over clones, so momentum is steady state
                shadow = [p.detach().clone() for p in params if p.grad is not None]
                optimizer = torch.optim.SGD(shadow, lr=0.01, momentum=0.9)
            for s, p in zip(shadow, [p for p in params if p.grad is not None]):
                s.grad = p.grad.detach().clone()
            clock.sync()
            t3 = clock.mark()
            optimizer.step()
            t4 = clock.mark()
            clock.sync()
            if step < warmup:
                continue
            times["forward"].append(clock.seconds(t0, t1))
            handed = last_hook_call[-1] if last_hook_call else t2
            times["backward"].append(clock.seconds(t1, handed))
            times["finalize"].append(clock.seconds(handed, t2))
            times["optimizer"].append(clock.seconds(t3, t4))
            for i, mark in marks.items():
                ready.setdefault(i, []).append(clock.seconds(t1, mark))
    finally:
        for h in handles:
            h.remove()
        for p in params:
            p.grad = None
    order = sorted(ready, key=lambda i: (statistics.median(ready[i]), -i))
    backward = statistics.median(times["backward"])
    ready_s = [min(statistics.median(ready[i]), backward) for i in order]
    device = clock.device
    where = torch.cuda.get_device_name(device) if clock.cuda else device.type
    return Profile(name or type(model).__name__, [params[i].numel() for i in order],
                   ready_s, statistics.median(times["forward"]), backward,
                   statistics.median(times["optimizer"]), params[order[0]].element_size(),
                   [tuple(params[i].shape) for i in order], None,
                   f"measured by gradcomp.evaluation.measure_profile on {where}, torch "
                   f"{torch.__version__}",
                   f"median of {repeats} repeats after {warmup} warm-up; forward includes the "
                   f"loss; optimizer: SGD(momentum=0.9) step on clones; "
                   f"{len(params) - len(order)} parameters without gradient left out"
                   + ("" if last_hook_call is None else
                      "; under DistributedDataParallel with a comm hook that communicates "
                      "nothing: backward ends when the last bucket reaches the hook, "
                      "finalize_s is DDP's work after it"),
                   where, finalize_s=statistics.median(times["finalize"]))


def measure_ddp_profile(model: torch.nn.Module, example_inputs, loss_fn=None,
                        bucket_cap_mb: float = 25.0, repeats: int = 10, warmup: int = 3,
                        name: str | None = None, autocast: str = "none") -> Profile:
    """`measure_profile` of `model` wrapped in DistributedDataParallel (`bucket_cap_mb`) with
    a comm hook that communicates nothing (see the module docstring). Call it on every rank of
    the default process group at once."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if not dist.is_initialized():
        raise RuntimeError("measure_ddp_profile needs an initialized process group "
                           "(torch.distributed.init_process_group) on every rank")
    device = next(model.parameters()).device
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                  else None, bucket_cap_mb=bucket_cap_mb)
    clock = Clock(device)
    calls: list = []
    ddp.register_comm_hook(_HookMarks(clock, calls), _hand_back)
    return _measure(ddp, example_inputs, loss_fn, repeats, warmup,
                    name or type(model).__name__, calls, autocast)


class _HookMarks:
    """The no-op hook's state: marks the moment each last bucket reaches the hook."""

    def __init__(self, clock: Clock, calls: list):
        self.clock, self.calls = clock, calls


def _hand_back(state, bucket):  # no annotations: DDP checks them at runtime, these are strings
    """A comm hook that communicates nothing: the bucket's future holds its own buffer."""
    if bucket.is_last():
        state.calls.append(state.clock.mark())
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut



def parse_shape(text: str, option: str = "input_shape") -> list[int]:
    """"32,3,224,224" as [32, 3, 224, 224]; positive integers only."""
    try:
        shape = [int(d) for d in str(text).split(",")]
    except ValueError:
        shape = []
    if not shape or any(d < 1 for d in shape):
        raise ValueError(f"{option}={text!r} is not allowed: give comma-separated positive "
                         "integers, e.g. 32,3,224,224")
    return shape


def profile_of(workload: Workload, device="cpu", repeats: int = 10, warmup: int = 3,
               name: str | None = None, autocast: str = "none") -> Profile:
    """`measure_profile` of `workload`'s model on `device`, on rank 0's batch of step 0, with
    its loss."""
    model = workload.model.to(device)
    inputs, targets = workload.batch(0, 0, device)
    return measure_profile(model, (inputs,), lambda out: workload.loss(out, targets), repeats,
                           warmup, name=name or workload.name, autocast=autocast)


def profile_workload(spec: str, device="cpu", repeats: int = 10, warmup: int = 3,
                     name: str | None = None, batch_size: int | None = None,
                     autocast: str = "none") -> Profile:
    """`profile_of` the workload `spec` names (`workloads.load.load_workload`, option
    "model")."""
    from ...checks import check_device

    return profile_of(load_workload(spec, "model", batch_size=batch_size),
                      check_device(device), repeats, warmup,
                      name or spec.rpartition(":")[2], autocast)


def profile_factory(factory: str, input_shape=None, device="cpu", repeats: int = 10,
                    name: str | None = None, batch_size: int | None = None) -> Profile:
    """The profile of what `factory` (a built-in, MODULE:FACTORY or path/to/file.py:FACTORY)
    builds, on `device`: a `Workload` with its own batches and loss (`profile_of`), or an
    ``nn.Module`` on a Gaussian input of `input_shape` (a list or "32,3,224,224") with the
    mean of its output as the loss."""
    from ...checks import check_device

    device = check_device(device)
    build = load_factory(factory, returns="a gradcomp.Workload (or, with input_shape, an "
                         "nn.Module)")
    if batch_size is not None and not takes(build, "batch_size"):
        raise ValueError(f"batch_size={batch_size!r} is not allowed with factory={factory!r}: "
                         "it takes no batch_size argument (its batches, or input_shape, set "
                         "the batch size)")
    built = call_factory(build, {"batch_size": batch_size})
    label = name or factory.rpartition(":")[2]
    if isinstance(built, Workload):
        if input_shape is not None:
            raise ValueError(f"input_shape={input_shape!r} is not allowed: factory={factory!r} "
                             "returns a Workload, whose batches give the inputs")
        return profile_of(check_workload(built, factory, "factory"), device, repeats,
                          name=label)
    if not isinstance(built, torch.nn.Module):
        raise ValueError(f"factory={factory!r} is not allowed: it returned a "
                         f"{type(built).__name__}, not a gradcomp.Workload or an nn.Module")
    if input_shape is None:
        raise ValueError(f"input_shape=None is not allowed: factory={factory!r} returns an "
                         "nn.Module, not a gradcomp.Workload; give the input shape, e.g. "
                         "32,3,224,224 (or return a Workload, whose batches give the inputs)")
    shape = parse_shape(input_shape) if isinstance(input_shape, str) else list(input_shape)
    model = built
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"factory={factory!r} is not allowed: its model has no parameters "
                         "that require gradients, so there is nothing to communicate")
    model = model.to(device)
    inputs = torch.randn(shape, device=device)
    try:
        with torch.no_grad():
            _call(model, inputs)
    except (RuntimeError, ValueError, TypeError, IndexError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"input_shape={','.join(map(str, shape))} is not allowed: the "
                         f"model's forward fails on it ({first})") from None
    return measure_profile(model, inputs, repeats=repeats, name=label)
