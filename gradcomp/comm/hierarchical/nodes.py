"""Which ranks share a node: the node size from `gpus_per_node=` or torchrun's
LOCAL_WORLD_SIZE, checked on every rank alike, and the process groups of the two tiers."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch.distributed as dist

from ...checks import check_bool, check_choice, check_int
from ..ranks import Ranks, kept_groups

#: `intra=`: the reduce-scatter and all-gather inside a node uncompressed, or in bfloat16.
INTRA = ("none", "bf16")
#: How the node size is named in errors (it comes from either).
NODE_SIZE = "gpus_per_node (or torchrun's LOCAL_WORLD_SIZE)"


def hierarchy_options(hierarchical, gpus_per_node, intra) -> dict | None:
    """The checked options of the hierarchical hook: None (flat), or its node size and
    `intra` ({"gpus_per_node": G, "intra": ...}); the node size from LOCAL_WORLD_SIZE when
    `gpus_per_node` is None."""
    check_bool(hierarchical, "hierarchical")
    if not hierarchical:
        if gpus_per_node is not None or intra != "none":
            raise ValueError("gpus_per_node and intra are options of the hierarchical hook: "
                             "pass hierarchical=True with them")
        return None
    check_choice(intra, "intra", INTRA)
    if gpus_per_node is None:
        env = os.environ.get("LOCAL_WORLD_SIZE")
        if env is None:
            raise ValueError("hierarchical=True needs the number of ranks per node: pass "
                             "gpus_per_node=G, or run under torchrun (it sets LOCAL_WORLD_SIZE)")
        if not env.strip().isdigit():
            raise ValueError(f"LOCAL_WORLD_SIZE={env!r} is not allowed: hierarchical=True reads "
                             "the ranks per node from it; it must be an integer >= 1 (or pass "
                             "gpus_per_node=G)")
        gpus_per_node = int(env)
    check_int(gpus_per_node, "gpus_per_node", 1)
    return {"gpus_per_node": gpus_per_node, "intra": intra}


@dataclass(frozen=True)
class Nodes:
    """The hook's ranks (global ranks, in group order) as nodes of `gpus_per_node`
    consecutive ranks; `rank`: this rank's position among them."""

    ranks: tuple[int, ...]
    gpus_per_node: int
    rank: int

    @property
    def count(self) -> int:
        return len(self.ranks) // self.gpus_per_node

    @property
    def node(self) -> int:
        return self.rank // self.gpus_per_node

    @property
    def local(self) -> int:
        return self.rank % self.gpus_per_node

    def members(self, node: int) -> list[int]:
        """The global ranks of `node`."""
        g = self.gpus_per_node
        return list(self.ranks[node * g:(node + 1) * g])

    def peers(self, local: int) -> list[int]:
        """The global ranks of local rank `local` on every node (they exchange across)."""
        return list(self.ranks[local::self.gpus_per_node])


def find_nodes(ranks: Ranks, gpus_per_node: int) -> Nodes:
    """The nodes of `ranks`' group, after checking on every rank alike (one all-gather) that
    every rank has the same node size, that it divides the world, and, under torchrun, that
    each rank's LOCAL_RANK is its place in its node (ranks laid out node by node)."""
    members = tuple(dist.get_process_group_ranks(ranks.group)) if dist.is_initialized() else (0,)
    if dist.is_initialized() and len(members) != dist.get_world_size():
        raise ValueError(f"process_group holds {len(members)} of the {dist.get_world_size()} "
                         "ranks; hierarchical=True needs a group of every rank (None: the "
                         "default group)")
    local = os.environ.get("LOCAL_RANK")
    under_torchrun = os.environ.get("LOCAL_WORLD_SIZE") == str(gpus_per_node)
    mine = (gpus_per_node, int(local) if under_torchrun and local and local.isdigit() else None)
    everyone = [mine]
    if ranks.world_size > 1:
        everyone = [None] * ranks.world_size
        dist.all_gather_object(everyone, mine, group=ranks.group)
    sizes: dict[int, list[int]] = {}
    for r, (g, _) in enumerate(everyone):
        sizes.setdefault(g, []).append(r)
    if len(sizes) > 1:
        seen = "; ".join(f"{g} on rank(s) {', '.join(map(str, rs))}" for g, rs in sizes.items())
        raise ValueError(f"hierarchical=True needs nodes of equal size, and {NODE_SIZE} differs "
                         f"between ranks ({seen}): give every node the same number of ranks")
    if len(everyone) % gpus_per_node:
        raise ValueError(f"gpus_per_node={gpus_per_node} is not allowed: the {len(everyone)} "
                         f"ranks do not split into nodes of {gpus_per_node} ({NODE_SIZE} must "
                         "divide the world size)")
    misplaced = [f"rank {r} has LOCAL_RANK {l}" for r, (_, l) in enumerate(everyone)
                 if l is not None and l != r % gpus_per_node]
    if misplaced:
        raise ValueError(f"hierarchical=True needs the ranks laid out node by node (rank r "
                         f"on node r // {gpus_per_node} as local rank r % {gpus_per_node}, as "
                         f"torchrun numbers them), and {', '.join(misplaced)}")
    return Nodes(members, gpus_per_node, ranks.rank)


class OwnGroup(Ranks):
    """A group that carries one bucket only (the per-bucket gloo groups of `node_groups`):
    multi-round exchanges chain their rounds on it."""

    def round_group(self, bucket_index: int, device):
        return self.group if device.type == "cpu" and self.world_size > 1 else None


def node_groups(nodes: Nodes, backend: str | None, bucket: int | None = None,
                ) -> tuple[Ranks, Ranks]:
    """(this rank's node, its peers on the other nodes) as `Ranks`: every node's group and
    every local rank's group, created once per process (collectively: every rank creates all
    of them, in the same order). `bucket` given: gloo groups for that bucket alone
    (`OwnGroup`)."""
    def create():
        if not dist.is_initialized():
            return None, None
        inside = [dist.new_group(nodes.members(n), backend=backend) for n in range(nodes.count)]
        across = [dist.new_group(nodes.peers(l), backend=backend)
                  for l in range(nodes.gpus_per_node)]
        return inside[nodes.node], across[nodes.local]

    inside, across = kept_groups(("hierarchical", nodes, backend, bucket), create)
    kind = Ranks if bucket is None else OwnGroup
    return kind(inside), kind(across)
