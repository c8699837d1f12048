"""The model's parameters in fragments (Streaming DiLoCo syncs one at a time), each with its copy
of the global weights of its last sync and a flat buffer per dtype in which its pseudo-gradient
(global weights minus local weights) is compressed, exchanged and averaged."""
from __future__ import annotations

import torch

from ..comm.communicators import Bucket


class Group:
    """The parameters of one fragment that share a dtype and device: one bucket of the exchange.

    `index` is the bucket's index (the compressor's key for error-feedback residuals);
    `backup` holds the global weights of the last sync; `buffer` the flat pseudo-gradient,
    into which the exchange writes the average."""

    def __init__(self, index: int, params: list[torch.nn.Parameter]):
        self.index = index
        self.params = params
        self.backup = [p.detach().clone() for p in params]
        numel = sum(p.numel() for p in params)
        self.buffer = torch.empty(numel, dtype=params[0].dtype, device=params[0].device)

    def views(self) -> list[torch.Tensor]:
        """`buffer` cut into one tensor per parameter, shaped like it."""
        out, start = [], 0
        for p in self.params:
            out.append(self.buffer[start:start + p.numel()].view_as(p))
            start += p.numel()
        return out

    @torch.no_grad()
    def pseudo_gradient(self) -> Bucket:
        """Write global minus local weights into `buffer`; the bucket to average."""
        for view, backup, p in zip(self.views(), self.backup, self.params):
            torch.sub(backup, p, out=view)
        return Bucket(self.buffer, self.index, lambda: [p.shape for p in self.params])


class Fragment:
    """Parameters synced together, in groups by dtype and device."""

    def __init__(self, index: int, params: list[torch.nn.Parameter], first_bucket: int):
        self.index = index
        by_kind: dict[tuple, list] = {}
        for p in params:
            by_kind.setdefault((p.dtype, p.device), []).append(p)
        self.groups = [Group(first_bucket + i, ps) for i, ps in enumerate(by_kind.values())]

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return [p for g in self.groups for p in g.params]

    def describe(self) -> str:
        """Sizes and dtypes, for the ranks to compare."""
        return ", ".join(f"{g.buffer.numel()} x {str(g.buffer.dtype)[6:]}" for g in self.groups)


def bounds(sizes: list[int], count: int) -> list[tuple[int, int]]:
    """[start, end) of each of `count` runs of consecutive tensors of `sizes` (elements), each
    about an equal share of the elements and at least one tensor (a tensor is never cut)."""
    if len(sizes) < count:
        raise ValueError(f"fragments={count} is not allowed: the model has {len(sizes)} "
                         "trainable parameter tensor(s), and a fragment needs at least one")
    total, ends, cuts = 0, [], [0]
    for n in sizes:
        total += n
        ends.append(total)  # elements up to and including this tensor
    for k in range(1, count):
        low, high = cuts[-1] + 1, len(sizes) - (count - k)
        cuts.append(next((c for c in range(low, high + 1) if ends[c - 1] * count >= k * total),
                         high))
    cuts.append(len(sizes))
    return list(zip(cuts, cuts[1:]))


def split(params: list[torch.nn.Parameter], count: int) -> list[Fragment]:
    """`params` in `count` fragments (`bounds`)."""
    fragments, bucket = [], 0
    for i, (a, b) in enumerate(bounds([p.numel() for p in params], count)):
        fragments.append(Fragment(i, params[a:b], bucket))
        bucket += len(fragments[-1].groups)
    return fragments
