"""Per-rank timelines of flat DDP training on the two-tier testbed: which phase each rank is in
when another encodes or decodes (the measurement issue 31's codec pricing needs; README.md).

    python ranks.py OUT.csv 100mbit,1gbit,2.5gbit int8,topk,none   # 2 nodes x 2 ranks each

Per rate, in one `NodeTestbed(2, 2, rate)`, per method: the MLP (batch 64, 25 MB buckets: one
bucket) under DDP with `gradcomp.comm.register(ddp, method)`, WARMUP untimed and ITERATIONS
timed iterations; every rank records, per iteration, `time.perf_counter()` (CLOCK_MONOTONIC:
one clock for every process of the machine) at the iteration's start and end, and the hook's
own marks of its one bucket (started, encoded, exchanged, decoded); rank 0 gathers and appends
one row per rank and iteration: rate, method, rank, iteration, iter_start, started, encoded,
exchanged, decoded, iter_end (seconds, one clock). Run under a testbed, each rank does the
same with ``--job`` (torchrun's environment).

    python ranks.py --analyse OUT.csv - -   # per rate and method, `busy`'s table"""
import argparse
import os
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist

WARMUP, ITERATIONS = 5, 30
MARKS = ("started", "encoded", "exchanged", "decoded")


def job(out: str, rate: str, method: str) -> None:
    """One method's timed iterations on this rank (module docstring); rank 0 appends."""
    from torch.nn.parallel import DistributedDataParallel

    from gradcomp import comm
    from gradcomp.evaluation.common.env import init_from_env
    from gradcomp.evaluation.workloads.load import load_workload

    torch.set_num_threads(1)
    init_from_env("gloo")
    rank = dist.get_rank()
    workload = load_workload("mlp", "model", batch_size=None)
    inputs, target = workload.batch(rank, 0, "cpu")
    ddp = DistributedDataParallel(workload.model, bucket_cap_mb=25.0)
    state = comm.register(ddp, method)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    spans = []
    for _ in range(WARMUP + ITERATIONS):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        workload.loss(ddp(inputs), target).backward()
        opt.step()
        spans.append((start, time.perf_counter()))
    buckets = {r.iteration: r for r in state.telemetry.records if r.complete}
    rows = torch.tensor([[rank, i, spans[i][0], *(getattr(buckets[i], m) for m in MARKS),
                          spans[i][1]] for i in range(WARMUP, WARMUP + ITERATIONS)],
                        dtype=torch.float64)
    gathered = [torch.empty_like(rows) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, rows)
    if rank == 0:
        table = pd.DataFrame(torch.cat(gathered).numpy(),
                             columns=["rank", "iteration", "iter_start", *MARKS, "iter_end"])
        table = table.astype({"rank": int, "iteration": int}).assign(rate=rate, method=method)
        path = Path(out)
        table.to_csv(path, mode="a", header=not path.exists(), index=False)
    dist.destroy_process_group()


def busy(table: pd.DataFrame) -> pd.DataFrame:
    """Per rate and method (means over ranks and iterations, ms): each rank's encode and
    decode, the encode of the rank that encoded last (the one the exchange waits for), and
    how many ranks were computing (in their iteration, not waiting in the exchange) on
    average while a rank encoded and while it decoded (itself included; 4: all at once, as
    the hook-path bench times them)."""
    rows = []
    for (rate, method, it), group in table.groupby(["rate", "method", "iteration"], sort=False):
        def computing(t):
            return float(((group["iter_start"] <= t) & (t < group["iter_end"])
                          & ~((group["encoded"] <= t) & (t < group["exchanged"]))).sum())

        def mean_computing(a, b, points=20):
            return sum(computing(a + (b - a) * (k + 0.5) / points) for k in range(points)) / points

        last = group.loc[group["encoded"].idxmax()]
        rows.append({"rate": rate, "method": method,
                     "encode_ms": 1e3 * (group["encoded"] - group["started"]).mean(),
                     "decode_ms": 1e3 * (group["decoded"] - group["exchanged"]).mean(),
                     "last_encode_ms": 1e3 * (last["encoded"] - last["started"]),
                     "computing_in_encode": sum(mean_computing(r.started, r.encoded)
                                                for r in group.itertuples()) / len(group),
                     "computing_in_decode": sum(mean_computing(r.exchanged, r.decoded)
                                                for r in group.itertuples()) / len(group)})
    return pd.DataFrame(rows).groupby(["rate", "method"], sort=False).mean()


def sweep(out: str, rates: str, methods: str) -> None:
    """Every method at every rate, each rate in one two-tier testbed."""
    from gradcomp.evaluation.common.units import parse_rate
    from gradcomp.evaluation.testbed.nodes import NodeTestbed

    for rate in rates.split(","):
        with NodeTestbed(2, 2, parse_rate(rate, "rates"), threads=1) as testbed:
            for method in methods.split(","):
                print(rate, method, flush=True)
                testbed.run([sys.executable, os.path.abspath(__file__), "--job",
                             os.path.abspath(out), rate, method], timeout=600)


if __name__ == "__main__":
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--job", action="store_true", help="one rank's part (under torchrun)")
    args.add_argument("--analyse", action="store_true", help="print `busy` of OUT")
    args.add_argument("out")
    args.add_argument("rates")
    args.add_argument("methods")
    a = args.parse_args()
    if a.analyse:
        print(busy(pd.read_csv(a.out)).round(2).to_string())
    else:
        (job if a.job else sweep)(a.out, a.rates, a.methods)
