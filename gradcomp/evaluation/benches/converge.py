"""The convergence benchmark: train a task (a workload, `workloads`: the built-in ``teacher``,
``digits``, ``cnn``, ``gpt``, or the user's ``MODULE:FACTORY``) with DDP across workers, once
per (method, options, error feedback, seed), until its metric reaches the target or the
iteration budget runs out, and record the curve, the iterations to target, the final quality
and the bytes the hook sent.

Training: the workload built for the seed (its factory is called with ``seed`` and
``batch_size`` where it names them, after ``torch.manual_seed(seed)``; DDP gives every rank
rank 0's initial weights), SGD (lr: the workload's, else 0.04; momentum 0.9) with the same
hyperparameters for every method, tuned for uncompressed training (signSGD's unit-size output
makes that step large). Rank r trains on `batches(r, step)`. Every `eval_every` iterations
rank 0 evaluates the workload (`evaluate`: test loss and/or accuracy); the ranks average their
training loss over those iterations. The metric is the workload's (`metric`) unless given;
a workload without `evaluate` is judged by that averaged training loss. A run stops at the
target (`stop_at_target`), at the budget, or when a loss is no longer finite (diverged).
Spawned on `world_size` local processes (NCCL with a GPU each, else gloo), or under torchrun
on its processes, rank 0 writing the tables.

Error feedback: every method runs without and with it (`error_feedback` column), except
`none`, for which the residual is always zero (only without), and `auto`, whose candidates
carry their own (only without; its row also has auto_choices, as `bench train`'s). PowerSGD
keeps its own residuals (on by default); for it the column is its own `error_feedback` option.

Sizes: `QUICK` (CI: one seed, 200 iterations) and `FULL` (the default: three seeds, 600).

Tables (appended by rank 0 as measured):

* summary (`out`, e.g. ``converge.csv``), one row per run: the key (task, metric, target,
  method, options, error_feedback, seed, max_iters, eval_every, batch_size, lr, momentum,
  world_size, backend, device_name), reached, iterations_to_target (NaN when not reached),
  iterations_run, diverged, final_train_loss, final_test_loss, final_accuracy,
  best_accuracy, params, bytes_original_per_iter, bytes_sent_per_iter (mean over the
  compressed iterations, summed over buckets), bytes_sent_total, ratio, tokens (this rank's:
  the token ids it trained on, or its samples where the inputs are not token ids),
  bytes_sent_per_token, train_wall_s, and the environment columns;
* curve (``<stem>_curve<suffix>`` beside it), one row per evaluation: the key, iteration,
  train_loss, test_loss, test_accuracy, tokens, wall_s (seconds since the run started).

DiLoCo variants (`gradcomp.diloco.Variant`, method ``diloco`` with options such as
``{"H": 50, "method": "int8"}``) run beside the per-step methods: no DDP, rank 0's initial
weights broadcast, the same SGD as the inner optimizer, the variant's outer SGD, and the
evaluation on the global weights (each fragment's as of its last sync); their bytes come
from the outer exchanges' telemetry, so per iteration they are the sync's bytes over H.

A run is finished when its summary row is on disk: a rerun skips it. Curve rows of a run that
was cut off are appended again when it reruns; `load_curves` keeps the last copy.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from ... import comm, diloco
from ...checks import check_int
from ...compressors import compressor, names, option_names
from ..common.env import check_backend, environment, launch, local_device, under_torchrun, workers
from ..common.store import ResultTable, as_table
from ..workloads.contract import METRICS
from ..workloads.load import describe, load_workload
from .compress import method_cases
from .train import HOOK_OPTIONS

CONVERGE, CURVE = "converge.csv", "converge_curve.csv"
KEY_COLUMNS = ("task", "metric", "target", "method", "options", "error_feedback", "seed",
               "max_iters", "eval_every", "batch_size", "lr", "momentum", "world_size",
               "backend", "device_name")
CURVE_KEY = (*KEY_COLUMNS, "iteration")
# The extra case of the default sweep: top-k at 0.1%, aggressive enough to need error feedback.
AGGRESSIVE = ("topk", {"ratio": 0.001})
QUICK = dict(max_iters=200, eval_every=10, seeds=1)
FULL = dict(max_iters=600, eval_every=10, seeds=3)


def curve_path(out) -> Path:
    """Where the curve table of summary table `out` lives."""
    out = Path(out)
    return out.with_name(f"{out.stem}_curve{out.suffix}")


def default_cases() -> list[tuple[str, dict]]:
    """Every registered method with its defaults, and top-k at 0.1% (`AGGRESSIVE`)."""
    return [(name, {}) for name in names()] + [AGGRESSIVE]


def variants(methods=None, error_feedback=(False, True)) -> list[tuple[str, dict, bool]]:
    """(name, options, error_feedback) for each case of `methods` (None: `default_cases`;
    else names and (name, options) pairs) and each error-feedback setting; `none` only
    without."""
    cases = default_cases() if methods is None else method_cases(methods)
    settings = [_check_ef(e) for e in error_feedback]
    if not settings:
        raise ValueError("error_feedback=() is not allowed: give False, True or both")
    return [(name, options, ef) for name, options in cases for ef in settings
            if not (ef and _without_error_feedback(name, options))]


def _without_error_feedback(name: str, options: dict) -> bool:
    """`none` and `auto` (and DiLoCo with method none) run without error feedback only."""
    return name in ("none", "auto") or (name == diloco.NAME
                                         and options.get("method", "none") == "none")


def _check_ef(value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"error_feedback={value!r} is not allowed: each setting must be "
                         "True or False")
    return value


def options_text(name: str, options: dict, error_feedback: bool) -> str:
    """The run's compressor and hook options as JSON (error feedback in its own column);
    bad options raise here, before anything is spawned. "auto": its settings (each
    candidate's error feedback among its options)."""
    if name == "auto":
        return json.dumps(comm.auto.settings_of(options), sort_keys=True)
    if name == diloco.NAME:
        shown = diloco.Variant.from_options(options, error_feedback).options()
        return json.dumps({k: v for k, v in shown.items() if k != "error_feedback"},
                          sort_keys=True)
    hook = {k: v for k, v in options.items() if k in HOOK_OPTIONS}
    rest = {k: v for k, v in options.items() if k not in HOOK_OPTIONS}
    try:
        built = compressor(name, error_feedback=error_feedback, **rest)
    except TypeError as exc:
        raise ValueError(f"methods: {exc}") from None
    shown = {k: v for k, v in built.options().items() if k != "error_feedback"}
    return json.dumps({**shown, **hook}, sort_keys=True)


def compressor_options(name: str, options: str | dict) -> dict:
    """The options (JSON text or a dict) that `gradcomp.compressor(name)` accepts (a DiLoCo
    variant: `Variant.from_options`)."""
    options = json.loads(options) if isinstance(options, str) else dict(options)
    if name == diloco.NAME:  # the variant's options, its method's among them
        return options
    return {k: v for k, v in options.items() if k in option_names(name)}


def _number(value, option: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{option}={value!r} is not allowed: it must be a finite number")
    return float(value)


def make_spec(task: str = "teacher", target=None, metric: str | None = None,
              max_iters: int = 600, eval_every: int = 10, batch_size: int | None = None,
              lr: float | None = None, momentum: float = 0.9,
              stop_at_target: bool = True) -> dict:
    """The checked settings of a sweep (see `bench_converge`); builds the workload once to
    check it and to learn its metric, target, learning rate and batch size."""
    workload, batch_size = describe(task, "task", batch_size)
    metric = workload.metric if metric is None else metric
    if metric not in METRICS:
        raise ValueError(f"metric={metric!r} is not allowed: choose one of "
                         f"{', '.join(map(repr, METRICS))}")
    if metric == "accuracy" and workload.evaluate is None:
        raise ValueError(f"metric='accuracy' is not allowed with task={task!r}: its workload "
                         "has no evaluate; use metric='loss' (the training loss)")
    if target is None:
        if workload.target is None or metric != workload.metric:
            raise ValueError(f"target=None is not allowed with task={task!r} and metric="
                             f"{metric!r}: the workload gives no target for it; give one")
        target = workload.target
    target = _number(target, "target")
    if metric == "accuracy" and not 0 < target <= 1:
        raise ValueError(f"target={target!r} is not allowed: an accuracy target is in (0, 1]")
    if metric == "loss" and not target > 0:
        raise ValueError(f"target={target!r} is not allowed: a loss target is > 0")
    check_int(max_iters, "max_iters", 2)
    check_int(eval_every, "eval_every", 1)
    lr = (workload.lr or 0.04) if lr is None else lr
    if not _number(lr, "lr") > 0:
        raise ValueError(f"lr={lr!r} is not allowed: it must be > 0")
    if not 0 <= _number(momentum, "momentum") < 1:
        raise ValueError(f"momentum={momentum!r} is not allowed: it must be in [0, 1)")
    if not isinstance(stop_at_target, bool):
        raise ValueError(f"stop_at_target={stop_at_target!r} is not allowed: True or False")
    return dict(task=task, metric=metric, target=target, max_iters=max_iters,
                eval_every=eval_every, batch_size=batch_size, lr=float(lr),
                momentum=float(momentum), stop_at_target=stop_at_target)


def _check_seeds(seeds) -> list[int]:
    seeds = list(range(seeds)) if isinstance(seeds, int) and not isinstance(seeds, bool) \
        else list(seeds)
    if not seeds:
        raise ValueError("seeds=[] is not allowed: give at least one seed (or a count >= 1)")
    for s in seeds:
        check_int(s, "seeds", 0)
    return seeds


def reached(metric: str, value: float, target: float) -> bool:
    """Whether a test `value` of `metric` meets `target` (NaN never does)."""
    return value >= target if metric == "accuracy" else value <= target


def _evaluate(model, workload, train_loss: float, device) -> tuple[float, float, float, bool]:
    """(train loss averaged over the ranks, test loss, test accuracy (NaN where the workload's
    evaluate gives none), whether it gave a loss), the same on every rank: rank 0 evaluates,
    one all-reduce shares it."""
    stats = torch.tensor([train_loss, 0.0, 0.0, 0.0], dtype=torch.float64, device=device)
    if dist.get_rank() == 0:
        scores = workload.scores(model)
        stats[1], stats[2] = scores.get("loss", math.nan), scores.get("accuracy", math.nan)
        stats[3] = float("loss" in scores)
    dist.all_reduce(stats)
    return (stats[0].item() / dist.get_world_size(), stats[1].item(), stats[2].item(),
            bool(stats[3].item()))


def _value(spec: dict, stats) -> float:
    """The number the target is about: test accuracy, test loss, or (no test loss) the
    training loss."""
    if spec["metric"] == "accuracy":
        return stats[2]
    return stats[1] if stats[3] else stats[0]


def _bytes(state, iterations: int) -> dict:
    rows = state.telemetry_rows()
    compressed = [r for r in rows if r["iteration"] >= state.start_iter]
    steps = max(1, iterations - state.start_iter)
    sent = sum(r["bytes_sent"] for r in compressed) / steps
    original = sum(r["bytes_original"] for r in compressed) / steps
    return {"bytes_original_per_iter": original, "bytes_sent_per_iter": sent,
            "bytes_sent_total": sum(r["bytes_sent"] for r in rows),
            "ratio": original / sent if sent else math.nan}


def _trainer(name: str, options: dict, ef: bool, model, spec: dict, device):
    """(the module to train, its SGD, the hook or DiLoCo state, the DiLoCo or None): DDP with
    gradcomp's hook, or a DiLoCo variant (the SGD inside, the variant's outer optimizer; rank
    0's initial weights on every rank, as DDP gives them)."""
    if name == diloco.NAME:
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.data, 0)
        opt = torch.optim.SGD(model.parameters(), lr=spec["lr"], momentum=spec["momentum"])
        trainer = diloco.Variant.from_options(options, ef).build(model, opt)
        return model, opt, trainer.state, trainer
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                  else None)
    state = comm.register(ddp, name, **({} if name == "auto" else {"error_feedback": ef}),
                          **options)
    return ddp, torch.optim.SGD(ddp.parameters(), lr=spec["lr"], momentum=spec["momentum"]), \
        state, None


