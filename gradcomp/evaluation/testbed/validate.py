"""Hold the performance model against real training at controlled bandwidths (`gradcomp
validate`): in a `Testbed` of local namespaces, for every rate of a sweep,

1. a collective sweep (all-reduce and all-gather, payloads around the model's buckets, each
   call after `AFTER_COMPUTE_MS` of compute on every worker, as in training) gives alpha and
   beta at that rate (`fit.fit_collectives`; the fitted bandwidth includes what TCP, tbf and
   gloo's reductions cost, alpha what a collective costs right after compute);
2. DDP training of a workload (a built-in model or the user's MODULE:FACTORY) with each
   method's hook gives measured iteration times (`bench_train`, `threads` torch threads per
   worker, each run timing at least `iterations` and `min_timed_s` seconds: `MIN_TIMED_S`),
   `train_repeats` runs each, interleaved (`pooled.pass_order`); each method's least
   disturbed run (least median iteration time: `pooled.least_disturbed_runs`) is used;
3. right after, every worker measures at the same time (as the workers compute side by side
   in training) the model's profile as DDP runs it without communicating
   (`measure_ddp_profile`: DDP's copies into and out of its buckets included) and what each
   method's hook computes per bucket (`benches.hookpath`: encode with error feedback,
   PowerSGD's work between its rounds, decode and aggregation of every rank's payload and the
   write-back; each phase the slowest rank's, as the collective after it waits for that
   rank), over bucket sizes, on the workload's own gradients (`workload_gradient`);
4. the model predicts each iteration from the profile and per-bucket costs
   (`fit.hook_costs`) least disturbed among those measured at the sweep's rates (`pooled`:
   neither depends on the rate), that rate's network (alpha and the fitted bandwidth per
   collective), with DDP's
   buckets as torch forms them, every method's compute slowed by the rate's lambda
   (`slowdown.fit_slowdowns`: fitted to the other rates' ddp and none runs).

The output folder holds every table, appended as measured (an interrupted sweep resumes):
``collective-<rate>.csv``, ``train-<rate>.csv`` (every run, column ``repeat``),
``profile-<model>-b<batch size>-<rate>.json``,
``hook-<rate>.csv``, ``conditions.csv`` (the machine's load average before and after each
rate's measurements: other work disturbs the timings), and the result: ``validation.csv``
(rate, method, measured, predicted, rel_error, ...), ``validation.md`` (the table and error
summary, lambda per rate) and ``validation.png``. Predictions use no value fitted to the
training runs they are held against; nothing is tuned per method.

``auto`` (`gradcomp.comm.auto`, its default candidates) may be among the methods: it has no
prediction of its own (it chooses among methods at run time) and trains in the same jobs as
the fixed methods, its untimed iterations covering its exploration (`benches.train`), so that
its timed ones are its steady state; its candidates run fixed too, with its options
(`regret.with_auto_candidates`: e.g. ``topk(error_feedback=True)`` beside ``topk``, each
method's variant a row of its own). The advice regret (`regret`: the model's pick against the
fastest measured method, and auto's against its fastest candidate) goes to ``regret.csv``,
``auto-regret.csv`` and the Markdown, which compares auto's measured time at each rate with
the fastest other method's and DDP's, and gives its choices (`auto_choices`).
"""
from __future__ import annotations

import math
import os
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import torch

from ...checks import check_int
from ..analyses.cluster_fit import UNCOMPRESSED
from ..benches.collective import AFTER_COMPUTE_MS, collective_key
from ..benches.collective import KEY_COLUMNS as COLLECTIVE_KEYS
from ..benches.converge import tokens_in
from ..benches.hookpath import KEY_COLUMNS as CODEC_KEYS
from ..benches.hookpath import (bench_hook_path, case_keys, gradient_source, hook_methods,
                                hook_sizes, quarter_sizes, workload_gradient)
from ..benches.train import make_spec, timing_args, train_table
from ..common.store import ResultTable, write_atomic
from ..common.units import format_rate, parse_rate
from ..model.bucketing import DDP
from ..model.fit import fit_collectives, network_from_fit
from ..model.methods import parse_methods, resolve
from ..model.timeline import predict
from ..workloads.load import load_workload
from ..common.conditions import conditions_at, record_conditions
from .pooled import (MIN_TIMED_S, Pooled, least_disturbed, least_disturbed_runs, profile_line,
                     repeats_line, timed_line, train_keys, training_passes)
