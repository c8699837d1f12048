"""Communicators: how a bucket's payload travels (one class each, one interface in `base`);
`build` picks the one a method needs."""
from ...checks import check_choice
from ...compressors import Compressor, TwoRoundCompressor
from ...collectives.blocksparse import DEFAULT_BLOCK_SIZE
from ..ranks import Ranks
from .allgather import AllGather
from .allreduce import AllReduce
from .base import Bucket, Communicator, Sent
from .blocksparse import BlockSparse
from .dense import DenseAllReduce
from .rounds import TwoRounds

#: The `communicator` option of the hooks: "default" (as the method declares) or "blocksparse".
COMMUNICATORS = ("default", "blocksparse")
#: Methods whose decoded payload is mostly zero, so the block-sparse all-reduce can carry it.
BLOCK_SPARSE_METHODS = ("topk", "threshold", "randomk")


def build(compressor: Compressor, ranks: Ranks, communicator: str = "default",
          block_size: int = DEFAULT_BLOCK_SIZE) -> Communicator:
    """The communicator for `compressor`: two rounds for a `TwoRoundCompressor`, the
    block-sparse all-reduce when asked for (sparsifying methods only), else all-reduce or
    all-gather as the method's `aggregation` says."""
    check_choice(communicator, "communicator", COMMUNICATORS)
    if communicator == "blocksparse":
        if compressor.name not in BLOCK_SPARSE_METHODS:
            raise ValueError(f"communicator='blocksparse' is not allowed for method "
                             f"{compressor.name!r}: it carries the mostly zero gradients of "
                             f"{', '.join(map(repr, BLOCK_SPARSE_METHODS))}")
        return BlockSparse(compressor, ranks, block_size)
    if isinstance(compressor, TwoRoundCompressor):
        return TwoRounds(compressor, ranks)
    if compressor.aggregation == "allreduce":
        return AllReduce(compressor, ranks)
    return AllGather(compressor, ranks)


__all__ = ["AllGather", "AllReduce", "BLOCK_SPARSE_METHODS", "BlockSparse", "Bucket",
           "COMMUNICATORS", "Communicator", "DenseAllReduce", "Sent", "TwoRounds", "build"]
