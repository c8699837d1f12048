"""Model factories that `gradcomp profile MODULE:FACTORY` imports in the CLI tests."""
import torch.nn as nn


def small_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
