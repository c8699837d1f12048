"""The hierarchical hook (`register(ddp, method, hierarchical=True, gpus_per_node=G)`): inside
each node a reduce-scatter of the bucket (uncompressed, or `intra="bf16"`), between nodes the
method on each rank's 1/G shard among the ranks of the same local rank, an all-gather inside
the node (`tiers`)."""
from .inside import Inside, shard_shapes
from .nodes import INTRA, Nodes, find_nodes, hierarchy_options
from .tiers import TierRecord, TwoTiers

__all__ = ["INTRA", "Inside", "Nodes", "TierRecord", "TwoTiers", "find_nodes",
           "hierarchy_options", "shard_shapes"]
