"""The built-in learning tasks of the convergence benchmark, as workloads: data that is
generated or ships inside an installed package (nothing is downloaded), a fixed train/test
split, a student MLP, minibatches drawn per rank, and test accuracy as the metric.

* ``teacher``: a teacher-student problem. Inputs are standard normal in 16 dimensions; the
  label of an input is the arg-max class of a fixed random teacher network (16-16-4, tanh),
  so a student can learn it but needs a few hundred steps to find the teacher's curved class
  boundaries (plain SGD reaches about 87% test accuracy). 8192 training and 2048 test
  examples, generated from `data_seed`. Student: 16-64-64-4 MLP with ReLU (5.5k parameters).
  Target: 85% test accuracy.
* ``digits``: scikit-learn's bundled 8x8 handwritten digits (1797 images, 10 classes, pixel
  values scaled to [0, 1]), split 80/20 by a fixed permutation. Student: 64-128-128-10 MLP
  (26k parameters). Needs scikit-learn (`pip install scikit-learn`, in the ``dev`` extra).
  Target: 95%.

The student's weights come from `seed`; rank r draws its minibatches of `batch_size` from the
training set with a generator seeded ``seed * 1000 + r + 1``, in step order.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .contract import Workload


class Minibatches:
    """`batches(rank, step)` drawing `batch_size` training examples per step from one
    generator per rank, in step order (a step asked out of order replays the draws)."""

    def __init__(self, x, y, batch_size: int, seed: int):
        self.x, self.y, self.batch_size, self.seed = x, y, batch_size, seed
        self.streams: dict[int, tuple[torch.Generator, int]] = {}

    def __call__(self, rank: int, step: int):
        gen, next_step = self.streams.get(rank, (None, None))
        if gen is None or step < next_step:
            gen, next_step = torch.Generator().manual_seed(self.seed * 1000 + rank + 1), 0
        for _ in range(next_step, step):
            torch.randint(0, len(self.y), (self.batch_size,), generator=gen)
        idx = torch.randint(0, len(self.y), (self.batch_size,), generator=gen)
        self.streams[rank] = (gen, step + 1)
        return self.x[idx], self.y[idx]


def classification(name: str, x_train, y_train, x_test, y_test, hidden, classes: int,
                   target: float, batch_size: int, seed: int) -> Workload:
    """A student MLP of `hidden` widths on a classification task, test accuracy as metric."""
    torch.manual_seed(seed)
    layers, fan_in = [], x_train.shape[1]
    for width in hidden:
        layers += [nn.Linear(fan_in, width), nn.ReLU()]
        fan_in = width
    model = nn.Sequential(*layers, nn.Linear(fan_in, classes))

    def evaluate(model):
        logits = model(x_test.to(next(model.parameters()).device)).cpu()
        return {"loss": F.cross_entropy(logits, y_test).item(),
                "accuracy": (logits.argmax(dim=1) == y_test).double().mean().item()}

    return Workload(model, Minibatches(x_train, y_train, batch_size, seed), F.cross_entropy,
                    evaluate, name=name, metric="accuracy", target=target)


def teacher(batch_size: int = 64, seed: int = 0, data_seed: int = 0, inputs: int = 16,
            classes: int = 4, train: int = 8192, test: int = 2048) -> Workload:
    gen = torch.Generator().manual_seed(data_seed)
    w1 = torch.randn(inputs, 16, generator=gen) / inputs ** 0.5
    w2 = torch.randn(16, classes, generator=gen)
    x = torch.randn(train + test, inputs, generator=gen)
    y = (torch.tanh(x @ w1) @ w2).argmax(dim=1)
    return classification("teacher", x[:train], y[:train], x[train:], y[train:], (64, 64),
                          classes, 0.85, batch_size, seed)


def digits(batch_size: int = 64, seed: int = 0, data_seed: int = 0) -> Workload:
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
    return classification("digits", x[:cut], y[:cut], x[cut:], y[cut:], (128, 128), 10, 0.95,
                          batch_size, seed)
