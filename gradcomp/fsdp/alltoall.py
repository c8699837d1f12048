"""The compressed reduce-scatter: each rank compresses the chunk of its flat gradient destined
to each owner, one all-to-all moves the wire bytes, and each owner decodes what every rank sent
it and sums it in float32 (float64 for float64 gradients). One compression per hop: the sum is
never re-compressed.

Every chunk has the same number of elements (FSDP pads the flat gradient to a multiple of the
group size), and every method here sends a payload whose size depends only on that number
(block quantizers, casts, top-k and random-k with a fixed k), so the all-to-all moves equal
slices and needs no size exchange.
"""
from __future__ import annotations

from typing import Hashable

import torch
import torch.distributed as dist

from ..comm import wire
from ..comm.telemetry import BucketRecord
from ..compressors import Compressor, Payload
from ..compressors.base import work_dtype

#: Bytes each chunk's slice of the all-to-all is padded to a multiple of.
ALIGN = 8


def encode_chunks(compressor: Compressor, flat: torch.Tensor, parts: int,
                  key: Hashable) -> tuple[list[Payload], torch.Tensor]:
    """Compress each of the `parts` equal chunks of `flat` (chunk j under key (key, j), so error
    feedback keeps one residual per chunk: together, the residual of the whole local gradient);
    the payloads and their wire bytes laid end to end, one equal slice per chunk."""
    if flat.numel() % parts:
        raise ValueError(f"the flat gradient has {flat.numel()} elements, not a multiple of the "
                         f"{parts} ranks it is scattered over")
    payloads = [compressor.compress(chunk, key=(key, j))
                for j, chunk in enumerate(flat.view(parts, -1))]
    slices = [_aligned(wire.pack_bytes(p.tensors)) for p in payloads]
    if len({s.numel() for s in slices}) != 1:
        raise ValueError(f"method {compressor.name!r} sent chunks of different sizes "
                         f"({sorted({s.numel() for s in slices})} bytes): the all-to-all needs "
                         "equal ones")
    return payloads, torch.cat(slices)


def _aligned(buffer: torch.Tensor) -> torch.Tensor:
    """`buffer` padded with zero bytes to a multiple of 8, so that every slice of the
    all-to-all starts aligned for the widest wire dtype (the padding travels too)."""
    pad = -buffer.numel() % ALIGN
    return torch.cat([buffer, buffer.new_zeros(pad)]) if pad else buffer


def exchange(send: torch.Tensor, group) -> torch.Tensor:
    """One all-to-all of equal byte slices: slice j of `send` goes to rank j of `group`; slice r
    of the result came from rank r."""
    received = torch.empty_like(send)
    dist.all_to_all_single(received, send, group=group)
    return received


def decode_sum(compressor: Compressor, received: torch.Tensor, like: Payload,
               parts: int) -> torch.Tensor:
    """The sum, in float32 (float64 for float64), of the `parts` payloads in `received` (each
    laid out like `like`, this rank's payload for its own chunk)."""
    total = None
    for piece in received.view(parts, -1):
        decoded = compressor.decompress(like.with_tensors(wire.unpack_bytes(piece, like.tensors)))
        if total is None:
            total = decoded.to(work_dtype(like.dtype), copy=True).reshape(-1)
        else:
            total += decoded.reshape(-1)
    return total


def reduce_scatter(compressor: Compressor, output: torch.Tensor, flat: torch.Tensor, group,
                   key: Hashable, average: bool = False,
                   record: BucketRecord | None = None) -> int:
    """Write the sum (with `average`: the mean) over `group` of chunk `rank` of every rank's
    `flat` into `output`, compressed by `compressor`; returns the bytes this rank sent to the
    other ranks. `record`: its `encoded` and `exchanged` are marked."""
    parts = dist.get_world_size(group)
    rank = dist.get_rank(group)
    payloads, send = encode_chunks(compressor, flat, parts, key)
    if record is not None:
        record.encoded = record.now()
    received = exchange(send, group)
    if record is not None:
        record.exchanged = record.now()
    total = decode_sum(compressor, received, payloads[rank], parts)
    if average:
        total /= parts
    output.copy_(total.view(output.shape))
    return send.numel() // parts * (parts - 1)
