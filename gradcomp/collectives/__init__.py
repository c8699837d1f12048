"""Collectives of their own, apart from the hook path: what a collective costs on a cluster of
one or two tiers (`costs`, pure math shared by the evaluation model and the `auto` hook), the
block-sparse all-reduce (`blocksparse`), and forest packing (`forest_packing`, pure
computation) with the forest all-reduce that runs a packed forest (`forest`)."""
from .blocksparse import block_sparse_all_reduce
from .costs import ALGORITHMS, COLLECTIVES, Tiers, choose, cost, ring_factors
from .forest import forest_all_reduce
from .forest_packing import Forest, pack_forest

__all__ = ["ALGORITHMS", "COLLECTIVES", "Forest", "Tiers", "block_sparse_all_reduce", "choose",
           "cost", "forest_all_reduce", "pack_forest", "ring_factors"]
