"""Sparsified buckets (top-k, threshold, random-k) by the block-sparse all-reduce."""
from __future__ import annotations

import torch

from ...collectives.blocksparse import block_sparse_all_reduce
from ..ranks import Ranks
from .base import Bucket, Communicator, Sent, write_back


class BlockSparse(Communicator):
    """Each rank decodes its own payload to a dense, mostly zero bucket (its share of the sum)
    and sums it with `block_sparse_all_reduce`: its three rounds chain on the bucket's
    own gloo group where `Ranks.round_group` gives one, else they run in `exchange`, each waiting
    for the last. The result is the all-gather path's average up to the order of the
    additions; `nbytes` counts this rank's bitmap, the blocks it sent to other owners and its
    shard."""

    def __init__(self, compressor, ranks: Ranks, block_size: int):
        super().__init__(compressor, ranks)
        self.block_size = block_size

    def encode(self, bucket: Bucket) -> Sent:
        comp = self.compressor
        dense = comp.decompress(comp.compress(bucket.buffer, key=bucket.index)).reshape(-1)
        return Sent(bucket, [dense], 0, shares=[dense])

    def exchange(self, sent: Sent) -> torch.futures.Future:
        dense = sent.wire[0]
        own_group = self.ranks.round_group(sent.bucket.index, dense.device)
        if own_group is not None:
            return block_sparse_all_reduce(dense, self.block_size, own_group, async_op=True)
        done = torch.futures.Future()
        done.set_result(block_sparse_all_reduce(dense, self.block_size, self.ranks.group))
        return done

    def decode(self, sent: Sent, received) -> torch.Tensor:
        sent.nbytes = received.bytes_sent
        return write_back(sent.bucket.buffer, received.tensor)
