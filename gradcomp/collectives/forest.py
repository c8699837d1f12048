"""Forest all-reduce: run a packed forest's schedule (`forest_packing.Forest.schedule`) with
point-to-point sends and receives (gloo or NCCL).

Every worker runs the same steps in the same order. A reduce step of a chunk receives the
chunk from each child, adds it in, and sends the partial sum to the parent; a broadcast step
receives the finished chunk from the parent and sends it to each child. Sends are
non-blocking, so chunk r + 1 climbs a tree while chunk r descends it, and the trees run side
by side. Deadlock-free: a worker only waits on a receive whose sender reaches it after steps
that come earlier in the common order (or are lower in the same tree), and every pair of
workers exchanges messages in that order (NCCL matches them by order, gloo by tag).

The result is the sum, like ``dist.all_reduce(tensor)``; only the order of the additions
differs (tree order instead of ring order), so floating-point results agree to rounding.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .forest_packing import Forest


CHUNK_BYTES = 1 << 20
MAX_CHUNKS = 8


def forest_all_reduce(tensor: torch.Tensor, forest: Forest, chunks: int | None = None,
                      group=None) -> torch.Tensor:
    """Sum `tensor` (contiguous) over the ranks of `group` in place along `forest` (the same
    on every rank, one worker per rank), each tree's partition in `chunks` pipelined chunks
    (default: one per `CHUNK_BYTES` of the tensor, 1 to `MAX_CHUNKS`); returns `tensor`."""
    p = dist.get_world_size(group)
    if forest.workers != p:
        raise ValueError(f"forest has {forest.workers} workers, not allowed on a group of "
                         f"{p} ranks: pack it from a {p} x {p} bandwidth matrix")
    if not tensor.is_contiguous():
        raise ValueError("tensor is not allowed: it must be contiguous")
    if chunks is None:
        chunks = min(MAX_CHUNKS, max(1, tensor.numel() * tensor.element_size() // CHUNK_BYTES))
    steps = forest.schedule(tensor.numel(), chunks)
    if p == 1:
        return tensor
    rank = dist.get_rank(group)
    peer = [r if group is None else dist.get_global_rank(group, r) for r in range(p)]
    flat = tensor.view(-1)
    sent_up, sent = {}, []
    for tag, step in enumerate(steps):
        chunk = flat[step.start:step.stop]
        parent = forest.parents[step.tree][rank]
        children = forest.children[step.tree][rank]
        if step.phase == "reduce":
            parts = [torch.empty_like(chunk) for _ in children]
            works = [dist.irecv(part, peer[c], group=group, tag=tag)
                     for part, c in zip(parts, children)]
            for work, part in zip(works, parts):
                work.wait()
                chunk.add_(part)
            if parent >= 0:
                sent_up[step.tree, step.start] = dist.isend(chunk, peer[parent], group=group,
                                                            tag=tag)
        else:
            if parent >= 0:
                sent_up.pop((step.tree, step.start)).wait()  # the chunk is about to change
                dist.irecv(chunk, peer[parent], group=group, tag=tag).wait()
            sent += [dist.isend(chunk, peer[c], group=group, tag=tag) for c in children]
    for work in sent:
        work.wait()
    return tensor
