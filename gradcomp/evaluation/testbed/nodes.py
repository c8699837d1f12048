"""A two-tier testbed: nodes of several ranks on one machine (`NodeTestbed`). Each node is one
of `Testbed`'s network namespaces, joined to the others by its rate-limited links (star or
p2p, tc tbf); the node's `gpus_per_node` ranks all run inside that namespace, so traffic
between them never leaves it: Linux delivers a packet to an address of its own namespace over
the loopback, whatever interface holds the address, and the loopback has no rate limit (the
fast tier, NVLink's stand-in); traffic to another node leaves through the veth and its tbf
(the slow tier, the NIC's). Every rank binds gloo to its node's veth address
(GLOO_SOCKET_IFNAME), so ranks of other nodes can reach it; MASTER_ADDR is node 0's address,
which ranks of node 0 reach over the loopback and the others over the shaped links.

Ranks are numbered node by node (rank = node * G + local rank), as torchrun numbers them.
`NodeTestbed.run(argv)` starts:

* per rank (the default): `argv` N x G times, with the variables torchrun gives its workers:
  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE = G, GROUP_RANK = NODE_RANK = the node,
  GROUP_WORLD_SIZE = NNODES = N, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and
  `Testbed`'s GLOO_SOCKET_IFNAME, OMP_NUM_THREADS, GRADCOMP_TESTBED_RATE_BPS);
* per node (`per_node=True`): `argv` once per node, as a cluster's scheduler starts a launcher:
  NODE_RANK, NNODES, LOCAL_WORLD_SIZE, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and torchrun's
  own options as its environment variables (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK,
  PET_MASTER_ADDR, PET_MASTER_PORT), so a plain ``torchrun script.py`` starts G workers per
  node that torchrun numbers itself.

Set-up, teardown (every exit path) and `set_rate` are `Testbed`'s, per node.
"""
from __future__ import annotations

from ...checks import check_int, check_number
from .testbed import MAX_WORKERS, Link, RankResult, Testbed


class NodeTestbed(Testbed):
    """`nodes` namespaces of `gpus_per_node` ranks each, joined at `rate` (or `rates`, one
    per node) by a `topology`; `per_node`: `run` starts its command once per node (module
    docstring). The other options are `Testbed`'s."""

    def __init__(self, nodes: int = 2, gpus_per_node: int = 2, rate="1gbit", rates=None,
                 topology: str = "star", threads: int = 1, mtu: int = 9000,
                 port: int = 29500, per_node: bool = False):
        check_int(nodes, "nodes", 2, MAX_WORKERS)
        check_int(gpus_per_node, "gpus_per_node", 1, MAX_WORKERS)
        super().__init__(nodes, rate, rates, topology, threads, mtu, port)
        self.nodes, self.gpus_per_node, self.per_node = nodes, gpus_per_node, bool(per_node)

    def __repr__(self) -> str:
        return (super().__repr__().replace(f"{self.nodes} workers",
                                           f"{self.nodes} nodes of {self.gpus_per_node} ranks"))

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def processes(self) -> int:
        return self.nodes if self.per_node else self.world_size

    def node_of(self, process: int) -> int:
        """The node that process `process` of `run` belongs to."""
        return process if self.per_node else process // self.gpus_per_node

    def link_of(self, process: int) -> Link:
        return self.links[self.node_of(process)]

    def environment(self, rank: int, port: int | None = None) -> dict[str, str]:
        """The variables process `rank` of `run` gets (a rank, or a node with `per_node`)."""
        node = self.node_of(rank)
        env = Testbed.environment(self, node, port)  # the node's link, master and threads
        g, n = self.gpus_per_node, self.nodes
        env.update(WORLD_SIZE=str(self.world_size), LOCAL_WORLD_SIZE=str(g),
                   NODE_RANK=str(node), GROUP_RANK=str(node), NNODES=str(n),
                   GROUP_WORLD_SIZE=str(n))
        if self.per_node:
            del env["RANK"], env["LOCAL_RANK"]
            env.update(PET_NNODES=str(n), PET_NPROC_PER_NODE=str(g), PET_NODE_RANK=str(node),
                       PET_MASTER_ADDR=env["MASTER_ADDR"], PET_MASTER_PORT=env["MASTER_PORT"])
        else:
            env.update(RANK=str(rank), LOCAL_RANK=str(rank % g), ROLE_RANK=str(rank),
                       ROLE_WORLD_SIZE=str(self.world_size))
        return env


def run_on_nodes(argv, nodes: int = 2, gpus_per_node: int = 2, rate="1gbit", rates=None,
                 topology: str = "star", threads: int = 1, timeout: float | None = None,
                 per_node: bool = False) -> list[RankResult]:
    """Run `argv` in a fresh `NodeTestbed` (per rank, or once per node with `per_node`) and
    tear it down; each process's exit code and output (a failing one raises JobFailed)."""
    if not argv:
        raise ValueError("command=[] is not allowed: give the command to run on every node")
    if timeout is not None:
        check_number(timeout, "timeout", 0, above=True)
    with NodeTestbed(nodes, gpus_per_node, rate, rates, topology, threads,
                     per_node=per_node) as testbed:
        return testbed.run(list(argv), timeout=timeout)
