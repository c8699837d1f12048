"""Built-in learning tasks for the convergence benchmark: data that is generated or ships inside
an installed package (nothing is downloaded), a fixed train/test split, and the student model.

* ``teacher``: a teacher-student problem. Inputs are standard normal in 16 dimensions; the
  label of an input is the arg-max class of a fixed random teacher network (16-16-4, tanh),
  so a student can learn it but needs a few hundred steps to find the teacher's curved class
  boundaries (plain SGD reaches about 87% test accuracy). 8192 training and 2048 test
  examples, generated from `data_seed`. Student: 16-64-64-4 MLP with ReLU (5.5k parameters).
* ``digits``: scikit-learn's bundled 8x8 handwritten digits (1797 images, 10 classes, pixel
  values scaled to [0, 1]), split 80/20 by a fixed permutation. Student: 64-128-128-10 MLP
  (26k parameters). Needs scikit-learn (`pip install scikit-learn`, in the ``dev`` extra).

`DEFAULT_TARGETS` gives each task's default target (test accuracy).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

TASKS = ("teacher", "digits")
DEFAULT_TARGETS = {"teacher": 0.85, "digits": 0.95}


@dataclass(frozen=True)
class Task:
    """Training and test tensors of a classification task, and its student's layer widths."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    hidden: tuple[int, ...]
    classes: int

    def model(self, seed: int) -> nn.Module:
        """The student MLP, initialised from `seed` (the same weights on every rank)."""
        torch.manual_seed(seed)
        layers, fan_in = [], self.x_train.shape[1]
        for width in self.hidden:
            layers += [nn.Linear(fan_in, width), nn.ReLU()]
            fan_in = width
        return nn.Sequential(*layers, nn.Linear(fan_in, self.classes))


def check_task(name: str) -> str:
    if name not in TASKS:
        raise ValueError(f"task={name!r} is not allowed: choose one of "
                         f"{', '.join(map(repr, TASKS))}")
    return name


def load_task(name: str, data_seed: int = 0) -> Task:
    """The task `name` (see the module docstring), its data drawn from `data_seed`."""
    check_task(name)
    return _teacher(data_seed) if name == "teacher" else _digits(data_seed)


def _teacher(data_seed: int, inputs: int = 16, classes: int = 4, train: int = 8192,
             test: int = 2048) -> Task:
    gen = torch.Generator().manual_seed(data_seed)
    w1 = torch.randn(inputs, 16, generator=gen) / inputs ** 0.5
    w2 = torch.randn(16, classes, generator=gen)
    x = torch.randn(train + test, inputs, generator=gen)
    y = (torch.tanh(x @ w1) @ w2).argmax(dim=1)
    return Task("teacher", x[:train], y[:train], x[train:], y[train:], (64, 64), classes)


def _digits(data_seed: int) -> Task:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ValueError("task='digits' needs scikit-learn, which is not installed: "
                         "pip install scikit-learn (or choose task='teacher')") from None
    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(data_seed))
    x, y = x[order], y[order]
    cut = int(0.8 * len(y))
    return Task("digits", x[:cut], y[:cut], x[cut:], y[cut:], (128, 128), 10)
