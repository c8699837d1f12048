"""A user's vision workload, as `gradcomp ... --model tests/data/user_vision.py:small_cnn` loads
it: a small convolutional classifier on generated images (no download)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import gradcomp


def small_cnn(batch_size: int = 32):
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    coarse = torch.randn(10, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    templates = 2 * F.interpolate(coarse, size=(32, 32), mode="bilinear")  # one per class

    def batches(rank, step):
        gen = torch.Generator().manual_seed(rank * 100_000 + step)
        labels = torch.randint(0, 10, (batch_size,), generator=gen)
        images = templates[labels] + torch.randn(batch_size, 3, 32, 32, generator=gen)
        return images, labels

    test_images, test_labels = batches(rank=99, step=0)

    def evaluate(model):
        model.eval()
        accuracy = (model(test_images).argmax(1) == test_labels).float().mean().item()
        model.train()
        return accuracy

    return gradcomp.Workload(model, batches, F.cross_entropy, evaluate, name="small_cnn",
                             metric="accuracy", target=0.9)
