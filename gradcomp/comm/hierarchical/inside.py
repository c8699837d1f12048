"""The node tier: a bucket reduce-scatters into G shards inside its node (each rank keeps the
average of its shard over the node), and the shards averaged across nodes all-gather back.

A bucket of n elements is split into G shards of s = ceil(n / G) elements (the last padded
with zeros). Uncompressed, both steps run in the bucket's dtype: on NCCL a reduce-scatter
that averages; elsewhere an all-to-all of the chunks (the same bytes; gloo's reduce-scatter
gives no future to chain on), summed by the shard's owner in rank order and divided by G.
With `intra="bf16"` a float32 or float64 bucket travels in bfloat16 both ways: the all-to-all
of bfloat16 chunks, summed in the bucket's dtype (a bfloat16 reduce-scatter would add in
bfloat16), and an all-gather of the averaged shard in bfloat16, which every rank, its owner
included, reads back, so that all hold the same values.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from ..ranks import Ranks


class Inside:
    """Reduce-scatter and all-gather inside a node of `gpus_per_node` ranks, this rank being
    local rank `local`, in the bucket's dtype or bfloat16 (`intra`); buffers kept per bucket."""

    def __init__(self, gpus_per_node: int, local: int, intra: str):
        self.gpus_per_node = gpus_per_node
        self.local = local
        self.intra = intra
        self._buffers: dict[tuple[int, str], torch.Tensor] = {}

    def shard_numel(self, numel: int) -> int:
        return -(-numel // self.gpus_per_node)

    def wire_dtype(self, dtype: torch.dtype) -> torch.dtype:
        """What travels inside the node: bfloat16 where `intra` asks and it is smaller."""
        return torch.bfloat16 if self.intra == "bf16" and dtype.itemsize > 2 else dtype

    def sent_bytes(self, numel: int, dtype: torch.dtype) -> int:
        """Bytes this rank sends inside its node for a bucket: G - 1 shards each way."""
        g = self.gpus_per_node
        return 2 * (g - 1) * self.shard_numel(numel) * self.wire_dtype(dtype).itemsize

    def shard_range(self, numel: int) -> tuple[int, int]:
        """[start, stop) of this rank's shard in the padded bucket."""
        s = self.shard_numel(numel)
        return self.local * s, (self.local + 1) * s

    def scatter(self, buf: torch.Tensor, index: int, ranks: Ranks):
        """(shard, future): this rank's shard of the node's average of `buf`, written into
        `shard` by the time the future completes."""
        g, flat = self.gpus_per_node, buf.view(-1)
        if g == 1:
            return flat, _done(flat)
        s = self.shard_numel(flat.numel())
        wire = self.wire_dtype(buf.dtype)
        shard = self._buffer(index, "shard", s, buf.dtype, buf.device)
        send = self._padded(flat, index, wire)
        if wire == buf.dtype and ranks.backend == "nccl":
            work = dist.reduce_scatter_tensor(shard, send, op=dist.ReduceOp.AVG,
                                              group=ranks.group, async_op=True)
            return shard, work.get_future().then(lambda f: (f.value(), shard)[1])
        received = self._buffer(index, "received", s * g, wire, buf.device)
        work = dist.all_to_all_single(received, send, group=ranks.group, async_op=True)

        def add_up(fut):
            fut.value()  # raises if the all-to-all failed
            chunks = received.view(g, s)
            shard.copy_(chunks[0])
            for chunk in chunks[1:]:
                shard.add_(chunk)
            return shard.div_(g)

        return shard, work.get_future().then(add_up)

    def gather(self, shard: torch.Tensor, buf: torch.Tensor, index: int, ranks: Ranks):
        """A future of `buf` holding every shard of the node (this one: `shard`)."""
        g, flat = self.gpus_per_node, buf.view(-1)
        if g == 1:
            return _done(buf)
        n, s = flat.numel(), shard.numel()
        wire = self.wire_dtype(buf.dtype)
        direct = wire == buf.dtype and n == s * g
        out = flat if direct else self._buffer(index, "padded", s * g, wire, buf.device)
        send = shard
        if wire != shard.dtype:
            send = self._buffer(index, "received", s * g, wire, buf.device)[:s]
            send.copy_(shard)
        work = dist.all_gather_into_tensor(out, send, group=ranks.group, async_op=True)

        def copy_back(fut):
            fut.value()  # raises if the all-gather failed
            if not direct:
                flat.copy_(out[:n])
            return buf

        return work.get_future().then(copy_back)

    def _padded(self, flat: torch.Tensor, index: int, wire: torch.dtype) -> torch.Tensor:
        """`flat` in `wire` dtype, zero-padded to G shards (itself where it already is)."""
        s = self.shard_numel(flat.numel())
        if wire == flat.dtype and flat.numel() == s * self.gpus_per_node:
            return flat
        padded = self._buffer(index, "padded", s * self.gpus_per_node, wire, flat.device)
        padded[:flat.numel()].copy_(flat)
        padded[flat.numel():].zero_()
        return padded

    def _buffer(self, index: int, name: str, numel: int, dtype, device) -> torch.Tensor:
        """A buffer kept for bucket `index` (reused while its size, dtype and device hold)."""
        buf = self._buffers.get((index, name))
        if buf is None or buf.numel() != numel or buf.dtype != dtype or buf.device != device:
            buf = self._buffers[index, name] = torch.empty(numel, dtype=dtype, device=device)
        return buf


def shard_shapes(shapes: list[torch.Size], start: int, stop: int) -> list[torch.Size]:
    """The pieces of the tensors of `shapes` (laid end to end) that fall in [start, stop), as
    shapes: the whole rows of a matrix keep its row shape (so that PowerSGD compresses them as
    a matrix), partial rows and 1-D pieces are vectors; padding past the tensors' end is one
    more vector."""
    pieces, offset = [], 0
    for shape in shapes:
        numel = math.prod(shape)
        lo, hi = max(start, offset) - offset, min(stop, offset + numel) - offset
        if lo < hi:
            pieces += _piece(torch.Size(shape), lo, hi)
        offset += numel
    covered = sum(math.prod(p) for p in pieces)
    if covered < stop - start:
        pieces.append(torch.Size([stop - start - covered]))
    return pieces


def _piece(shape: torch.Size, lo: int, hi: int) -> list[torch.Size]:
    if len(shape) < 2:
        return [torch.Size([hi - lo])]
    row = math.prod(shape[1:])
    first, last = -(-lo // row) * row, hi // row * row
    if first >= last:
        return [torch.Size([hi - lo])]
    head = [torch.Size([first - lo])] if first > lo else []
    tail = [torch.Size([hi - last])] if hi > last else []
    return head + [torch.Size([(last - first) // row, *shape[1:]])] + tail


def _done(value) -> torch.futures.Future:
    fut = torch.futures.Future()
    fut.set_result(value)
    return fut
