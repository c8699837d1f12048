"""The 2-level reduce-scatter for a 2-D mesh (SDP4Bit's layout: one method inside a node,
another across nodes).

The FSDP group's W = N x L ranks are the mesh's (node, local) pairs in row-major order, rank
n * L + l owning chunk n * L + l. Step 1, inside each node: every rank sends local rank l the
N chunks it will own a part of ({n * L + l}), compressed by the inside method; local rank l
decodes them and sums the node's contributions in float32. Step 2, across nodes: each rank sends
node n the partial sum of chunk n * L + l, compressed by the across method; the owner decodes
and sums. Each value is compressed once per hop, and the uncompressed version of these two
steps sends exactly the bytes of the flat reduce-scatter ((L - 1) N C + (N - 1) C = (W - 1) C).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from ..compressors import Compressor


class TwoLevels:
    """The mesh's groups and the across-nodes method of a 2-level reduce-scatter.

    mesh: a 2-D `DeviceMesh` over the FSDP group's ranks, dimension 0 across nodes and
        dimension 1 inside a node, whose row-major order is the FSDP group's rank order.
    across: the compressor of step 2 (its error-feedback residuals are kept on this rank's
        partial sums, one per node it sends to).
    """

    def __init__(self, mesh, across: Compressor):
        if not isinstance(mesh, DeviceMesh) or mesh.ndim != 2:
            raise ValueError(f"mesh={mesh!r} is not allowed: give a 2-D DeviceMesh "
                             "(dimension 0 across nodes, dimension 1 inside a node), e.g. "
                             "init_device_mesh('cuda', (nodes, per_node))")
        self.mesh = mesh
        self.across = across
        self.ranks = mesh.mesh.flatten().tolist()
        self.inside_group = mesh.get_group(1)
        self.across_group = mesh.get_group(0)

    @property
    def nodes(self) -> int:
        return self.mesh.size(0)

    @property
    def per_node(self) -> int:
        return self.mesh.size(1)

    def check_group(self, group) -> None:
        """The FSDP group must hold the mesh's ranks in the mesh's order."""
        ranks = dist.get_process_group_ranks(group)
        if ranks != self.ranks:
            raise ValueError(f"mesh: the FSDP module reduce-scatters over ranks {ranks}, and the "
                             f"mesh's ranks in row-major order are {self.ranks}: shard the model "
                             "over the mesh's ranks in that order (fully_shard over the "
                             "flattened mesh or the default group)")

    def spread(self, flat: torch.Tensor) -> torch.Tensor:
        """`flat`'s chunks reordered for step 1: the chunks destined to local rank l
        ({n * L + l} for every node n) laid end to end, for l = 0 .. L - 1."""
        return flat.view(self.nodes, self.per_node, -1).transpose(0, 1).reshape(-1)
