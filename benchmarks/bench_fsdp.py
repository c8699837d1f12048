#!/usr/bin/env python
"""gradcomp.fsdp on 2 gloo ranks: the teacher convergence task's student with fully_shard on each
Linear and the root, trained as `bench converge` trains (SGD lr 0.04, momentum 0.9, 64 examples
per rank per step, test accuracy every 20 steps, at most 600 steps) with FSDP's own
reduce-scatter and with each method; prints steps to the target, final accuracy, the
compression ratio (raw / wire) from the telemetry and the median step time, as a Markdown table.

    PYTHONPATH=. python benchmarks/bench_fsdp.py
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import gradcomp.fsdp  # noqa: E402
from gradcomp.evaluation.workloads.tasks import teacher  # noqa: E402

CASES = [("fsdp", None, {}), ("none", "none", {}), ("bf16", "bf16", {}), ("fp16", "fp16", {}),
         ("int8", "int8", {}), ("int4", "int4", {}), ("int4+EF", "int4", {"error_feedback": True}),
         ("topk 0.1+EF", "topk", {"ratio": 0.1, "error_feedback": True}),
         ("randomk 0.1+EF", "randomk", {"ratio": 0.1, "error_feedback": True})]


def student():
    model = teacher().model  # weights from seed 0
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model


def run_case(rank, method, options, task, target, max_steps=600, every=20):
    model = student()
    state = gradcomp.fsdp.register(model, method, **options) if method else None
    opt = torch.optim.SGD(model.parameters(), lr=0.04, momentum=0.9)
    accuracy, steps, times = 0.0, 0, []
    while steps < max_steps and accuracy < target:
        x, y = task.batches(rank, steps)
        start = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - start)
        steps += 1
        if steps % every == 0:
            accuracy = task.scores(model)["accuracy"]
    ratio = state.compression_ratio() if state else 1.0
    return steps, accuracy, ratio, statistics.median(times) * 1e3


def worker(rank, store):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    task = teacher()
    target = task.target
    rows = [(name, *run_case(rank, method, opts, task, target)) for name, method, opts in CASES]
    if rank == 0:
        print(f"teacher task, target {target}, 2 gloo ranks, torch {torch.__version__}")
        print("| reduce-scatter | steps to target | test accuracy | bytes / fp32 | ms per step |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, steps, acc, ratio, ms in rows:
            print(f"| {name} | {steps} | {acc:.3f} | {ratio:.3f} | {ms:.1f} |")
    dist.destroy_process_group()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(os.path.join(tmp, "store"),), nprocs=2)
