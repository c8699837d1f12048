"""How much of PowerSGD's exchange is compute between its two rounds (issue #16, item 3): the
built-in MLP's 16.8 MB bucket, PowerSGD rank 4 through `auto` (its only candidate, 5 measured
iterations), 2 gloo processes on loopback, 1 thread each. Run from the repository root with
PYTHONPATH=. ; prints one line (kept in powersgd_between_rounds.txt)."""
import os, statistics
import torch, torch.distributed as dist, torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
import gradcomp.comm
from gradcomp.evaluation.benches.train import build_model

def run(rank, path):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=2)
    model, x, y = build_model("mlp", 64, data_seed=rank)
    ddp = DDP(model, bucket_cap_mb=25.0)
    st = gradcomp.comm.register(ddp, "auto", explore_iters=6, candidates=[("powersgd", {"rank": 4})])
    for i in range(8):
        F.cross_entropy(ddp(x), y).backward()
    rows = [r for r in st.telemetry_rows() if 2 <= r["iteration"] <= 6]
    if rank == 0:
        ed = statistics.median(r["encode_s"] + r["decode_s"] for r in rows)
        span = statistics.median(r["comm_s"] for r in rows)
        codec = st.chooser.codec[0, 0]
        print(f"encode+decode {ed*1e3:.1f} ms; exchange span (telemetry comm_s) {span*1e3:.1f} ms; "
              f"auto's codec (with between-round work) {codec*1e3:.1f} ms -> between rounds ~{(codec-ed)*1e3:.1f} ms, "
              f"communication as auto now counts it ~{(span-(codec-ed))*1e3:.1f} ms")
    dist.destroy_process_group()

if __name__ == "__main__":
    p = "/tmp/psgd/store"
    if os.path.exists(p): os.remove(p)
    mp.spawn(run, args=(p,), nprocs=2)
