"""What auto's per-iteration slowdown check and a full drift check cost on 2 gloo ranks
(loopback, this machine): median seconds per call over 2000 calls, one bucket."""
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gradcomp.comm.auto.choice import Chooser, Sample, Transfer


def worker(rank, store):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)

    def reduce(values):
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
        return values

    ch = Chooser([Transfer("allreduce"), Transfer("allgather")], workers=2, explore_iters=3,
                 check_every=10 ** 9)
    for i in range(1, 8):  # decide: a 4e7-byte bucket, uncompressed (fast link)
        ch.step(i, reduce)
        c = ch.choice(0, i)
        nbytes = 4e7 if c == 0 else 4e5
        steps, per_byte = ch.transfers[c].factors(2)
        ch.samples.append(Sample(i, 0, c, 0.0 if c == 0 else 2e-3,
                                 steps * 20e-6 + per_byte * nbytes * 1e-11, nbytes, True,
                                 ch.warmup(i)))
    times = {"slowdown check": [], "full drift check": []}
    for i in range(8, 2008):
        ch.samples.append(Sample(i - 1, 0, 0, 0.0, 4.4e-4, 4e7, True))
        dist.barrier()
        start = time.perf_counter()
        ch._slowed_down(i, reduce)
        times["slowdown check"].append(time.perf_counter() - start)
        dist.barrier()
        start = time.perf_counter()
        ch._check_drift(reduce)
        times["full drift check"].append(time.perf_counter() - start)
    if rank == 0:
        for name, t in times.items():
            print(f"{name}: median {statistics.median(t) * 1e6:.0f} us, "
                  f"90th percentile {sorted(t)[len(t) * 9 // 10] * 1e6:.0f} us")
        print(f"load average {os.getloadavg()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(os.path.join(tmp, "store"),), nprocs=2)
