"""The main job (`gradcomp run`): measure codecs, collectives, training and convergence on
this machine, fit the performance model (and the cluster's efficiency per tier and compute
slowdown, ``cluster_fit.json``: applied to the question when its profile was measured on this
machine, `report.cluster_report`), ask it about a profile, and write the figures and
``report.md``.

Everything goes into one results folder (default ``results/<local time>``): the measurement
tables are appended row by row as measured, so a run interrupted at any point resumes when
given the same folder, skipping the rows already there.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from .analyses.whatif import BANDWIDTH, PROFILE, WORKERS
from .benches.collective import AFTER_COMPUTE_MS, bench_collective
from .benches.compress import bench_compress
from .benches.converge import CONVERGE, FULL, QUICK, bench_converge
from .benches.train import bench_train
from .common.env import cpu_threads
from .. import diloco
from ..checks import check_choice
from .model.bucketing import POLICIES
from .model.network import Network
from .analyses.recommend import sixteen_bit
from .model.cost_tables import MEASURED, cost_table, default_costs
from .model.methods import parse_methods, resolve
from .profiles.profiles import load_profile
from .report.report import (COLLECTIVE, COMPRESS, HOOK, TRAIN, TRAIN_PROFILE, Report,
                            write_report)

LOCAL_WORKERS = 2
# The convergence proxy of a profile's model family: a built-in task of the same kind of
# network (the workloads' `cnn`: a small ResNet; `gpt`: a small GPT), `teacher` (an MLP) for
# any other model.
PROXY_TASKS = {"cnn": "cnn", "transformer": "gpt", "mlp": "teacher"}
TRANSFORMER_NAMES = ("gpt", "bert", "llama", "transformer", "vit", "t5")
# Seeds of the convergence runs, the quick run's too: the verdict weighs the seeds' spread of
# iterations to target (`analyses.evidence`), which one seed cannot show.
SEEDS = 3
# The quick run's budget of a proxy that needs far fewer iterations than `bench converge
# --quick`'s 200: uncompressed training reaches the cnn proxy's target in 20-30 iterations
# (3 seeds, 2026-11-27), and the variants that never reach it run the whole budget; evaluated
# every 5 iterations, not 10, so that the seeds' spread is theirs, not the evaluation grid's.
QUICK_BUDGET = {"cnn": dict(max_iters=100, eval_every=5)}
# Per mode: compress sizes (elements), collective payloads (bytes), repeats and warm-ups,
# training iterations; None: the benchmark's own default.
SETTINGS = {
    True: dict(sizes=[2**k for k in range(10, 23, 2)], compress_repeats=7,
               collective_sizes=[4, 2**10, 2**16, 2**20, 2**24], collective_repeats=5,
               collective_warmup=2, iterations=5, hook_repeats=3),
    False: dict(sizes=None, compress_repeats=5, collective_sizes=None, collective_repeats=10,
                collective_warmup=3, iterations=20, hook_repeats=5),
}


def codec_cases(cases):
    """The (method, options) whose encode / decode the compress bench measures for `cases`
    (None: all): a DiLoCo variant's outer method in its place."""
    if cases is None:
        return None
    out = []
    for name, options in cases:
        if name == diloco.NAME:
            name, options = diloco.outer_case(options)
        if (name, options) not in out:
            out.append((name, options))
    return out

def model_family(profile) -> str:
    """"cnn" when a gradient is a convolution kernel (4-D), "transformer" for a profile named
    after one (gpt2, bert-base, ...), else "mlp"."""
    profile = load_profile(profile)
    if any(shape is not None and len(shape) == 4 for shape in profile.shapes or ()):
        return "cnn"
    name = profile.name.lower()
    return "transformer" if any(word in name for word in TRANSFORMER_NAMES) else "mlp"


def proxy_task(profile) -> str:
    """The built-in convergence task standing in for `profile`'s model (`PROXY_TASKS`)."""
    return PROXY_TASKS[model_family(profile)]


def _say(progress: bool, text: str) -> None:
    if progress:
        print(f"gradcomp run: {text}", file=sys.stderr, flush=True)


