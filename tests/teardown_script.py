"""A short DDP run with PowerSGD's chained rounds (per-bucket gloo groups), ended as tutorials end
it: destroy_process_group(), then the model goes out of scope and the process exits. Run by
test_teardown.py under torchrun."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp.comm


def main(steps: int = 5) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    ddp = DDP(nn.Sequential(nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                            nn.Linear(256, 1)))
    gradcomp.comm.register(ddp, "powersgd", rank=2)
    x = torch.randn(64, 20)
    for _ in range(steps):
        ddp(x).square().mean().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
