"""The FSDP training benchmark: end-to-end iteration time of a workload (a built-in name,
MODULE:FACTORY or FILE.py:FACTORY; see `workloads`) with `fully_shard` on each Linear and the
root, across local worker processes, with FSDP's own reduce-scatter (method "fsdp") or
gradcomp's compressed one (`gradcomp.fsdp.register`).

An iteration is zero_grad, forward, loss, backward and the optimizer step (SGD, lr 0.01,
momentum 0.9) on the workload's batch for that rank and step, timed with the device
synchronised around it; its time is the slowest rank's. After `warmup` iterations,
`iterations` are timed. One row per method, appended as measured (rank 0): parallelism
("fsdp"), method, options (JSON), model, params, batch_size, workers, bandwidth_bps (as
given), warmup, iterations, t_iter_s (median), t_iter_spread_s, and from the telemetry per
timed iteration (summed over FSDP modules, mean over iterations and ranks) bytes_original,
bytes_sent, ratio, encode_s, comm_s, decode_s ("fsdp": the reduce-scatter's bytes, times
NaN); then the environment columns.

`gradcomp bench train --parallelism fsdp` runs it (spawned: `bench_train_fsdp(world_size=2)`).
In a testbed or under torchrun (``-m gradcomp.evaluation.benches.train_fsdp --out runs.csv``)
every rank joins the launcher's group and rank 0 writes the table.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile

import pandas as pd
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

from ... import fsdp
from ...checks import check_int
from ...compressors import compressor
from ..common.env import (check_backend, environment, launch, local_device, under_torchrun,
                          workers)
from ..common.store import ResultTable
from ..common.timing import Clock
from ..common.units import parse_rate
from ..workloads.load import describe, load_workload
from .train import pending_runs

KEY_COLUMNS = ("parallelism", "method", "options", "model", "batch_size", "world_size",
               "backend", "device_name")
TELEMETRY = ("bytes_original", "bytes_sent", "encode_s", "comm_s", "decode_s")
DEFAULT_METHODS = ("fsdp", "bf16", "int8", "int4")


def _options_text(name: str, options: dict) -> str:
    if name == "fsdp":
        if options:
            raise ValueError(f"method 'fsdp' (FSDP's own reduce-scatter) takes no options, got "
                             f"{options}")
        return "{}"
    if name not in fsdp.METHODS:
        raise ValueError(f"method={name!r} is not allowed: choose one of 'fsdp', "
                         f"{', '.join(map(repr, fsdp.METHODS))}")
    return json.dumps(compressor(name, **options).options(), sort_keys=True)


def shard_model(model: nn.Module) -> nn.Module:
    """`model` with `fully_shard` applied to each of its Linears (not itself), then to it."""
    for layer in list(model.modules())[1:]:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model


def unit_sizes(model: nn.Module) -> list[int]:
    """Parameters per FSDP module as the bench shards `model` (each Linear, then the root with
    the rest), in backward order (the Linears in reverse module order, then the root, when it
    holds any): the FSDP timeline's units (`model.fsdp.predict_fsdp`)."""
    linears = [sum(p.numel() for p in m.parameters())
               for m in list(model.modules())[1:] if isinstance(m, nn.Linear)]
    rest = sum(p.numel() for p in model.parameters()) - sum(linears)
    return linears[::-1] + ([rest] if rest else [])


def _run_method(name: str, options: dict, spec: dict, device) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    workload = load_workload(spec["model"], batch_size=spec["batch_size"])
    model = workload.model.to(device)
    params = sum(p.numel() for p in model.parameters())
    model = shard_model(model)
    state = None if name == "fsdp" else fsdp.register(model, name, **options)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    clock, times = Clock(device), []
    for i in range(spec["warmup"] + spec["iterations"]):
        inputs, targets = workload.batch(rank, i, device)
        clock.sync()
        start = clock.mark()
        opt.zero_grad(set_to_none=True)
        workload.loss(model(inputs), targets).backward()
        opt.step()
        end = clock.mark()
        clock.sync()
        if i >= spec["warmup"]:
            times.append(clock.seconds(start, end))
    times = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    if state is None:
        rs_bytes = 4 * params * (world - 1) / world  # fp32, padding aside
        tele = dict(zip(TELEMETRY, (rs_bytes, rs_bytes, math.nan, math.nan, math.nan)))
    else:
        rows = [r for r in state.telemetry_rows() if r["iteration"] >= spec["warmup"]]
        sums = torch.tensor([sum(r[c] for r in rows) / spec["iterations"] for c in TELEMETRY],
                            dtype=torch.float64, device=device)
        dist.all_reduce(sums)
        tele = dict(zip(TELEMETRY, (sums / world).tolist()))
    t_iter = times.median().item()
    return {"parallelism": "fsdp", "method": name, "options": _options_text(name, options),
            "model": spec["model"], "params": params, "batch_size": spec["batch_size"],
            "workers": world, "bandwidth_bps": spec["bandwidth_bps"],
            "warmup": spec["warmup"], "iterations": spec["iterations"], "t_iter_s": t_iter,
            "t_iter_spread_s": (times.max() - times.min()).item(), **tele,
            "ratio": tele["bytes_original"] / tele["bytes_sent"], "device": device.type}


