"""Where auto's confirmation rounds lose top-k's time between nodes: the margin folder's
same-job design (`../testbed-two-tier-2026-11-29-margin/same_job.py`: every variant its own
DDP model of the MLP in the same 4 processes) with every iteration's hook telemetry kept, in
phases:

1. warm-up: each fixed variant WARMUP iterations, each auto variant up to its `settled_by`
   (its exploration and confirmation rounds);
2. mock rounds: the fixed `topk` and `powersgd` models (separate DDP models) alternating in
   turns of two iterations, MOCK rounds (each round both, the order rotated);
3. rotation: every variant in rotating blocks of BLOCK iterations, ROUNDS rounds.

Per iteration: the phase, the slowest rank's seconds, the method that carried the bucket
and its encode, communication and decode seconds (the slowest rank's each; one bucket).

    python rounds_hook.py RATE_BPS JOBS OUT.jsonl ROUNDS BLOCK WARMUP MOCK VARIANT [...]

Variants: the margin folder's, and `auto-two` (PowerSGD rank 4 and top-k 1% with error
feedback as candidates, `confirm_margin` 10: both always take turns). One line per job.
"""
import importlib.util
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from gradcomp.evaluation.testbed.nodes import NodeTestbed

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "same_job", os.path.join(HERE, "..", "testbed-two-tier-2026-11-29-margin", "same_job.py"))
same_job = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(same_job)
VARIANTS = dict(same_job.VARIANTS)
VARIANTS["auto-two"] = ("auto", {**same_job.HIER, "candidates": [same_job.PSGD, same_job.TOPK],
                                 "confirm_margin": 10.0})
HOOK = ("encode_s", "comm_s", "decode_s")
NOW = {}  # the variant stepping now: name, phase, its iteration (for scripts that build on this)
EXTRAS = []  # callables run on every rank at the end, each returning items for the record


def slowest(rows: list[list[float]]) -> list[list[float]]:
    t = torch.tensor(rows, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def job(out: str, rounds: int, block: int, warmup: int, mock: int, names: list[str]) -> None:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    runs = {name: same_job.build(*VARIANTS[name], rank) for name in names}
    seen = {n: [] for n in names}  # name -> [(phase, seconds)]

    def step(name: str, phase: str) -> None:
        workload, ddp, opt, (x, y), _ = runs[name]
        NOW.update(name=name, phase=phase, iteration=len(seen[name]))
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        workload.loss(ddp(x), y).backward()
        opt.step()
        seen[name].append((phase, time.perf_counter() - start))

    for name in names:
        auto = VARIANTS[name][0] == "auto"
        for _ in range(runs[name][4].settled_by if auto else warmup):
            step(name, "warmup")
    pair = ["topk", "powersgd"]
    for r in range(mock):
        for name in pair[r % 2:] + pair[:r % 2]:
            step(name, "mock")
            step(name, "mock")
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            for _ in range(block):
                step(name, "rotation")
    record = {"names": names, "block": block, "warmup": warmup, "mock": mock, "iterations": {}}
    for name in names:
        rows = runs[name][4].telemetry_rows()
        if len(rows) != len(seen[name]):
            raise RuntimeError(f"{name}: {len(rows)} telemetry rows for {len(seen[name])} steps")
        values = slowest([[s] + [row[c] for c in HOOK] for (_, s), row in zip(seen[name], rows)])
        record["iterations"][name] = [[phase, row["method"], *v] for (phase, _), row, v
                                      in zip(seen[name], rows, values)]
    autos = {n: runs[n][4] for n in names if VARIANTS[n][0] == "auto"}
    record["choices"] = {n: s.choices_text() for n, s in autos.items()}
    record["decision"] = {n: s.decision_text() for n, s in autos.items()}
    for extra in EXTRAS:
        record.update(extra())
    if rank == 0:
        with open(out, "a") as f:
            f.write(json.dumps(record) + "\n")
    dist.destroy_process_group()


def main(argv: list[str]) -> None:
    if argv[1] == "--job":
        job(argv[2], *map(int, argv[3:7]), argv[7:])
        return
    with NodeTestbed(2, 2, float(argv[1]), threads=1) as testbed:
        for j in range(int(argv[2])):
            testbed.run([sys.executable, __file__, "--job", argv[3], *argv[4:]], timeout=1800)
            print(f"job {j} done", flush=True)


if __name__ == "__main__":
    main(sys.argv)