def tokens_in(inputs: torch.Tensor) -> int:
    """Tokens in a batch of token ids (integer inputs), else its samples."""
    return inputs.numel() if not inputs.is_floating_point() else len(inputs)


def _train(case, spec: dict, key: dict, curve: ResultTable, device) -> dict:
    """One run on every rank; rank 0 appends its curve rows. Returns the summary fields."""
    name, options, ef, seed = case
    rank = dist.get_rank()
    workload = load_workload(spec["task"], "task", batch_size=spec["batch_size"], seed=seed)
    model = workload.model.to(device)
    module, opt, state, trainer = _trainer(name, options, ef, model, spec, device)
    at_target, diverged, window, count, tokens = math.nan, False, 0.0, 0, 0
    last = (math.nan, math.nan, math.nan, False)
    best, start, iteration = math.nan, time.perf_counter(), 0
    with trainer if trainer is not None else contextlib.nullcontext():
        for iteration in range(1, spec["max_iters"] + 1):
            inputs, targets = workload.batch(rank, iteration - 1, device)
            opt.zero_grad(set_to_none=True)
            loss = workload.loss(module(inputs), targets)
            loss.backward()
            opt.step()
            window, count, tokens = window + loss.item(), count + 1, tokens + tokens_in(inputs)
            if iteration % spec["eval_every"] and iteration != spec["max_iters"]:
                continue
            with trainer.global_weights() if trainer else contextlib.nullcontext():
                last = _evaluate(model, workload, window / count, device)
            window, count = 0.0, 0
            if rank == 0:
                curve.append({**key, "iteration": iteration, "train_loss": last[0],
                              "test_loss": last[1], "test_accuracy": last[2],
                              "tokens": tokens, "wall_s": time.perf_counter() - start})
            best = last[2] if math.isnan(best) else max(best, last[2])
            if math.isnan(at_target) and reached(spec["metric"], _value(spec, last),
                                                 spec["target"]):
                at_target = iteration
                if spec["stop_at_target"]:
                    break
            if not math.isfinite(last[0]) or (last[3] and not math.isfinite(last[1])):
                diverged = True
                break
    wall = time.perf_counter() - start
    sent = _bytes(state, iteration)
    return {"reached": not math.isnan(at_target), "iterations_to_target": at_target,
            "iterations_run": iteration, "diverged": diverged, "final_train_loss": last[0],
            "final_test_loss": last[1], "final_accuracy": last[2], "best_accuracy": best,
            "params": sum(p.numel() for p in model.parameters()),
            **sent, "tokens": tokens, "bytes_sent_per_token": sent["bytes_sent_total"] / tokens,
            "train_wall_s": wall,
            **({"auto_choices": state.choices_text()} if name == "auto" else {})}