def run_fsdp_methods(cases, spec: dict, table: ResultTable, backend: str) -> None:
    """On every rank of an initialised group: each (method, options) of `cases`; rank 0
    appends its row to `table` as soon as it is measured."""
    device = local_device(backend)
    for name, options in cases:
        row = _run_method(name, options, spec, device)
        if dist.get_rank() == 0:
            table.append({**row, **environment(backend, dist.get_world_size(), device)})


def make_spec(model: str = "mlp", batch_size: int | None = None, warmup: int = 2,
              iterations: int = 10, bandwidth_bps=None) -> dict:
    """The checked settings of an FSDP training sweep (ValueError naming a bad option)."""
    _, batch_size = describe(model, "model", batch_size)  # a bad workload fails here
    return {"model": model, "batch_size": batch_size,
            "warmup": check_int(warmup, "warmup", 1),
            "iterations": check_int(iterations, "iterations", 1),
            "bandwidth_bps": math.nan if bandwidth_bps is None
            else parse_rate(bandwidth_bps, "bandwidth_bps")}


def plan_runs(methods, spec: dict, world_size: int, backend: str, device_name: str,
              table: ResultTable) -> dict:
    """{key in `table`: (name, options)} for every requested run."""
    methods = DEFAULT_METHODS if methods is None else methods
    plan = {}
    for m in [methods] if isinstance(methods, str) else methods:
        name, options = (m, {}) if isinstance(m, str) else (m[0], dict(m[1]))
        key = {"parallelism": "fsdp", "method": name, "options": _options_text(name, options),
               "model": spec["model"], "batch_size": spec["batch_size"],
               "world_size": world_size, "backend": backend, "device_name": device_name}
        plan[table.key(key)] = (name, options)
    return plan


def bench_train_fsdp(methods=None, world_size: int | None = None, backend: str | None = None,
                     model: str = "mlp", batch_size: int | None = None, warmup: int = 2,
                     iterations: int = 10, bandwidth_bps=None, out=None) -> pd.DataFrame:
    """Time FSDP training of the workload `model` with each of `methods` (default
    `DEFAULT_METHODS`; names or (name, options) pairs: "fsdp" or a `gradcomp.fsdp` method)
    across `world_size` local processes (None: 2) spawned once, or on the processes of a
    launcher (torchrun, a testbed). Rows already in `out` (a path or ResultTable) are
    skipped. Returns this sweep's rows."""
    world_size = workers(world_size)
    backend = check_backend(backend, world_size)
    spec = make_spec(model, batch_size, warmup, iterations, bandwidth_bps)
    with tempfile.TemporaryDirectory() as tmp:
        table, plan, todo = pending_runs(out, KEY_COLUMNS, tmp, plan_runs, methods, spec,
                                         world_size, backend)
        if todo or under_torchrun():
            launch(run_fsdp_methods, world_size, backend, todo, spec, table, backend)
        return table.frame(keys=set(plan))


def main(argv=None) -> int:
    """Under a launcher: every rank trains, rank 0 appends to --out."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--out", required=True, help="result table (.csv or .parquet)")
    args.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                      help="comma-separated: fsdp or gradcomp.fsdp methods")
    args.add_argument("--backend", choices=("gloo", "nccl"), default=None)
    args.add_argument("--model", default="mlp", help="a built-in workload or MODULE:FACTORY")
    args.add_argument("--batch-size", type=int, default=None)
    args.add_argument("--warmup", type=int, default=2)
    args.add_argument("--iterations", type=int, default=10)
    args.add_argument("--bandwidth", default=None, help="link rate to record, e.g. 10gbit")
    a = args.parse_args(argv)
    bench_train_fsdp(a.methods.split(","), None, a.backend, a.model, a.batch_size, a.warmup,
                     a.iterations, a.bandwidth, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
