#!/usr/bin/env python
"""`auto`'s steady state against the fixed hook of the candidate it settled on, side by side
on 2 local gloo ranks (loopback, no testbed; one thread each, as the testbed's workers), the
built-in MLP (`--model`, default mlp: 4.2M parameters, batch 64, one 25 MB bucket), every
run from a fresh model.

    PYTHONPATH=. python benchmarks/bench_auto_steady.py [--rounds 3] [--steps 30]

Cases: the fixed method (default top-k 1% with error feedback), `auto` with `--auto`'s
options (default: that method as its only candidate, so it settles at iteration 4) and the
same with slowdown=None ("auto-periodic": its samples reduced once per check_every
iterations instead of every iteration). Each round runs every case (the order rotated
between rounds); per run, over the same window of iterations (from `--steady-from` on): the
median iteration time (wall, the slowest rank's), the median process CPU seconds per
iteration (every thread: gloo's included; robust to other load, unlike wall time), the
median thread CPU seconds inside the hook's call (auto's choice and the encode) and the
hook's telemetry (encode/comm/decode per iteration). Then one more run of each under
torch.profiler: the collectives per steady iteration. Printed as medians over rounds and
as ratios to the fixed run of the same round, rank 0's.
"""
# No `from __future__ import annotations`: DDP checks the hook's annotations at runtime.

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gradcomp.comm import hooks  # noqa: E402
from gradcomp.evaluation.common import processes  # noqa: E402
from gradcomp.evaluation.common.env import end_process_group  # noqa: E402
from gradcomp.evaluation.workloads.load import load_workload  # noqa: E402

TOPK_EF = ["topk", {"ratio": 0.01, "error_feedback": True}]


def _run(name: str, options: dict, steps: int, steady_from: int, model_name: str,
         profile: bool = False):
    """Train `steps` iterations; the medians over the steady ones (module docstring); with
    `profile`, the collectives issued per steady iteration."""
    rank = dist.get_rank()
    workload = load_workload(model_name, batch_size=64)
    model = workload.model
    x, y = workload.batches(rank, 0)
    ddp = DistributedDataParallel(model, bucket_cap_mb=25.0)
    state = hooks.build_state(name, **options)
    state.track_parameters(model)
    in_hook = Counter()

    def timed_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        iteration, start = state.iteration, time.thread_time()
        fut = hooks.hook(state, bucket)
        in_hook[iteration] += time.thread_time() - start
        return fut

    ddp.register_comm_hook(state, timed_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    wall, cpu, collectives = [], [], Counter()
    for i in range(steps):
        with torch.autograd.profiler.profile(enabled=profile and i >= steady_from) as prof:
            start, start_cpu = time.perf_counter(), time.process_time()
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(ddp(x), y).backward()
            opt.step()
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        if profile and i >= steady_from:
            collectives.update(e.name for e in prof.function_events
                               if e.name in ("c10d::allreduce_", "c10d::allgather_"))
    slowest = torch.tensor(wall, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    tele = {k: [0.0] * steps for k in ("encode_s", "comm_s", "decode_s")}
    for row in state.telemetry_rows():
        for k in tele:
            tele[k][row["iteration"]] += row[k]
    med = lambda v: statistics.median(v[steady_from:])  # noqa: E731
    return {"t_iter_s": med(slowest.tolist()), "cpu_iter_s": med(cpu),
            "hook_call_cpu_s": med([in_hook[i] for i in range(steps)]),
            **{k: med(v) for k, v in tele.items()},
            "collectives_per_iter": {k: v / (steps - steady_from)
                                     for k, v in collectives.items()},
            "choices": state.choices_text() if name == "auto" else ""}


def _worker(rank: int, store: str, out: str, a) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    fixed = json.loads(a.options)
    auto = json.loads(a.auto) or {"candidates": [(a.method, fixed)]}
    cases = {"fixed": (a.method, fixed), "auto": ("auto", auto),
             "auto-periodic": ("auto", {**auto, "slowdown": None})}
    rows = []
    try:
        for r in range(a.rounds):
            order = list(cases)[r % 3:] + list(cases)[:r % 3]
            for case in order:
                name, options = cases[case]
                rows.append({"round": r, "case": case,
                             **_run(name, options, a.steps, a.steady_from, a.model)})
        for case, (name, options) in cases.items():
            rows.append({"round": "profiled", "case": case,
                         **_run(name, options, a.steady_from + 10, a.steady_from, a.model,
                                 True)})
    finally:
        end_process_group()  # the runs' hooked DDPs freed first
    if rank == 0:
        with open(out, "w") as f:
            json.dump(rows, f)


def summary(rows) -> str:
    timed = [r for r in rows if r["round"] != "profiled"]
    cases = list(dict.fromkeys(r["case"] for r in timed))
    keys = ("t_iter_s", "cpu_iter_s", "hook_call_cpu_s", "encode_s", "comm_s", "decode_s")
    lines = ["case          " + "  ".join(f"{k:>15}" for k in keys) + "  (ms, median of rounds)"]
    for case in cases:
        mine = [r for r in timed if r["case"] == case]
        lines.append(f"{case:13} " + "  ".join(
            f"{statistics.median(r[k] for r in mine) * 1e3:15.2f}" for k in keys))
    rounds = sorted({r["round"] for r in timed})
    for case in cases[1:]:
        for k in keys[:3]:
            ratios = []
            for n in rounds:
                f, c = (next(r for r in timed if r["round"] == n and r["case"] == x)
                        for x in ("fixed", case))
                ratios.append(c[k] / f[k] if f[k] else float("nan"))
            lines.append(f"{case} / fixed, {k}: median {statistics.median(ratios):.3f}, "
                         "per round " + " ".join(f"{v:.3f}" for v in ratios))
    for r in rows:
        if r["round"] == "profiled":
            lines.append(f"collectives per steady iteration, {r['case']}: "
                         f"{r['collectives_per_iter']}")
    lines.append("auto's choices: " + "; ".join(sorted({r["choices"] for r in timed
                                                        if r["choices"]})))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--steady-from", type=int, default=10,
                   help="the first iteration of the compared window (after auto settled)")
    p.add_argument("--model", default="mlp", help="a built-in workload (tiny: where the "
                   "hook's own work is most of an iteration)")
    p.add_argument("--method", default=TOPK_EF[0])
    p.add_argument("--options", default=json.dumps(TOPK_EF[1]), help="as JSON")
    p.add_argument("--auto", default="{}", help="auto's options as JSON (default: the "
                   "method with --options as its only candidate)")
    p.add_argument("--json", help="also write the rows here")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        processes.start(_worker, 2, os.path.join(tmp, "store"), out, a)
        with open(out) as f:
            rows = json.load(f)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
