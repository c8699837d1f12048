"""The built-in MLPs of the training benchmark: ``mlp`` (1024 inputs, 4 hidden layers of
1024, 10 classes: 4.2M parameters) and ``tiny`` (32-64-64-10, for tests), with cross-entropy
on a fixed random batch per rank (the same every step: `bench train` times the iteration, not
the data). Weights from seed 0 (the same every call)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .contract import Workload

SIZES = {"mlp": dict(inputs=1024, width=1024, depth=4, classes=10),
         "tiny": dict(inputs=32, width=64, depth=2, classes=10)}


def mlp_workload(size: str, batch_size: int) -> Workload:
    spec = SIZES[size]
    torch.manual_seed(0)
    layers, fan_in = [], spec["inputs"]
    for _ in range(spec["depth"]):
        layers += [nn.Linear(fan_in, spec["width"]), nn.ReLU()]
        fan_in = spec["width"]
    model = nn.Sequential(*layers, nn.Linear(fan_in, spec["classes"]))

    def batches(rank: int, step: int):
        gen = torch.Generator().manual_seed(1000 + rank)
        x = torch.randn(batch_size, spec["inputs"], generator=gen)
        return x, torch.randint(0, spec["classes"], (batch_size,), generator=gen)

    return Workload(model, batches, F.cross_entropy, name=size)


def mlp(batch_size: int = 64) -> Workload:
    return mlp_workload("mlp", batch_size)


def tiny(batch_size: int = 64) -> Workload:
    return mlp_workload("tiny", batch_size)
