"""Moving payloads: one byte buffer per all-gather, one all-reduce per wire dtype.

Everything here is asynchronous: each function returns a `torch.futures.Future` and never
waits. On gloo an all-gather future holds a flat list of tensors and on NCCL a list holding one
list; the functions below read their own output buffers, so either shape works.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def byte_order(tensors) -> list[int]:
    """Wire tensors in order of decreasing element size, so that every tensor starts at an
    offset aligned to its own element size inside one byte buffer (sizes are powers of two)."""
    return sorted(range(len(tensors)), key=lambda i: -tensors[i].element_size())


def pack_bytes(tensors) -> torch.Tensor:
    """Concatenate wire tensors into one uint8 buffer (no copy for a single tensor)."""
    parts = [tensors[i].contiguous().reshape(-1).view(torch.uint8) for i in byte_order(tensors)]
    if len(parts) == 1:
        return parts[0]
    return torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8)


def unpack_bytes(buffer: torch.Tensor, like) -> list[torch.Tensor]:
    """Split a buffer made by `pack_bytes` from tensors shaped like `like` (this rank's),
    refusing one shorter than they declare."""
    declared = sum(t.numel() * t.element_size() for t in like)
    if buffer.numel() < declared:  # (more: padding, as FSDP's all-to-all pieces carry)
        raise RuntimeError(f"a received gradient payload holds {buffer.numel()} bytes where "
                           f"{declared} were declared: the ranks are not exchanging the same "
                           "bucket (did every rank call the same collectives?)")
    out = []
    for t, offset in zip(like, offsets(like)):
        nbytes = t.numel() * t.element_size()
        out.append(buffer[offset : offset + nbytes].view(t.dtype).view(t.shape))
    return out


def offsets(tensors) -> list[int]:
    """The byte offset of each of `tensors` inside the buffer `pack_bytes` makes of them."""
    out = [0] * len(tensors)
    offset = 0
    for i in byte_order(tensors):
        out[i] = offset
        offset += tensors[i].numel() * tensors[i].element_size()
    return out


def all_reduce_sum(tensors, group) -> torch.futures.Future:
    """Sum each tensor across ranks in place; tensors of one dtype travel as one buffer.
    The future's value is the list of reduced tensors."""
    if not tensors:
        fut = torch.futures.Future()
        fut.set_result([])
        return fut
    if len(tensors) == 1:
        work = dist.all_reduce(tensors[0], group=group, async_op=True)
        return work.get_future().then(lambda f: _checked(f, list(tensors)))
    flat = torch.cat([t.reshape(-1) for t in tensors]) if _same_dtype(tensors) else None
    if flat is None:
        futs = [dist.all_reduce(t, group=group, async_op=True).get_future() for t in tensors]
        def check_all(done):
            for fut in done.value():
                fut.value()  # raises if that collective failed
            return list(tensors)

        return torch.futures.collect_all(futs).then(check_all)

    def scatter_back(fut):
        fut.value()  # raises if the collective failed
        offset = 0
        for t in tensors:
            t.view(-1).copy_(flat[offset : offset + t.numel()])
            offset += t.numel()
        return list(tensors)

    return dist.all_reduce(flat, group=group, async_op=True).get_future().then(scatter_back)


def _same_dtype(tensors) -> bool:
    return len({t.dtype for t in tensors}) == 1


def all_gather_bytes(send: torch.Tensor, recv: list[torch.Tensor], group) -> torch.futures.Future:
    """Gather one uint8 buffer from every rank into `recv` (preallocated, one per rank)."""
    work = dist.all_gather(recv, send, group=group, async_op=True)
    return work.get_future().then(lambda f: _checked(f, recv))


def _checked(fut: torch.futures.Future, result):
    """`result`, once `fut` has completed; re-raises the collective's error (a dead peer)."""
    fut.value()
    return result
