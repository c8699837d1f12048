"""(`testbed-two-tier-2026-11-29-same-job`'s script with this sweep's variants.)
Fixed hooks and `auto` timed in one job on the two-tier testbed: one DDP model of the MLP
per variant, all in the same 4 processes, timed in rotating blocks of iterations (each round
every variant's block, the order rotated by one per round), so that every variant sees the
same conditions (each warmed up for WARMUP iterations, auto at least until its first decision
acts). Per iteration: the slowest rank's seconds, and the hook's encode,
communication and decode seconds (summed over buckets, the slowest rank's).

    python same_job.py RATE_BPS JOBS OUT.jsonl ROUNDS BLOCK WARMUP VARIANT [VARIANT ...]

Each job appends one line to OUT.jsonl. Variants: `VARIANTS`.
"""
import json
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from gradcomp import comm
from gradcomp.evaluation.testbed.nodes import NodeTestbed
from gradcomp.evaluation.workloads.load import load_workload

TOPK = ["topk", {"ratio": 0.01, "error_feedback": True}]
PSGD = ["powersgd", {"rank": 4, "error_feedback": True, "min_compression_rate": 2}]
HIER = {"hierarchical": True, "gpus_per_node": 2}
FIXED = {"none": ("none", {}), "bf16": ("bf16", {}), "topk": tuple(TOPK), "powersgd": tuple(PSGD)}
AUTO = {"auto": {},  # the defaults
        "auto-margin-0.25": {"confirm_margin": 0.25},  # the default before this change
        "auto-every-step": {"check_every": 7},  # 7: samples launched every iteration
        "auto-rounds-10": {"confirm_rounds": 10},
        "auto-bf16-topk": {"candidates": [("bf16", {}), tuple(TOPK)], "confirm_margin": 10.0,
                           "confirm_rounds": 10}}  # always timed rounds between the two
VARIANTS = {}  # name: (method, options); flat- without the hierarchical layout
for prefix, layout in (("", HIER), ("flat-", {})):
    VARIANTS.update({prefix + n: (m, {**o, **layout}) for n, (m, o) in FIXED.items()})
    VARIANTS.update({prefix + n: ("auto", {**o, **layout}) for n, o in AUTO.items()})


def build(method: str, options: dict, rank: int) -> tuple:
    """One variant's (workload, DDP model with its hook, optimizer, this rank's batch, hook
    state)."""
    workload = load_workload("mlp", "model", batch_size=64)
    ddp = DistributedDataParallel(workload.model, bucket_cap_mb=25.0)
    state = comm.register(ddp, method, **options)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    return workload, ddp, opt, workload.batch(rank, 0, torch.device("cpu")), state


def job(out: str, rounds: int, block: int, warmup: int, names: list[str]) -> None:
    """On every rank of a testbed job (torchrun's variables set)."""
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    runs = {name: build(*VARIANTS[name], rank) for name in names}

    def step(name: str) -> float:
        workload, ddp, opt, (x, y), _ = runs[name]
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        workload.loss(ddp(x), y).backward()
        opt.step()
        return time.perf_counter() - start

    for name in names:  # auto: at least until its first decision acts (`settled_by`)
        for _ in range(max(warmup, getattr(runs[name][4], "settled_by", 0))):
            step(name)
    first = {n: len(runs[n][4].telemetry_rows()) for n in names}
    times = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].extend(step(name) for _ in range(block))
    record = {"names": names, "block": block, "warmup": warmup, "times": {}, "hook": {}}
    for name in names:
        seconds = torch.tensor(times[name], dtype=torch.float64)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        record["times"][name] = seconds.tolist()
        per = {}
        for row in runs[name][4].telemetry_rows()[first[name]:]:
            acc = per.setdefault(row["iteration"], [0.0, 0.0, 0.0])
            for k, column in enumerate(("encode_s", "comm_s", "decode_s")):
                acc[k] += row[column]
        hook = torch.tensor([per[i] for i in sorted(per)], dtype=torch.float64)
        dist.all_reduce(hook, op=dist.ReduceOp.MAX)
        record["hook"][name] = hook.tolist()
    states = {n: runs[n][4] for n in names if VARIANTS[n][0] == "auto"}
    record["choices"] = {n: s.choices_text() for n, s in states.items()}
    record["decision"] = {n: s.decision_text() for n, s in states.items()}
    record["switches"] = {n: [list(x) for x in s.switches] for n, s in states.items()}
    if rank == 0:
        with open(out, "a") as f:
            f.write(json.dumps(record) + "\n")
    dist.destroy_process_group()


def main(rate: float, jobs: int, out: str, rounds: str, block: str, warmup: str,
         names: list[str]) -> None:
    with NodeTestbed(2, 2, rate, threads=1) as testbed:
        for j in range(jobs):
            testbed.run([sys.executable, __file__, "--job", out, rounds, block, warmup,
                         *names], timeout=1800)
            print(f"job {j} done", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--job":
        job(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6:])
    else:
        main(float(sys.argv[1]), int(sys.argv[2]), sys.argv[3], *sys.argv[4:7], sys.argv[7:])