def run_cases(todo, spec: dict, summary: ResultTable, curve: ResultTable, backend: str,
              progress: bool = False) -> None:
    """On every rank: train each (key, (name, options, error_feedback, seed)) of `todo`;
    rank 0 appends the rows."""
    device = local_device(backend)
    rank = dist.get_rank()
    for key, case in tqdm(todo, desc="convergence", file=sys.stderr,
                          disable=not progress or rank != 0):
        row = _train(case, spec, key, curve, device)
        if rank == 0:
            summary.append({**key, **row,
                            **environment(backend, dist.get_world_size(), device)})


def plan(methods, spec: dict, seeds, error_feedback, world_size: int, backend: str,
         device_name: str) -> list[tuple[dict, tuple]]:
    """[(key, (name, options, error_feedback, seed))] of every requested run."""
    runs = []
    for name, options, ef in variants(methods, error_feedback):
        text = options_text(name, options, ef)
        for seed in _check_seeds(seeds):
            key = {"task": spec["task"], "metric": spec["metric"], "target": spec["target"],
                   "method": name, "options": text, "error_feedback": ef, "seed": seed,
                   **{k: spec[k] for k in ("max_iters", "eval_every", "batch_size", "lr",
                                           "momentum")},
                   "world_size": world_size, "backend": backend, "device_name": device_name}
            runs.append((key, (name, options, ef, seed)))
    return runs


