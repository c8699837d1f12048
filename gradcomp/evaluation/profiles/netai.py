"""Convert the measured V100 logs of NetAI 2020 into profiles.

Source: Zhang, Chang, Lin, Wang, Arora, Jin, "Is Network the Bottleneck of Distributed
Training?" (NetAI 2020), repository folder ``simulation/``, Apache-2.0. A ``<model>.bk.log``
holds a comment line, the number of batches (1), the number of parameter tensors L, then L
lines ``wait_us,size_bytes`` in the order gradients become ready (``wait_us``: backward time
since the previous gradient was ready). ``cuda_vec_add.log`` holds ``bytes,seconds`` of one
element-wise fp32 vector add. The single-GPU iteration times are the paper's (`T_ITER`).
Forward + optimizer = t_iter - backward; the optimizer part is the memory-bound SGD estimate
of `profiles` and the forward time the rest (only their sum matters to the model).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .architectures import Shape
from .profiles import ASSUMED_MEMORY_BPS, NETAI_DEVICE, SGD_BYTES_PER_PARAM, Profile

#: measured single-GPU iteration time (forward + backward + update), seconds, NetAI 2020
T_ITER = {"resnet50": 0.12808580219559176, "resnet101": 0.19200599479476405,
          "vgg16": 0.19452352295080985}
SOURCE = ("NetAI 2020: Zhang, Chang, Lin, Wang, Arora, Jin, 'Is Network the Bottleneck of "
          "Distributed Training?', repository folder simulation/ ({files}); licence "
          "Apache-2.0. One NVIDIA V100, PyTorch, torchvision model, batch 32, 224x224.")


def read_backward_log(path) -> list[tuple[float, int]]:
    """(wait seconds, size bytes) per gradient, in ready order, of the first batch."""
    lines = Path(path).read_text().splitlines()
    count = int(lines[2])
    rows = [line.split(",") for line in lines[3 : 3 + count]]
    if len(rows) != count:
        raise ValueError(f"{path}: expected {count} gradient lines, found {len(rows)}")
    return [(float(wait) / 1e6, int(size)) for wait, size in rows]


def read_vec_add(path) -> list[tuple[float, float]]:
    """(bytes, seconds) points of the vec-add log."""
    rows = [line.split(",") for line in Path(path).read_text().split() if line]
    return [(float(b), float(s)) for b, s in rows]


def netai_profile(name: str, log_path, vec_add_path, shapes: list[Shape] | None = None,
                  dtype_bytes: int = 4) -> Profile:
    """The profile of `name` (a key of `T_ITER`) from its backward log and the vec-add log;
    `shapes` (in ready order) are checked against the logged sizes."""
    events = read_backward_log(log_path)
    sizes = [size // dtype_bytes for _, size in events]
    if any(size % dtype_bytes for _, size in events):
        raise ValueError(f"{log_path}: sizes are not multiples of {dtype_bytes} bytes")
    if shapes is not None and [math.prod(s) for s in shapes] != sizes:
        raise ValueError(f"{log_path}: the given shapes do not match the logged sizes")
    ready = np.cumsum([wait for wait, _ in events])
    backward = float(ready[-1])
    optimizer = SGD_BYTES_PER_PARAM * sum(sizes) / ASSUMED_MEMORY_BPS
    forward = T_ITER[name] - backward - optimizer
    files = f"{Path(log_path).name}, {Path(vec_add_path).name}"
    assumptions = (f"measured backward; t_iter {T_ITER[name]:.6f} s measured; optimizer "
                   f"assumed memory-bound SGD ({SGD_BYTES_PER_PARAM} B/parameter at "
                   f"{ASSUMED_MEMORY_BPS / 1e9:g} GB/s), forward = t_iter - backward - "
                   f"optimizer; shapes from the torchvision architecture")
    return Profile(name, sizes, ready.tolist(), forward, backward, optimizer, dtype_bytes,
                   shapes, read_vec_add(vec_add_path), SOURCE.format(files=files), assumptions,
                   NETAI_DEVICE)
