"""The workload contract every measurement takes (`gradcomp.Workload`).

A factory of no arguments returns ``Workload(model, batches, loss, evaluate=None)``:

* ``batches(rank, step)``: the inputs and targets of one step on one rank, any structure
  (tensors, token ids, dicts, tuples); the inputs are passed as ``model(inputs)``;
* ``loss(outputs, targets)``: the scalar training loss;
* ``evaluate(model)`` (optional): a metric of the model for convergence, a number (the value
  of ``metric``) or a dict holding ``"accuracy"`` and/or ``"loss"``; called on rank 0 with the
  bare model (not the DDP wrapper), under ``torch.no_grad``.

Optional fields: ``name`` (shown in tables), ``metric`` ("accuracy": higher is better, or
"loss": lower is better; what a bare number from ``evaluate`` is), ``target`` (the default
convergence target of ``metric``), ``lr`` (the default SGD learning rate of the convergence
benchmark). Tensors may live on the CPU: the benchmarks move the model and each batch to their
device. A factory may also take keyword arguments ``batch_size`` and ``seed``: the commands
pass ``--batch-size`` and the run's seed to a factory that names them.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn as nn

from ...checks import check_choice

METRICS = ("accuracy", "loss")
AUTOCAST = ("none", "bf16")


@dataclass
class Workload:
    """A model and how to train it (module docstring)."""

    model: nn.Module
    batches: Callable[[int, int], tuple[Any, Any]]
    loss: Callable[[Any, Any], torch.Tensor]
    evaluate: Callable[[nn.Module], Any] | None = None
    name: str | None = None
    metric: str = "accuracy"
    target: float | None = None
    lr: float | None = None

    def batch(self, rank: int, step: int, device) -> tuple[Any, Any]:
        """`batches(rank, step)` moved to `device`."""
        inputs, targets = self.batches(rank, step)
        return to_device(inputs, device), to_device(targets, device)

    def scores(self, model) -> dict[str, float]:
        """What `evaluate(model)` gives, as {"accuracy": ..., "loss": ...} holding the metrics
        it gave (a bare number is `metric`); empty without `evaluate`."""
        if self.evaluate is None:
            return {}
        with torch.no_grad():
            value = self.evaluate(model)
        if not isinstance(value, dict):
            return {self.metric: float(value)}
        if not value or set(value) - set(METRICS):
            raise ValueError(f"evaluate returned keys {sorted(value)}: a workload's evaluate "
                             "returns a number or a dict of 'accuracy' and/or 'loss'")
        return {m: float(v) for m, v in value.items()}


def to_device(obj, device):
    """`obj` (a tensor, or dicts, lists and tuples of them) with every tensor on `device`."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def batch_size_of(inputs) -> int | None:
    """The leading dimension of the first tensor in `inputs` (None when it holds none)."""
    if isinstance(inputs, torch.Tensor):
        return int(inputs.shape[0]) if inputs.dim() else None
    values = inputs.values() if isinstance(inputs, dict) else \
        inputs if isinstance(inputs, (list, tuple)) else ()
    for value in values:
        size = batch_size_of(value)
        if size is not None:
            return size
    return None


def autocast(device, mode: str):
    """The context of a forward and loss under `mode`: "bf16" autocast on `device` (the
    parameters stay float32; the activations, and so the gradients' values, are those of
    mixed precision), or "none"."""
    if check_choice(mode, "autocast", AUTOCAST) == "none":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
