"""The training benchmark: end-to-end DDP iteration time of a workload (`workloads`: a built-in
or the user's ``MODULE:FACTORY``) with each method's hook, across worker processes (gloo on
CPU; NCCL with one GPU per process), and the same workload's single-process iteration time, so
that SF = t_iter_single / t_iter follows.

Built-in models: ``mlp`` (1024 inputs, 4 hidden layers of 1024, 10 classes: 4.2M
parameters), ``tiny`` (32-64-64-10, for tests), ``cnn`` (a small ResNet) and ``gpt`` (a small
GPT), or any workload; trained with the workload's loss and SGD (lr 0.01, momentum 0.9) on
rank r's batch of step 0 (`batches(r, 0)`), the same every iteration, so that the data is not
timed. `model_profile` measures the matching profile (under DDP:
`measure.measure_ddp_profile`) for the performance model. `autocast` "bf16" runs forward
and loss under bf16 autocast; `bucket_cap_mb` goes to DDP: both change what the hook sees.

An iteration is zero_grad, forward, loss, backward and the optimizer step, timed with the
device synchronised around it; its time is the slowest rank's. After `warmup` iterations
(`auto`: plus its exploration, `settled_by`, so that its timed iterations are its steady state),
at least `iterations` are timed and, with a time budget `min_timed_s`, at least that many
seconds: rank 0 estimates an iteration's time from the warm-up's last iterations and every
rank takes its count, n = max(iterations, ceil(min_timed_s / estimate)), in one broadcast
before the timed window (`agreed_iterations`). A median of 20 iterations spread 17-56 ms on
82-133 ms varies by about 3.5% (the testbed's, 2026-11-28): fast runs need more of them,
slow ones (1.4 s) no more. One row per method, appended as measured (rank 0):

* method ("ddp": DDP's own all-reduce, no hook; else a gradcomp method through
  `gradcomp.comm.register`), options (the compressor's options as JSON, with the hook's),
  model (the workload as named), params, batch_size (per worker: as given, else the leading
  dimension of the workload's inputs), bucket_cap_mb, autocast, workers (= world_size),
  bandwidth_bps (as given; NaN when unknown), warmup, iterations (the timed ones, as
  many as the budget took), min_timed_s (the budget; 0: none), device, repeat (which
  measurement of the same run, part of the key: 0, or as given; `gradcomp validate` measures
  each run several times; a table written before the column reads as 0);
* t_iter_s (median), t_iter_spread_s (max - min), t_iter_single_s (median single-process
  iteration on rank 0 while the others wait, same threads per process), scaling_factor
  (t_iter_single_s / t_iter_s);
* from the hook's telemetry, per timed iteration (summed over buckets, mean over iterations
  and ranks): bytes_original, bytes_sent, ratio, encode_s, comm_s, decode_s, buckets ("ddp":
  the gradient's bytes, times and buckets NaN);
* "auto" only: auto_choices, the candidate carrying each bucket at the end and the iteration
  since which it has (`AutoState.choices_text`); auto_decision, what its last decision rested
  on (`decision_text`: each candidate's price and its confirmation rounds' iteration times);
  auto_switches, the switches it made while timed ("iteration bucket candidate; ...");
* the environment columns (world_size, backend, device_name, ...).

Spawned: `bench_train(world_size=2)`. Under torchrun (``torchrun ... -m gradcomp.cli bench
train ...``, or ``-m gradcomp.evaluation.benches.train --out runs.csv``) every rank joins
torchrun's group and rank 0 writes the table.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from ... import comm, diloco
from ...checks import check_choice, check_int, check_number
from ...compressors import compressor
from ..common.env import (barrier, check_backend, environment, launch, local_device,
                          under_torchrun, workers)
from ..common.store import ResultTable, as_table
from ..common.timing import Clock
from ..common.units import parse_rate
from ..model.methods import parse_methods
from ..profiles.measure import measure_ddp_profile, profile_workload
from ..profiles.profiles import Profile, save_profile
from ..workloads.contract import AUTOCAST, autocast
from ..workloads.load import describe, load_workload
from .compress import method_cases
from .hookpath import (bench_hook_path, gradient_source, hook_methods, hook_path_pending,
                       hook_sizes, quarter_sizes, workload_gradient)

KEY_COLUMNS = ("method", "options", "model", "batch_size", "bucket_cap_mb", "autocast",
               "world_size", "backend", "device_name", "repeat")
#: Key columns added later, and what rows stored before them read as (`train_table`).
DEFAULTS = {"repeat": 0}
HOOK_OPTIONS = ("start_iter", "min_compression_rate", "hierarchical", "gpus_per_node", "intra")
TELEMETRY = ("bytes_original", "bytes_sent", "encode_s", "comm_s", "decode_s")
#: Warm-up iterations, the last ones (never the first: DDP builds its buckets then), whose
#: median estimates an iteration's time for the time budget (`agreed_iterations`).
ESTIMATE_FROM = 3


def train_table(path) -> ResultTable:
    """The training table at `path`, keyed by `KEY_COLUMNS` (older tables: `DEFAULTS`)."""
    return ResultTable(path, KEY_COLUMNS, DEFAULTS)


def model_profile(name: str = "mlp", batch_size: int | None = 64, device="cpu",
                  repeats: int = 10, warmup: int = 3, autocast: str = "none",
                  ddp_bucket_cap_mb: float | None = None) -> Profile:
    """The profile of workload `name`'s iteration, measured on `device`; with
    `ddp_bucket_cap_mb`, as DDP runs it (`measure_ddp_profile`, on rank 0's batch: call it
    on every rank at once)."""
    label = f"{name} (batch {batch_size})" if batch_size is not None else name
    if ddp_bucket_cap_mb is None:
        return profile_workload(name, device, repeats, warmup, label, batch_size, autocast)
    workload = load_workload(name, "model", batch_size=batch_size)
    inputs, targets = workload.batch(0, 0, device)
    return measure_ddp_profile(workload.model.to(device), (inputs,),
                               lambda out: workload.loss(out, targets), ddp_bucket_cap_mb,
                               repeats, warmup, label, autocast)


def _options_text(name: str, options: dict) -> str:
    if name == "ddp":
        if options:
            raise ValueError(f"method 'ddp' (DDP without a hook) takes no options, got {options}")
        return "{}"
    if name == "auto":  # auto's choices: the row's auto_choices column
        return json.dumps(comm.auto.settings_of(options), sort_keys=True)
    if name == diloco.NAME:
        return diloco.Variant.from_options(_variant_options(options),
                                           options.get("error_feedback")).options_text()
    hook = {k: v for k, v in options.items() if k in HOOK_OPTIONS}
    built = compressor(name, **{k: v for k, v in options.items() if k not in HOOK_OPTIONS})
    return json.dumps({**built.options(), **hook}, sort_keys=True)


def _variant_options(options: dict) -> dict:
    return {k: v for k, v in options.items() if k != "error_feedback"}


def budgeted_iterations(iteration_s: float, iterations: int, min_timed_s: float) -> int:
    """Iterations to time: at least `iterations` and, at `iteration_s` seconds each, at least
    `min_timed_s` seconds (0: no budget)."""
    if min_timed_s == 0:
        return iterations
    return max(iterations, math.ceil(min_timed_s / iteration_s))


def agreed_iterations(warmup_s: list[float], iterations: int, min_timed_s: float,
                      device) -> int:
    """`budgeted_iterations` at rank 0's estimate (the median of the last `ESTIMATE_FROM` of
    `warmup_s`, its warm-up iterations' seconds after the first), the same on every rank: one
    broadcast (none without a budget)."""
    if min_timed_s == 0:
        return iterations
    estimate = statistics.median(warmup_s[-ESTIMATE_FROM:])
    count = torch.tensor([budgeted_iterations(estimate, iterations, min_timed_s)],
                         dtype=torch.int64, device=device)
    dist.broadcast(count, 0)
    return int(count.item())


def timing_args(spec: dict) -> list[str]:
    """The options of this module's command line (`main`) that time runs as `spec`
    (`make_spec`) says: --iterations and --min-timed-seconds."""
    return ["--iterations", str(spec["iterations"]),
            "--min-timed-seconds", repr(spec["min_timed_s"])]


def sgd(model) -> torch.optim.SGD:
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def _time_iterations(model, workload, batch, spec: dict, device, opt=None, around=None,
                     budget: bool = True) -> tuple[list[float], int]:
    """(seconds of each timed iteration of `opt` (None: `sgd`), their number): with `budget`
    as many as every rank agrees on after the warm-up (`agreed_iterations`), else
    ``spec["iterations"]``. With `around` (a `DiLoCo` over `opt`) inside it, the warm-up and
    the timed iterations, whole syncs (a multiple of H), each as one window (the device
    synchronised at its ends only, so that exchanges overlap the next steps as they do in
    training): [the timed window's mean]."""
    opt = sgd(model) if opt is None else opt
    clock = Clock(device)

    def timed(iterations: int) -> float:
        return _timed(model, opt, workload, batch, spec, clock, iterations)

    def count(warmup_s: list[float]) -> int:
        return agreed_iterations(warmup_s, spec["iterations"], spec["min_timed_s"],
                                 device) if budget else spec["iterations"]

    if around is None:
        n = count([timed(1) for _ in range(spec["warmup"])][1:])
        return [timed(1) for _ in range(n)], n
    with around:
        every = around.sync_every
        n = -(-count([timed(spec["warmup"])]) // every) * every
        return [timed(n)], n


def _timed(model, opt, workload, batch, spec: dict, clock: Clock, iterations: int) -> float:
    """Mean seconds of `iterations` iterations, the device synchronised before and after."""
    clock.sync()
    start = clock.mark()
    for _ in range(iterations):
        opt.zero_grad(set_to_none=True)
        with autocast(clock.device, spec["autocast"]):
            loss = workload.loss(model(batch[0]), batch[1])
        loss.backward()
        opt.step()
    end = clock.mark()
    clock.sync()
    return clock.seconds(start, end) / iterations


def _telemetry(state, warmup: int, iterations: int, grad_bytes: int, device) -> dict:
    """Per-iteration sums over buckets, mean over the timed iterations and the ranks."""
    if state is None:
        nan = math.nan
        return {"bytes_original": grad_bytes, "bytes_sent": grad_bytes, "encode_s": nan,
                "comm_s": nan, "decode_s": nan, "buckets": nan}
    rows = [r for r in state.telemetry_rows() if r["iteration"] >= warmup]
    sums = [sum(r[c] for r in rows) / iterations for c in TELEMETRY] + [len(rows) / iterations]
    total = torch.tensor(sums, dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return dict(zip((*TELEMETRY, "buckets"), (total / dist.get_world_size()).tolist()))


def _build(spec: dict, rank: int, device):
    """The workload of `spec` with its model on `device`, and rank `rank`'s batch."""
    workload = load_workload(spec["model"], "model", batch_size=spec["batch_size"])
    workload.model.to(device)
    return workload, workload.batch(rank, 0, device)


def _run_method(name, options, spec: dict, device) -> dict:
    rank = dist.get_rank()
    workload, batch = _build(spec, rank, device)
    model = workload.model
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if name == diloco.NAME:  # no DDP: DiLoCo around the SGD; one sync per H iterations
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.data, 0)
        variant = diloco.Variant.from_options(_variant_options(options),
                                              options.get("error_feedback"))
        opt = sgd(model)
        trainer = variant.build(model, opt)
        seconds, n = _time_iterations(model, workload, batch, spec, device, opt, trainer)
        state = trainer.state
    else:
        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                      else None, bucket_cap_mb=spec["bucket_cap_mb"])
        state = None if name == "ddp" else comm.register(ddp, name, **options)
        if name == "auto":  # timed in its steady state: its exploration untimed
            spec = {**spec, "warmup": spec["warmup"] + state.settled_by}
        seconds, n = _time_iterations(ddp, workload, batch, spec, device)
    times = torch.tensor(seconds, dtype=torch.float64, device=device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    tele = _telemetry(state, spec["warmup"], n, grad_bytes, device)
    # DiLoCo: the mean over whole syncs (the median would leave the sync steps out)
    t_iter = (times.mean() if name == diloco.NAME else times.median()).item()
    return {"method": name, "options": _options_text(name, options), "model": spec["model"],
            "params": sum(p.numel() for p in model.parameters()),
            "batch_size": spec["batch_size"], "bucket_cap_mb": spec["bucket_cap_mb"],
            "autocast": spec["autocast"], "workers": dist.get_world_size(),
            "bandwidth_bps": spec["bandwidth_bps"],
            "warmup": spec["warmup"], "iterations": n, "min_timed_s": spec["min_timed_s"],
            "repeat": spec["repeat"], "t_iter_s": t_iter,
            "t_iter_spread_s": (times.max() - times.min()).item(),
            "t_iter_single_s": spec["t_iter_single_s"],
            "scaling_factor": spec["t_iter_single_s"] / t_iter, **tele,
            "ratio": tele["bytes_original"] / tele["bytes_sent"], "device": device.type,
            **(_auto_columns(state, spec["warmup"]) if name == "auto" else {})}


def _auto_columns(state, warmup: int) -> dict:
    """`auto`'s choices at the end, what its decision rested on, and the switches it made
    in the timed iterations (from `warmup` on): "iteration bucket candidate; ..."."""
    timed = [f"{i} {b} {c}" for i, b, c in state.switches if i >= warmup]
    return {"auto_choices": state.choices_text(), "auto_decision": state.decision_text(),
            "auto_switches": "; ".join(timed)}


def run_methods(cases, spec: dict, table: ResultTable, backend: str, profile_out=None,
                progress: bool = False, hook_out=None, hook_cases=(),
                hook_repeats: int = 5) -> None:
    """On every rank: the single-process baseline (rank 0, ``spec["iterations"]`` timed: no
    budget, the others wait), the profile as DDP runs it
    (`model_profile` under DDP on every rank at once; rank 0 saves it to `profile_out`, when
    given), the hook path of `hook_cases` at the workload's bucket sizes (every rank at
    once, median of `hook_repeats`; rank 0 appends to `hook_out`, when given), then each
    (method, options) of `cases`; rank 0 appends."""
    device = local_device(backend)
    rank = dist.get_rank()
    single = [math.nan]
    if rank == 0:
        workload, batch = _build(spec, 0, device)
        single = [statistics.median(_time_iterations(workload.model, workload, batch, spec,
                                                     device, budget=False)[0])]
    barrier(device)
    if profile_out is not None:
        profile = model_profile(spec["model"], spec["batch_size"], device,
                                autocast=spec["autocast"],
                                ddp_bucket_cap_mb=spec["bucket_cap_mb"])
        if rank == 0:
            save_profile(profile, profile_out)
    if hook_out is not None:
        barrier(device)
        gradient = workload_gradient(spec["model"], spec["batch_size"], spec["bucket_cap_mb"],
                                     rank)
        bench_hook_path(hook_cases, quarter_sizes(gradient.values.numel()),
                        dist.get_world_size(), device, repeats=hook_repeats, warmup=1,
                        out=hook_out if rank == 0 else None, slowest_rank=True,
                        gradient=gradient)
    dist.broadcast_object_list(single, src=0)
    spec = {**spec, "t_iter_single_s": single[0]}
    for name, options in tqdm(cases, desc="train bench", file=sys.stderr,
                              disable=not progress or rank != 0):
        row = _run_method(name, options, spec, device)
        if rank == 0:
            table.append({**row, **environment(backend, dist.get_world_size(), device)})


def pending_runs(out, key_columns, tmp: str, plan_of, methods, spec: dict, world_size: int,
                 backend: str):
    """(table, plan, todo) of a training sweep: `out`'s table (or one in the folder `tmp`),
    `plan_of(methods, spec, world_size, backend, device_name, table)` and its runs not yet
    in the table."""
    table = as_table(out, key_columns) or ResultTable(os.path.join(tmp, "rows.csv"),
                                                      key_columns)
    device_name = environment(device="cuda:0" if backend == "nccl" else "cpu")["device_name"]
    plan = plan_of(methods, spec, world_size, backend, device_name, table)
    done = table.done_keys()
    return table, plan, [case for key, case in plan.items() if key not in done]


def plan_runs(methods, spec: dict, world_size: int, backend: str, device_name: str, table):
    """{key in `table`: (name, options)} for every requested run of `methods` (as
    `bench_train` takes them) with `spec` (`make_spec`)."""
    cases = [("ddp", {}), *method_cases(None)] if methods is None else method_cases(methods)
    plan = {}
    for name, options in cases:
        key = {"method": name, "options": _options_text(name, options),
               "model": spec["model"], "batch_size": spec["batch_size"],
               "bucket_cap_mb": spec["bucket_cap_mb"], "autocast": spec["autocast"],
               "world_size": world_size,
               "backend": backend, "device_name": device_name, "repeat": spec["repeat"]}
        plan[table.key(key)] = (name, options)
    return plan


def make_spec(model, batch_size, warmup, iterations, bucket_cap_mb, bandwidth_bps,
              autocast: str = "none", repeat: int = 0, min_timed_s: float = 0.0) -> dict:
    """The checked settings of a training sweep (ValueError naming a bad option); builds the
    workload once to check it and to learn its batch size. `repeat`: which measurement of
    the same runs this is (0: the first); `min_timed_s`: the time budget (seconds each run
    times at least, besides `iterations`; 0: none)."""
    check_int(warmup, "warmup", 2)  # DDP rebuilds its buckets after the first iteration
    check_int(iterations, "iterations", 1)
    check_int(repeat, "repeat", 0)
    min_timed_s = check_number(min_timed_s, "min_timed_s", minimum=0)
    if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) \
            or not bucket_cap_mb > 0:
        raise ValueError(f"bucket_cap_mb={bucket_cap_mb!r} is not allowed: it must be > 0")
    check_choice(autocast, "autocast", AUTOCAST)
    _, batch_size = describe(model, "model", batch_size)
    return {"model": model, "batch_size": batch_size,
            "warmup": warmup, "iterations": iterations, "bucket_cap_mb": float(bucket_cap_mb),
            "autocast": autocast, "bandwidth_bps": math.nan if bandwidth_bps is None
            else parse_rate(bandwidth_bps, "bandwidth_bps"), "repeat": repeat,
            "min_timed_s": min_timed_s}


def bench_train(methods=None, world_size: int | None = None, backend: str | None = None,
                model: str = "mlp", batch_size: int | None = None, warmup: int = 3,
                iterations: int = 10, bucket_cap_mb: float = 25.0, bandwidth_bps=None,
                out=None, profile_out=None, progress: bool = False,
                autocast: str = "none", hook_out=None, hook_repeats: int = 5,
                repeat: int = 0, min_timed_s: float = 0.0) -> pd.DataFrame:
    """Time DDP training of workload `model` (a built-in name, MODULE:FACTORY or
    path/to/file.py:FACTORY; `batch_size` None: the factory's own) with each of `methods`
    (default: "ddp", then every registered method with its defaults; else names and (name,
    options) pairs, options going to `gradcomp.comm.register`) across `world_size` local
    processes (None: 2) that it spawns once for all methods, or, under torchrun, on its
    processes. Rows already in `out` (a path or ResultTable) are skipped; `profile_out`: save
    the workload's measured profile there (one already there is kept, not measured again);
    `hook_out`: append the hook-path costs of the methods (`benches.hookpath`, at the
    workload's bucket sizes, median of `hook_repeats`) there; `repeat`: the rows' repeat
    (the same runs measured again are new rows); `min_timed_s`: each run times at least
    `iterations` and at least this many seconds (module docstring; 0: `iterations` only).
    Returns this sweep's rows."""
    world_size = workers(world_size)
    backend = check_backend(backend, world_size)
    check_int(hook_repeats, "hook_repeats", 1)
    spec = make_spec(model, batch_size, warmup, iterations, bucket_cap_mb, bandwidth_bps,
                     autocast, repeat, min_timed_s)
    with tempfile.TemporaryDirectory() as tmp:
        table, plan, todo = pending_runs(as_table(out, KEY_COLUMNS, DEFAULTS), KEY_COLUMNS, tmp,
                                         plan_runs, methods, spec, world_size, backend)
        hooks = hook_methods(plan.values())
        hooks_todo = hook_out is not None and hook_path_pending(
            hook_out, hooks, hook_sizes(model, spec["batch_size"], spec["bucket_cap_mb"]),
            world_size, "cuda:0" if backend == "nccl" else "cpu",
            gradient_source(model, spec["batch_size"], spec["bucket_cap_mb"]))
        profile_todo = profile_out is not None and not Path(profile_out).exists()
        if todo or hooks_todo or profile_todo or under_torchrun():
            launch(run_methods, world_size, backend, todo, spec, table, backend,
                   profile_out if profile_todo else None, progress,
                   hook_out if hooks_todo else None, hooks, hook_repeats)
        return table.frame(keys=set(plan))


def main(argv=None) -> int:
    """Under torchrun: every rank trains, rank 0 appends to --out."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--out", required=True, help="result table (.csv or .parquet)")
    args.add_argument("--methods", default=None,
                      help="comma-separated methods, each with options as name:key=value,... "
                      "(DiLoCo: diloco:H=50,method=int8; default: ddp and every registered "
                      "one)")
    args.add_argument("--backend", choices=("gloo", "nccl"), default=None)
    args.add_argument("--model", default="mlp", help="a built-in workload or MODULE:FACTORY")
    args.add_argument("--batch-size", type=int, default=None)
    args.add_argument("--warmup", type=int, default=3)
    args.add_argument("--iterations", type=int, default=10)
    args.add_argument("--min-timed-seconds", type=float, default=0.0,
                      help="time budget: each run times at least this many seconds too")
    args.add_argument("--bucket-cap-mb", type=float, default=25.0)
    args.add_argument("--autocast", choices=AUTOCAST, default="none")
    args.add_argument("--bandwidth", default=None, help="link rate to record, e.g. 10gbit")
    args.add_argument("--profile-out", default=None, help="save the model's profile here")
    args.add_argument("--hook-out", default=None, help="append the hooks' per-bucket costs")
    args.add_argument("--repeat", type=int, default=0, help="the rows' repeat: which "
                      "measurement of the same runs this is (default 0)")
    args.add_argument("--hook-options", default=None, help="JSON options for every hooked "
                      "method, e.g. '{\"hierarchical\": true, \"gpus_per_node\": 2}'")
    a = args.parse_args(argv)
    extra = json.loads(a.hook_options) if a.hook_options else {}
    methods = None if a.methods is None else [  # the hook options to every hooked method
        (m, o if m in ("ddp", diloco.NAME) else {**o, **extra})
        for m, o in parse_methods(a.methods, "methods")]
    bench_train(methods, None, a.backend, a.model,
                a.batch_size, a.warmup, a.iterations, a.bucket_cap_mb, a.bandwidth, a.out,
                a.profile_out, progress=True, autocast=a.autocast, hook_out=a.hook_out,
                repeat=a.repeat, min_timed_s=a.min_timed_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
