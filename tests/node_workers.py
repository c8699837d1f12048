"""A rank of a two-tier testbed job (tests/test_testbed_nodes.py): it checks that torchrun's
variables number it as on a real cluster (node by node) and that it runs in its node's
namespace, then all-reduces across every rank and inside its node; prints one JSON line, with
how it started (torch already imported: forked from its node's fork server; torch._dynamo
too: that server's preload had it)."""
import json
import os
import subprocess
import sys

preloaded, dynamo = "torch" in sys.modules, "torch._dynamo" in sys.modules
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

env = {k: int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                       "GROUP_RANK")}
node_rank = int(os.environ.get("NODE_RANK", env["GROUP_RANK"]))
namespace = subprocess.run(["ip", "netns", "identify"], capture_output=True,
                           text=True).stdout.strip()
dist.init_process_group("gloo")
rank, world, g = dist.get_rank(), dist.get_world_size(), env["LOCAL_WORLD_SIZE"]
nodes = [dist.new_group(list(range(n * g, (n + 1) * g))) for n in range(world // g)]
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
inside = torch.tensor([rank + 1.0])
dist.all_reduce(inside, group=nodes[rank // g])
line = json.dumps({**env, "NODE_RANK": node_rank, "namespace": namespace, "dist_rank": rank,
                   "dist_world": world, "sum": total.item(), "node_sum": inside.item(),
                   "preloaded": preloaded, "dynamo": dynamo, "parent": os.getppid(),
                   "threads": torch.get_num_threads()})
# one write of the whole line: the ranks of a node share torchrun's stdout, and a line
# written in one call under PIPE_BUF bytes is not split by another rank's (print writes the
# text and the newline apart when stdout is unbuffered)
os.write(sys.stdout.fileno(), (line + "\n").encode())
dist.destroy_process_group()
