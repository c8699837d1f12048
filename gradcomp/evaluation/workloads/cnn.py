"""``cnn``: a small ResNet-style network on generated images (nothing downloaded).

Model: a 3x3 convolution stem, then stages of basic residual blocks (two 3x3 convolutions
with batch norm, an identity or 1x1-projection shortcut), global average pooling and a linear
classifier; `widths` (16, 32, 64) and `blocks` 1 per stage give 78k parameters. Data: 3 x
`image` x `image` images (8 x 8 by default) of `classes` classes, each class a fixed random
smooth pattern, an example its class pattern at a random contrast plus Gaussian noise (so the
classes must be told apart by shape, not by brightness). 512 `test` images from `data_seed`;
training batches drawn per (rank, step). Cross-entropy; metric test accuracy, target 90%.
Sized for the quick run's convergence proxy on 2 CPU cores (issue 36): at 16 x 16 with 2048
test images an evaluation cost as much as 30 training steps and the quick run took 18.5
minutes; at 8 x 8 with 512 an evaluation and ten steps cost a sixth of that, and
uncompressed training still needs 20-30 iterations to the target.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .contract import Workload


class BasicBlock(nn.Module):
    def __init__(self, fan_in: int, width: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(fan_in, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.shortcut = nn.Identity() if stride == 1 and fan_in == width else nn.Sequential(
            nn.Conv2d(fan_in, width, 1, stride, bias=False), nn.BatchNorm2d(width))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, widths=(16, 32, 64), blocks: int = 1, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU())
        layers, fan_in = [], widths[0]
        for stage, width in enumerate(widths):
            for b in range(blocks):
                layers.append(BasicBlock(fan_in, width, 2 if stage and not b else 1))
                fan_in = width
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(fan_in, classes)

    def forward(self, x):
        return self.head(self.layers(self.stem(x)).mean(dim=(2, 3)))


def patterns(classes: int, image: int, gen: torch.Generator) -> torch.Tensor:
    """One smooth random pattern per class (random 4x4 noise upsampled), unit variance."""
    coarse = torch.randn(classes, 3, 4, 4, generator=gen)
    smooth = F.interpolate(coarse, size=(image, image), mode="bilinear", align_corners=False)
    return smooth / smooth.std(dim=(1, 2, 3), keepdim=True)


def images(templates: torch.Tensor, count: int, gen: torch.Generator, noise: float):
    y = torch.randint(0, len(templates), (count,), generator=gen)
    contrast = 0.5 + torch.rand(count, 1, 1, 1, generator=gen)
    x = contrast * templates[y] + noise * torch.randn(count, *templates.shape[1:], generator=gen)
    return x, y


def cnn(batch_size: int = 32, seed: int = 0, data_seed: int = 0, image: int = 8,
        classes: int = 10, widths=(16, 32, 64), blocks: int = 1, noise: float = 2.0,
        test: int = 512) -> Workload:
    templates = patterns(classes, image, torch.Generator().manual_seed(data_seed))
    x_test, y_test = images(templates, test, torch.Generator().manual_seed(data_seed + 1), noise)
    torch.manual_seed(seed)
    model = ResNet(widths, blocks, classes)

    def batches(rank: int, step: int):
        gen = torch.Generator().manual_seed(((seed * 1009 + rank) * 1_000_003 + step) + 7)
        return images(templates, batch_size, gen, noise)

    def evaluate(model):
        was_training = model.training
        model.eval()
        logits = model(x_test.to(next(model.parameters()).device)).float().cpu()
        model.train(was_training)
        return {"loss": F.cross_entropy(logits, y_test).item(),
                "accuracy": (logits.argmax(dim=1) == y_test).double().mean().item()}

    return Workload(model, batches, F.cross_entropy, evaluate, name="cnn", metric="accuracy",
                    target=0.9)