from .regret import auto_comparison, regret_markdown, with_auto_candidates, write_regret
from .slowdown import predict_with_slowdowns, read_once, slowdown_line
from .testbed import Testbed
from .validate_diloco import diloco_markdown, priced, run_label

DEFAULT_RATES = ("100mbit", "500mbit", "1gbit", "2.5gbit")
DEFAULT_METHODS = ("ddp", "none", "fp16", "bf16", "int8", "topk", "randomk", "powersgd",
                   "signsgd")
COLLECTIVE_SIZES = (2**14, 2**16, 2**18, 2**20, 2**22, 2**24)
COLLECTIVE_REPEATS = 10
HOOK_WARMUP, HOOK_REPEATS = 5, 10
#: Training runs per method and rate (`pooled.least_disturbed_runs` keeps the least disturbed).
TRAIN_REPEATS = 2


def hook_warmup(repeats: int, most: int = HOOK_WARMUP) -> int:
    """Untimed calls before `repeats` timed ones of a hook-path cost: as many, at most
    `most` (fewer repeats, a quicker and noisier measurement, warm up less too)."""
    return min(most, repeats)


def rate_tag(rate_bps: float) -> str:
    """A file-name-safe tag of a rate: "100mbit", "2.5gbit"."""
    for scale, unit in ((1e9, "gbit"), (1e6, "mbit"), (1e3, "kbit")):
        if rate_bps >= scale:
            return f"{rate_bps / scale:g}{unit}"
    return f"{rate_bps:g}bit"


def model_collective_sizes(model: str) -> list[int]:
    """The payloads of `COLLECTIVE_SIZES` up to the model's gradient (at least the two
    smallest, which decide the latency)."""
    grad_bytes = 4 * sum(p.numel() for p in load_workload(model).model.parameters())
    return [n for n in COLLECTIVE_SIZES if n <= max(grad_bytes, COLLECTIVE_SIZES[1])]


def check_methods(methods) -> list[str]:
    methods = list(methods)
    if not methods:
        raise ValueError("methods=[] is not allowed: give at least one method")
    for m in methods:
        if m not in ("ddp", "auto"):
            resolve(m)  # unknown names raise ValueError naming the registered methods
    return methods


def planned_keys(methods, spec: dict, workers: int, collective_sizes,
                 train_repeats: int = 1) -> dict[str, set]:
    """The table keys (as stored) a rate's measurements of `methods` need, per table:
    "collective", "train" (`train_repeats` runs of each method: `train_keys`) and "hook"
    (`spec` from `benches.train.make_spec`)."""
    methods = [parse_methods(m)[0] for m in methods]  # diloco:H=10,method=int8 with options
    sizes = hook_sizes(spec["model"], spec["batch_size"], spec["bucket_cap_mb"])
    coll = ResultTable("collective.csv", COLLECTIVE_KEYS)
    codec = ResultTable("hook.csv", CODEC_KEYS)
    return {"collective": {collective_key(coll, c, n, workers, "gloo", "cpu")
                           for c in ("allreduce", "allgather") for n in collective_sizes},
            "train": set(train_keys(methods, spec, workers, train_repeats).values()),
            "hook": {codec.key(k) for m, o in hook_methods(methods)
                     for k in case_keys(m, o, sizes, workers, "cpu", torch.float32, "cpu",
                                        gradient_source(spec["model"], spec["batch_size"],
                                                        spec["bucket_cap_mb"]))}}


