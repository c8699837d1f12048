"""2 gloo ranks on localhost (no rate limit): a method's encode and decode in DDP training of the MLP
(telemetry, rank 0's median) and in the hook-path bench (slowest rank, as validate runs it), in the
same processes.

    PYTHONPATH=$PWD python decode_two_ranks.py randomk [METHOD ...]
"""
import os, statistics, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
import gradcomp.comm as gc
import gradcomp.evaluation.benches.hookpath as hookpath
from gradcomp.evaluation.workloads.load import load_workload

def run(rank, method, port):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    w = load_workload("mlp", "model", batch_size=64)
    ddp = DistributedDataParallel(w.model, bucket_cap_mb=25)
    state = gc.register(ddp, method)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    x, y = w.batch(rank, 0, "cpu")
    for _ in range(25):
        opt.zero_grad(); w.loss(ddp(x), y).backward(); opt.step()
    rows = state.telemetry.rows()[5:]
    dec = statistics.median(r["decode_s"] for r in rows) * 1e3
    enc = statistics.median(r["encode_s"] for r in rows) * 1e3
    g = hookpath.workload_gradient("mlp", 64, 25.0, rank)
    b = hookpath.measure_hook_path(method, {}, g.values.numel(), world_size=2, repeats=15,
                                   warmup=3, gradient=g, slowest_rank=True)
    if rank == 0:
        print(f"{method}: training encode {enc:.1f} decode {dec:.1f} ms (median, rank 0); "
              f"bench encode {b['encode_s']*1e3:.1f} decode {b['decode_s']*1e3:.1f} ms", flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    for i, m in enumerate(sys.argv[1:]):
        mp.spawn(run, (m, str(29950 + i)), nprocs=2)
