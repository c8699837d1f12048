#!/usr/bin/env python
"""Cost of the hook's cross-rank agreement check (`gradcomp.comm.agreement`) on 2 gloo ranks,
beside a one-value all-reduce and one DDP iteration of a small MLP, in one run.

    PYTHONPATH=. python benchmarks/bench_agreement.py

The check runs once per process and once after each resume, so its cost per iteration is this
figure divided by the run's length. As a test (CI) it runs a few repeats and checks the table.
"""
from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import gradcomp.comm  # noqa: E402
from gradcomp.comm.agreement import check_agreement, settings  # noqa: E402
from gradcomp.evaluation.common import processes  # noqa: E402


def median_us(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def _worker(rank: int, store: str, out: str, repeats: int) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    table = _table(repeats)
    gc.collect()  # DDP's reference cycles, if any, with it
    if rank == 0:
        torch.save(table, out)
    # DDP and its reducer are gone (with `_table`'s frame) before the process group goes, which
    # then shuts down in destroy_process_group. Freed last, on this worker's return, the
    # reducer held the group's last reference, and the group's destructor joined a gloo thread
    # that was waiting for the GIL to free the hook's future callback, while this thread held
    # it: a hang seen once in CI (a destructor that blocks under the GIL:
    # pytorch/pytorch#56297).
    dist.barrier()
    dist.destroy_process_group()


def _table(repeats: int) -> dict[str, float]:
    """The three timings (module docstring) on this rank, in microseconds."""
    torch.manual_seed(0)
    ddp = DDP(nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)))
    state = gradcomp.comm.register(ddp, "topk", ratio=0.01, start_iter=0)
    x = torch.randn(64, 256)

    def iteration():
        ddp.zero_grad()
        ddp(x).square().mean().backward()

    iteration()
    bucket = _FirstBucket(ddp)
    one = torch.zeros(1)
    return {
        "agreement check": median_us(lambda: check_agreement(settings(state, bucket),
                                                             state.ranks, one.device), repeats),
        "all-reduce of 1 value": median_us(lambda: dist.all_reduce(one), repeats),
        "DDP iteration (topk hook)": median_us(iteration, repeats),
    }


class _FirstBucket:
    """Stands in for DDP's first bucket: what `settings` reads of it."""

    def __init__(self, ddp):
        self._buffer = torch.cat([p.detach().reshape(-1) for p in ddp.parameters()])

    def buffer(self):
        return self._buffer

    def index(self):
        return 0


def measure(repeats: int = 200) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "table.pt")
        processes.start(_worker, 2, os.path.join(tmp, "store"), out, repeats)
        return torch.load(out)


def test_agreement_cost_table():
    table = measure(repeats=5)
    assert set(table) == {"agreement check", "all-reduce of 1 value", "DDP iteration (topk hook)"}
    assert all(v > 0 for v in table.values())


if __name__ == "__main__":
    for name, us in measure().items():
        print(f"{name:28s} {us:9.1f} us")