def profile_path(out: Path, rate_bps: float | None, model: str, batch_size: int) -> Path:
    """Where a rate's profile of `model` at `batch_size` is kept (`rate_bps` None: the
    profile of every rate, measured once)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", model)  # a MODULE:FACTORY or a file path
    tag = "" if rate_bps is None else f"-{rate_tag(rate_bps)}"
    return out / f"profile-{name}-b{batch_size}{tag}.json"


def batch_args(batch_size: int | None) -> list[str]:
    """--batch-size for the sub-jobs, when one was given (else the factory's own)."""
    return [] if batch_size is None else ["--batch-size", str(batch_size)]


def run_job(testbed: Testbed, module: str, args: list[str], timeout: float) -> None:
    """``python -m module args`` in every namespace of `testbed`."""
    testbed.run([sys.executable, "-m", module, *args], timeout=timeout)


def measure_rate(out: Path, rate_bps: float, methods, spec: dict, batch_size: int | None,
                 workers: int, threads: int, collective_sizes, planned: dict[str, set],
                 runs: dict, progress: bool, hook_repeats: int = HOOK_REPEATS) -> None:
    """Collective sweep, training with every method (interleaved passes over `runs`,
    `pooled.train_keys` of `methods`: `training_passes`; timed as `spec`, `make_spec`, says),
    then profile and codec costs, in one testbed at `rate_bps`; `batch_size` as given (None:
    the factory's); the keys of `planned` (`planned_keys`) the tables hold are skipped."""
    tag, model = rate_tag(rate_bps), spec["model"]
    coll, train, codec = (out / f"collective-{tag}.csv", out / f"train-{tag}.csv",
                          out / f"hook-{tag}.csv")
    prof = profile_path(out, rate_bps, model, spec["batch_size"])
    need_coll = not planned["collective"] <= ResultTable(coll, COLLECTIVE_KEYS).done_keys()
    need_train = not planned["train"] <= train_table(train).done_keys()
    need_prof = not prof.exists()
    need_codec = not planned["hook"] <= ResultTable(codec, CODEC_KEYS).done_keys()
    if not (need_coll or need_train or need_prof or need_codec):
        return
    say(progress, f"{format_rate(rate_bps)}: testbed of {workers} namespaces")
    load, start = os.getloadavg()[0], time.monotonic()
    with Testbed(workers, rate_bps, threads=threads) as testbed:
        if need_coll:
            say(progress, f"{format_rate(rate_bps)}: all-reduce and all-gather sweep")
            run_job(testbed, "gradcomp.evaluation.benches.collective",
                    ["--out", str(coll), "--backend", "gloo", "--collectives",
                     "allreduce,allgather", "--sizes", ",".join(map(str, collective_sizes)),
                     "--repeats", str(COLLECTIVE_REPEATS), "--warmup", "2",
                     "--after-compute-ms", repr(AFTER_COMPUTE_MS),
                     "--bandwidth", repr(rate_bps)], timeout=900)
        if need_train:
            for repeat, names in training_passes(methods, runs,
                                                 train_table(train).done_keys()):
                say(progress, f"{format_rate(rate_bps)}: training (repeat {repeat}) with "
                    f"{', '.join(names)}")
                run_job(testbed, "gradcomp.evaluation.benches.train",
                        ["--out", str(train), "--backend", "gloo", "--methods", ",".join(names),
                         "--model", model, *batch_args(batch_size), "--warmup", str(spec["warmup"]),
                         *timing_args(spec), "--bucket-cap-mb",
                         str(spec["bucket_cap_mb"]), "--bandwidth", repr(rate_bps),
                         "--repeat", str(repeat)], timeout=1800)
        if need_prof or need_codec:
            say(progress, f"{format_rate(rate_bps)}: "
                + " and ".join(what for what, need in ((f"profile of {model}", need_prof),
                                                       ("hook-path costs", need_codec))
                               if need) + " on every worker at once")
            run_job(testbed, "gradcomp.evaluation.testbed.validate",
                    ["--model", model, *batch_args(batch_size), "--methods",
                     ",".join(methods), "--bucket-cap-mb", str(spec["bucket_cap_mb"]),
                     *(["--profile-out", str(prof)] if need_prof else []),
                     *(["--codec-out", str(codec)] if need_codec else []),
                     "--hook-repeats", str(hook_repeats)], timeout=900)
    record_conditions(out / "conditions.csv", rate_bps, load, start)


def concurrent_parser(doc: str):
    """The options of a testbed's concurrent job on every rank (`concurrent_job`, and
    `validate_fsdp`'s): --profile-out, --codec-out, --model, --batch-size, --methods,
    --hook-repeats."""
    import argparse

    args = argparse.ArgumentParser(description=doc.splitlines()[0])
    args.add_argument("--profile-out")
    args.add_argument("--codec-out")
    args.add_argument("--model", default="mlp", help="a built-in workload or MODULE:FACTORY")
    args.add_argument("--batch-size", type=int, default=None)
    args.add_argument("--methods", default="")
    args.add_argument("--hook-repeats", type=int, default=None)
    return args


def concurrent_job(argv=None) -> int:
    """In every rank of a testbed (``python -m gradcomp.evaluation.testbed.validate``): measure
    the model's profile under DDP (``--profile-out``) and the hooks' per-bucket costs
    (``--codec-out``) on all ranks at once, as they compute during training (each its own
    process and threads, the others busy too); rank 0 writes the results."""
    import torch.distributed as dist

    from ..benches.train import model_profile
    from ..common.env import end_process_group, init_from_env
    from ..profiles.profiles import save_measured

    args = concurrent_parser(concurrent_job.__doc__)
    args.add_argument("--bucket-cap-mb", type=float, default=25.0)
    a = args.parse_args(argv)
    init_from_env("gloo")
    try:
        rank = dist.get_rank()
        save_measured(a.profile_out, model_profile, a.model, a.batch_size, repeats=20, warmup=5,
                      ddp_bucket_cap_mb=a.bucket_cap_mb)
        if a.codec_out:
            dist.barrier()
            methods = hook_methods(parse_methods(a.methods) if a.methods else [])
            gradient = workload_gradient(a.model, a.batch_size, a.bucket_cap_mb, rank)
            repeats = a.hook_repeats or HOOK_REPEATS
            bench_hook_path(methods, quarter_sizes(gradient.values.numel()),
                            dist.get_world_size(), repeats=repeats, warmup=hook_warmup(repeats),
                            out=a.codec_out if rank == 0 else None, slowest_rank=True,
                            gradient=gradient)
        dist.barrier()
    finally:
        end_process_group()  # the profile's hooked DDP freed first
    return 0


def rate_inputs(out: Path, rate_bps: float, planned: dict[str, set]) -> SimpleNamespace:
    """What `predict_rate` reads at `rate_bps` from the tables and fits: of the training rows
    of `planned` each run's least disturbed repeat (`train`: `pooled.least_disturbed_runs`),
    the fitted collectives (`fits`) and the load while measuring."""
    tag = rate_tag(rate_bps)
    return SimpleNamespace(
        train=least_disturbed_runs(train_table(out / f"train-{tag}.csv")
                                   .frame(planned["train"])),
        fits=fit_collectives(ResultTable(out / f"collective-{tag}.csv", COLLECTIVE_KEYS)
                             .frame(planned["collective"])),
        load=conditions_at(out / "conditions.csv", rate_bps))


def predict_rate(out: Path, rate_bps: float, planned: dict[str, set], shared: Pooled,
                 contention: float = 1.0, compute_slowdown: float = 1.0,
                 inputs: SimpleNamespace | None = None) -> pd.DataFrame:
    """Predicted against measured for the training rows of `planned` (`planned_keys`; a
    table's None: all its rows) at `rate_bps`, from the collectives measured at that rate and
    `shared`'s profile and hook-path costs (`pooled_inputs`; `inputs`: `rate_inputs`' of
    these, when read already); `compute_slowdown`: the network's
    (`Network.compute_slowdown`, 1: as measured)."""
    if inputs is None:
        inputs = rate_inputs(out, rate_bps, planned)
    costs, profile = shared.costs, shared.profile
    train, fits, load = inputs.train, inputs.fits, inputs.load
    rows = []
    for _, run in train.iterrows():
        network = replace(network_from_fit(fits, int(run["workers"]), rate_bps),
                          compute_slowdown=compute_slowdown)
        method = None if run["method"] == "auto" else priced(run, costs)
        # bench_train passes bucket_cap_mb to DDP explicitly: torch then gives the first
        # bucket the same cap (its 1 MiB first bucket applies to the default only).
        cap = float(run["bucket_cap_mb"])
        pred = (NO_PREDICTION if method is None else
                predict(profile, network, method, DDP(cap, first_bucket_mb=cap),
                        contention, baseline_s=math.nan))
        label = method.name if method is not None and method.diloco else run_label(run)
        rows.append({**compared(rate_bps, run, pred, profile), "method": label,
                     "bytes_sent": run["bytes_sent"], "exchange_s": sum(
                         run.get(c, math.nan) for c in ("encode_s", "comm_s", "decode_s")),
                     "allreduce_bandwidth_bps": fits["allreduce"].params["bandwidth_bps"],
                     "allreduce_alpha_s": fits["allreduce"].params["alpha_s"],
                     "allgather_bandwidth_bps": fits["allgather"].params["bandwidth_bps"],
                     "auto_choices": run.get("auto_choices", "") if method is None else "",
                     "repeat": run["repeat"], "repeats": run["repeats"],
                     "profile_file": shared.profile_file.name, **load})
    return pd.DataFrame(rows)


def pooled_inputs(out: Path, rates, hook_keys, model: str, batch_size: int) -> Pooled:
    """`pooled.least_disturbed` of the profiles and hook-path tables (rows of `hook_keys`)
    measured at `rates`."""
    return least_disturbed([profile_path(out, r, model, batch_size) for r in rates],
                           [ResultTable(out / f"hook-{rate_tag(r)}.csv", CODEC_KEYS)
                            .frame(hook_keys) for r in rates], CODEC_KEYS, run_label)


def compared(rate_bps: float, run, pred, profile) -> dict:
    """The columns every validation row has: the rate, the training `run`'s method, measured
    time (its least disturbed repeat; ``measured_runs_median``: the median of its repeats) and
    timed iterations against the prediction `pred`, and the `profile`'s single-worker time."""
    return {"rate_bps": rate_bps, "rate": format_rate(rate_bps), "method": run["method"],
            "measured": run["t_iter_s"],
            "measured_runs_median": run.get("t_iter_runs_median_s", run["t_iter_s"]),
            "predicted": pred.t_iter_s,
            "rel_error": (pred.t_iter_s - run["t_iter_s"]) / run["t_iter_s"],
            "measured_spread": run["t_iter_spread_s"], "exposed_comm": pred.exposed_comm_s,
            "wire_bytes": pred.wire_bytes, "t_iter_single": profile.t_iter_single,
            "iterations": run["iterations"]}


#: `auto`'s row: no prediction (it chooses among methods at run time).
NO_PREDICTION = SimpleNamespace(t_iter_s=math.nan, exposed_comm_s=math.nan,
                                 wire_bytes=math.nan)


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Median and max |relative error| per method and over all rows (but `auto`'s: no
    prediction)."""
    table = table[table["method"] != "auto"]
    abs_err = table.assign(abs_rel_error=table["rel_error"].abs())
    per = abs_err.groupby("method", sort=False)["abs_rel_error"].agg(
        median_abs_rel_error="median", max_abs_rel_error="max", runs="count").reset_index()
    total = pd.DataFrame([{"method": "all",
                           "median_abs_rel_error": abs_err["abs_rel_error"].median(),
                           "max_abs_rel_error": abs_err["abs_rel_error"].max(),
                           "runs": len(abs_err)}])
    return pd.concat([per, total], ignore_index=True)


def markdown(table: pd.DataFrame) -> str:
    """The validation as Markdown: measured and predicted ms and the relative error per rate
    and method, then the median and max |relative error| per method, then `auto` against the
    other methods (`auto_comparison`) when it ran."""
    wide = table.assign(cell=[f"{m * 1e3:.0f} / {p * 1e3:.0f} ({e:+.0%})" if p == p
                              else f"{m * 1e3:.0f} / -" for m, p, e in
                              zip(table["measured"], table["predicted"], table["rel_error"])])
    grid = wide.pivot(index="method", columns="rate_bps", values="cell")
    grid = grid.reindex(index=list(dict.fromkeys(table["method"])))
    grid.columns = [format_rate(c) for c in grid.columns]
    errors = summarize(table).set_index("method")
    grid["median / max abs. error"] = [
        f"{errors.loc[m, 'median_abs_rel_error']:.0%} / {errors.loc[m, 'max_abs_rel_error']:.0%}"
        if m in errors.index else "-" for m in grid.index]
    overall = errors.loc["all"]
    text = ("Iteration time, measured / predicted ms (relative error of the prediction):\n\n"
            + grid.reset_index().to_markdown(index=False) + "\n\nOver all "
            f"{int(overall['runs'])} runs: median |error| {overall['median_abs_rel_error']:.1%},"
            f" max {overall['max_abs_rel_error']:.1%}.\n")
    for column, line in (("compute_slowdown", slowdown_line), ("profile_file", profile_line),
                         ("repeats", repeats_line), ("iterations", timed_line)):
        text += "\n" + line(table) + "\n" if column in table else ""
    text += diloco_markdown(table)
    auto = auto_comparison(table)
    if len(auto):
        text += ("\n`auto` (its default candidates) against the fastest fixed run of a "
                 "candidate (with auto's options) and DDP, measured (the median of each one's "
                 "runs; ratios: auto's time over theirs; auto timed after its exploration):"
                 "\n\n"
                 + auto.to_markdown(index=False, floatfmt=".3g") + "\n")
    return text


def validate_sweep(out, rates=DEFAULT_RATES, methods=DEFAULT_METHODS, model: str = "mlp",
                   batch_size: int | None = None, warmup: int = 5, iterations: int = 20,
                   bucket_cap_mb: float = 25.0, workers: int = 2, threads: int = 1,
                   contention: float = 1.0, collective_sizes=None,
                   progress: bool = True, hook_repeats: int = HOOK_REPEATS,
                   train_repeats: int = TRAIN_REPEATS,
                   min_timed_s: float = MIN_TIMED_S) -> pd.DataFrame:
    """Measure, predict and compare (module docstring) into the folder `out` (resumed when
    it holds tables of an earlier run); returns the validation table, also written to
    ``validation.csv`` with the plot ``validation.png``. `hook_repeats`: timed repeats of
    each hook-path cost (after `hook_warmup` untimed ones); `train_repeats`: training runs
    per method and rate, interleaved, the least disturbed used (a folder measured with
    fewer: the missing repeats are measured); `min_timed_s`: each training run times at
    least this many seconds too (`benches.train`'s time budget; 0: `iterations` only)."""
    rates = [parse_rate(r, "rates") for r in rates]
    if not rates:
        raise ValueError("rates=[] is not allowed: give at least one rate")
    methods = with_auto_candidates(check_methods(methods))
    check_int(hook_repeats, "hook_repeats", 1)
    check_int(train_repeats, "train_repeats", 1)
    spec = make_spec(model, batch_size, warmup, iterations, bucket_cap_mb, None,
                     min_timed_s=min_timed_s)
    if collective_sizes is None:
        collective_sizes = model_collective_sizes(model)
    planned = planned_keys(methods, spec, workers, collective_sizes, train_repeats)
    runs = train_keys([parse_methods(m)[0] for m in methods], spec, workers, train_repeats)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    say(progress, f"results in {out}")
    for rate in rates:
        measure_rate(out, rate, methods, spec, batch_size, workers, threads,
                     list(collective_sizes), planned, runs, progress, hook_repeats)
    shared = pooled_inputs(out, rates, planned["hook"], model, spec["batch_size"])
    inputs = read_once(lambda rate, keys: rate_inputs(out, rate, keys))

    def predict_at(rate: float, slowdown: float, keys: dict) -> pd.DataFrame:
        return predict_rate(out, rate, keys, shared, contention, slowdown, inputs(rate, keys))

    plain = planned_keys([m for m in methods if m in UNCOMPRESSED] or ["none"], spec, workers,
                         collective_sizes, train_repeats)  # lambda's runs, priced alone
    tokens = tokens_in(load_workload(model, "model", batch_size=batch_size).batch(0, 0, "cpu")[0])
    table = predict_with_slowdowns(rates, predict_at, planned, plain).assign(
        tokens_per_step=tokens)
    write_atomic(out / "validation.csv", table.to_csv(index=False))
    write_regret(out, table)
    write_atomic(out / "validation.md", markdown(table) + regret_markdown(table))
    from ..report.plots import validation_sweep

    validation_sweep(table, out / "validation.png",
                     title=f"{model} on {workers} workers (gloo, {threads} thread each): "
                           "measured (points) and predicted (lines)")
    return table


def say(progress: bool, text: str) -> None:
    """`text` on stderr, as `gradcomp validate`'s progress, when `progress`."""
    if progress:
        print(f"gradcomp validate: {text}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(concurrent_job())