def bench_converge(methods=None, task: str = "teacher", target=None, metric: str | None = None,
                   seeds=FULL["seeds"], max_iters: int = FULL["max_iters"],
                   eval_every: int = FULL["eval_every"], batch_size: int | None = None,
                   lr: float | None = None, momentum: float = 0.9,
                   error_feedback=(False, True), stop_at_target: bool = True,
                   world_size: int | None = None, out=None, progress: bool = False,
                   backend: str | None = None) -> pd.DataFrame:
    """Train `task` (a built-in name, MODULE:FACTORY or path/to/file.py:FACTORY) with each
    method (None: `default_cases`; else names and (name, options) pairs) x `error_feedback`
    settings x `seeds` (a count n: seeds 0..n-1, or a list) on `world_size` local workers
    (None: 2), all runs in one spawn (under torchrun: on its processes), until `target` of
    `metric` (accuracy >= target, or loss <= target; defaults: the workload's) or
    `max_iters`. `batch_size` and `lr` None: the workload's. Runs already in `out` (the
    summary table: a path or ResultTable; the curve goes to `curve_path(out)`) are skipped.
    Returns this sweep's summary rows."""
    world_size = workers(world_size)
    backend = check_backend(backend, world_size)
    spec = make_spec(task, target, metric, max_iters, eval_every, batch_size, lr, momentum,
                     stop_at_target)
    with tempfile.TemporaryDirectory() as tmp:
        summary = as_table(out, KEY_COLUMNS) or ResultTable(os.path.join(tmp, CONVERGE),
                                                            KEY_COLUMNS)
        curve = ResultTable(curve_path(summary.path), CURVE_KEY)
        device_name = environment(device="cuda:0" if backend == "nccl" else "cpu")["device_name"]
        runs = plan(methods, spec, seeds, error_feedback, world_size, backend, device_name)
        done = summary.done_keys()
        todo = [(key, case) for key, case in runs if summary.key(key) not in done]
        if todo or under_torchrun():
            launch(run_cases, world_size, backend, todo, spec, summary, curve, backend,
                   progress)
        return summary.frame(keys={summary.key(key) for key, _ in runs})


def load_curves(out) -> pd.DataFrame:
    """The curve rows of the finished runs of summary table `out`, one per (run, iteration):
    the last copy of a repeated row, and none past the run's last iteration."""
    summary = ResultTable(out, KEY_COLUMNS)
    curve = ResultTable(curve_path(out), CURVE_KEY).frame()
    finished = summary.frame()
    if curve.empty or finished.empty:
        return pd.DataFrame()
    keys = list(KEY_COLUMNS)
    curve = curve.drop_duplicates(subset=[*keys, "iteration"], keep="last")
    ends = finished.drop_duplicates(subset=keys, keep="last")[[*keys, "iterations_run"]]
    curve = curve.merge(ends, on=keys, how="inner")
    curve = curve[curve["iteration"] <= curve["iterations_run"]]
    return curve.drop(columns="iterations_run").reset_index(drop=True)