def run(out_dir=None, quick: bool = True, profile=PROFILE, workers: int = WORKERS,
        bandwidth=BANDWIDTH, bucketing: str = "ddp", latency_s: float = 0.0,
        progress: bool = True, methods=None, model: str = "mlp",
        sizes=None, collective_sizes=None, iterations: int | None = None,
        converge_iters: int | None = None, costs=None, cluster=None,
        task: str | None = None) -> Report:
    """Measure, fit and report into `out_dir` (resumed when it holds an earlier run's
    tables); return the `Report`: the folder, its ``report.md`` and the verdicts computed
    there. The question: `profile` on `workers` at `bandwidth`, with `bucketing` and a
    per-hop latency `latency_s`. `quick`: a few sizes and
    iterations (minutes on 2 CPU cores) instead of the full sweeps.
    Smaller runs: `methods` (names, or ``name:key=value,...`` with options: `methods.
    parse_methods`; default every registered method), the built-in training
    `model` ("mlp", "tiny"), compress `sizes` (elements), `collective_sizes` (bytes per
    worker), training `iterations` and the convergence runs' iteration budget
    `converge_iters` (always `SEEDS` seeds or more). `costs`: the codec-cost table the
    question is priced with (a `cost_tables` name or CSV; None: the table of the profile's device). `cluster`: a
    (`Cluster`, nodes) to ask about instead of `workers` at `bandwidth`. The baselines
    (none, bf16, and fp16 for a GPU without bf16) are always measured."""
    prof = load_profile(profile)
    if costs is None:
        default_costs(prof.device, measured=True)  # a profile of no recorded device: ask now
    elif costs != MEASURED:  # "measured": this run's compress.csv
        cost_table(costs)
    if cluster is None:  # bad input fails here, before minutes of measuring
        Network(workers, bandwidth, latency_s)
    for method in methods or ():
        resolve(method)  # an unknown method or option too
    check_choice(bucketing, "bucketing", tuple(POLICIES))
    plan = {**SETTINGS[bool(quick)]}
    for key, value in dict(sizes=sizes, collective_sizes=collective_sizes,
                           iterations=iterations).items():
        plan[key] = plan[key] if value is None else value
    out = Path(out_dir) if out_dir is not None else \
        Path("results") / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    _say(progress, f"results in {out}")
    methods = None if methods is None else list(dict.fromkeys(
        [*methods, "none", "bf16", sixteen_bit(prof.device)]))
    cases = None if methods is None else [parse_methods(m)[0] for m in methods]
    _say(progress, "1/5 encode/decode cost of each method")
    # With a local worker's threads, as its hook runs them (and threads that wait for one
    # another's cores on a loaded machine would stall for a scheduler quantum).
    bench_compress(codec_cases(cases), plan["sizes"], repeats=plan["compress_repeats"],
                   out=out / COMPRESS, progress=progress, threads=cpu_threads(LOCAL_WORKERS))
    _say(progress, f"2/5 collectives across {LOCAL_WORKERS} local workers")
    bench_collective(LOCAL_WORKERS, sizes=plan["collective_sizes"],
                     repeats=plan["collective_repeats"], warmup=plan["collective_warmup"],
                     out=out / COLLECTIVE, progress=progress,
                     after_compute_s=AFTER_COMPUTE_MS / 1e3)
    _say(progress, f"3/5 DDP training of '{model}' on {LOCAL_WORKERS} local workers")
    bench_train(None if cases is None else ["ddp", *cases], LOCAL_WORKERS, model=model,
                iterations=plan["iterations"], out=out / TRAIN,
                profile_out=out / TRAIN_PROFILE, hook_out=out / HOOK,
                hook_repeats=plan["hook_repeats"], progress=progress)
    converge = {**(QUICK if quick else FULL)}
    converge["seeds"] = max(converge["seeds"], SEEDS)
    task = proxy_task(prof) if task is None else task
    if quick:
        converge.update(QUICK_BUDGET.get(task, {}))
    if converge_iters is not None:
        converge["max_iters"] = converge_iters
    _say(progress, f"4/5 convergence to the target on task '{task}' (the convergence proxy "
                   f"of {prof.name}), with and without "
                   f"error feedback ({converge['seeds']} seed(s), <= {converge['max_iters']} "
                   "iterations)")
    bench_converge(cases, task, seeds=converge["seeds"], max_iters=converge["max_iters"],
                   eval_every=converge["eval_every"], world_size=LOCAL_WORKERS,
                   out=out / CONVERGE, progress=progress)
    _say(progress, "5/5 fits (codecs, collectives, efficiency and compute slowdown), what-if, "
                   "advice, time to accuracy, figures and report")
    report = write_report(out, profile, workers, bandwidth, bucketing, latency_s, costs,
                          cluster, methods)
    _say(progress, f"report: {report.path}")
    return report
