"""Two-tier validation (`gradcomp validate --nodes N --gpus-per-node G`): the model's two-tier
pricing against DDP training in a `NodeTestbed` (N namespaces of G ranks: the loopback inside
a node, the shaped links between nodes), in both layouts:

* ``flat``: the hook's collectives over all N G ranks (gloo's ring crosses each node's link
  once per direction), every method and DDP's own all-reduce ("ddp");
* ``hierarchical``: ``gradcomp.comm.register(ddp, method, hierarchical=True,
  gpus_per_node=G)``, a hook that compresses only between nodes (no "ddp" row: DDP has no
  such layout).

Per rate, in one testbed: the per-tier collective sweep (`ratecheck.tier_sweep`: all-reduce and
all-gather inside every node at once, across the nodes for every local rank at once, and over
all N G ranks as one ring, each after compute, as in training), training of each layout
(`benches.train`; `auto` in the same jobs, timed after its exploration, its steady state; each
run timing at least `iterations` and `min_timed_s` seconds; `train_repeats` interleaved passes,
each run's least disturbed repeat used, as in `validate`: `pooled.least_disturbed_runs`), then
on all N G ranks at once, so under the contention training sees (N G processes on the
machine's cores), the profile as DDP runs it and the hook path's per-bucket costs: at the
buckets' sizes over N G payloads (flat) and at the 1/G shards' over N payloads
(hierarchical, `benches.hookpath`), then the same costs on one rank while the others wait.
None of these times any communication, so none depends on the rate: they are measured once,
in the testbed of the first rate that needs them, and used at every rate (`measured_once`).

The model: a `Network` of N G workers, G per node, ring collectives; across nodes each
collective's fitted latency and efficiency as the layout runs it (hierarchical: G times a
local-rank ring's fitted bandwidth over the rate, the G rings sharing the link; flat: the ring
over all ranks', `ratecheck.tier_network`), inside the fitted all-reduce latency and bandwidth of
the loopback; `timeline.predict(..., layout=...)`; each codec priced between its costs alone
and all at once by the ranks computing beside it (`slowdown`, column ``codec_share``, where the
costs alone were measured); every method's compute slowed by the compute
slowdown lambda (flat: `slowdown.fit_slowdowns`, each rate's fitted to the layout's ddp and
none runs at the other rates; hierarchical: `slowdown.fit_at_rate`, each rate's to the
layout's none runs there, none's to the other methods'; `predict_sweep`). Files as
`validate`'s, tagged by rate and layout: ``tiers-<rate>.csv``, ``train-<rate>-<layout>.csv``,
``profile-<model>-b<batch>.json``, ``hook-<layout>.csv`` (per rate, ``...-<rate>...``, in
folders measured before they were shared), ``hook-<layout>-alone.csv``, ``conditions.csv``;
the result: ``validation.csv`` (``layout``, ``nodes``, ``gpus_per_node``, ``codec_share``,
``compute_slowdown``, ``slowdown_source``, profile and hook files), ``validation.md``,
``regret.csv``, ``auto-regret.csv``, ``validation-*.png``.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from ...checks import check_int
from ..analyses.cluster_fit import UNCOMPRESSED
from ..benches.collective import AFTER_COMPUTE_MS
from ..benches.hookpath import KEY_COLUMNS as CODEC_KEYS
from ..benches.hookpath import hook_methods
from ..benches.train import make_spec, timing_args, train_table
from ..common.conditions import conditions_at, record_conditions
from ..common.store import ResultTable, write_atomic
from ..common.units import format_rate, parse_rate
from ..model.bucketing import DDP
from ..model.methods import method_spec, parse_methods
from ..model.fit import hook_costs
from ..model.timeline import LAYOUTS, predict
from ..profiles.profiles import load_profile
from .nodes import NodeTestbed
from .pooled import MIN_TIMED_S, least_disturbed_runs
from .ratecheck import TIER_KEYS, run_tier_sweep, tier_network
from .regret import regret_markdown, with_auto_candidates, write_regret
from .slowdown import (AT_RATE, blended_costs, predict_at_rate, predict_with_slowdowns,
                       read_once, shared_prediction)
from .tier_plan import (alone_path, codec_plan, layout_cases, layout_options, measured_once,
                        missing_tiers, own_options, planned_keys, to_measure, train_file,
                        training_jobs)
from .validate_diloco import priced, run_label
from .validate import (COLLECTIVE_REPEATS, DEFAULT_METHODS, DEFAULT_RATES, HOOK_REPEATS,
                       NO_PREDICTION, TRAIN_REPEATS, batch_args, check_methods, compared,
                       hook_warmup, markdown, model_collective_sizes, rate_tag, say,
                       summarize)

SUMMARY = ("method", "median_abs_rel_error", "max_abs_rel_error", "runs")


def measure_rate(out: Path, rate_bps: float, methods, spec: dict, nodes: int, g: int,
                 threads: int, layouts, sizes, planned: dict, progress: bool,
                 hook_repeats: int = HOOK_REPEATS, train_repeats: int = 1) -> None:
    """Tier sweep, training in every layout (`training_jobs`), profile and hook-path costs
    (module docstring) in one testbed at `rate_bps`; what the tables hold is skipped."""
    model = spec["model"]
    todo = to_measure(out, rate_bps, spec, layouts, planned)
    if not any(todo.values()):
        return
    prof = measured_once(out, rate_bps, spec)
    where = f"{format_rate(rate_bps)}, {nodes} nodes x {g}"
    load, start = os.getloadavg()[0], time.monotonic()
    with NodeTestbed(nodes, g, rate_bps, threads=threads) as testbed:
        if todo["tiers"]:
            say(progress, f"{where}: all-reduce and all-gather inside and across nodes, and "
                "over every rank")
            run_tier_sweep(testbed, out / f"tiers-{rate_tag(rate_bps)}.csv", sizes,
                           ("allreduce", "allgather"), COLLECTIVE_REPEATS, 2, AFTER_COMPUTE_MS,
                           tiers=missing_tiers(out, rate_bps, planned))
        for repeat, layout, names in training_jobs(out, rate_bps, methods, spec, nodes, g,
                                                   layouts, train_repeats):
            say(progress, f"{where}: {layout} training (repeat {repeat}) with "
                f"{', '.join(names)}")
            testbed.run([sys.executable, "-m", "gradcomp.evaluation.benches.train",
                         "--out", str(train_file(out, rate_bps, layout)), "--backend",
                         "gloo", "--methods", ",".join(names), "--model", model,
                         *batch_args(spec["batch_size"]), "--warmup", str(spec["warmup"]),
                         *timing_args(spec), "--bucket-cap-mb",
                         str(spec["bucket_cap_mb"]), "--bandwidth", repr(rate_bps),
                         "--hook-options", json.dumps(layout_options(layout, g)),
                         "--repeat", str(repeat)], timeout=3600)
        hooks = [lay for lay in layouts if todo[f"hook-{lay}"]]
        alone = [lay for lay in layouts if todo[f"hook-{lay}-alone"]]
        if hooks or alone or todo["profile"]:
            say(progress, f"{where}: profile and hook-path costs on all ranks at once, then "
                "on one rank alone (used at every rate)")
            testbed.run([sys.executable, "-m", "gradcomp.evaluation.testbed.validate_tiers",
                         "--model", model, *batch_args(spec["batch_size"]), "--methods",
                         ",".join(methods), "--bucket-cap-mb", str(spec["bucket_cap_mb"]),
                         *(["--profile-out", str(prof)] if todo["profile"] else []),
                         *[a for lay in hooks for a in (
                             f"--{lay}-out", str(measured_once(out, rate_bps, spec, lay)))],
                         *[a for lay in alone for a in (
                             f"--{lay}-alone-out", str(alone_path(out, lay)))],
                         "--hook-repeats", str(hook_repeats)],
                        timeout=1800)
    record_conditions(out / "conditions.csv", rate_bps, load, start)


def rate_inputs(out: Path, rate_bps: float, planned: dict, spec: dict, nodes: int, g: int,
                layouts) -> SimpleNamespace:
    """What `predict_rate` prices at `rate_bps`, read from the tables and fitted: the
    network, the profile (and its file), the load while measuring and the machine's cores
    (NaN where not recorded), and per layout (`layouts`) the hook-path file, its costs, the
    training rows of `planned`, the network and the costs of one rank alone (empty where the
    folder has none)."""
    profile_file = measured_once(out, rate_bps, spec)
    tiers = ResultTable(out / f"tiers-{rate_tag(rate_bps)}.csv", TIER_KEYS).frame(
        planned["tiers"])
    per_layout = {}
    for layout in layouts:
        hook_path = measured_once(out, rate_bps, spec, layout)
        costs, alone = (_hook_costs(ResultTable(path, CODEC_KEYS).frame(
            planned[f"hook-{layout}"])) for path in (hook_path, alone_path(out, layout)))
        per_layout[layout] = (hook_path, costs, least_disturbed_runs(train_table(
            train_file(out, rate_bps, layout)).frame(planned[f"train-{layout}"])),
            tier_network(tiers, nodes, g, rate_bps, layout), alone)
    conditions = out / "conditions.csv"
    return SimpleNamespace(
        profile_file=profile_file, profile=load_profile(profile_file),
        load=conditions_at(conditions, rate_bps),
        cores=conditions_at(conditions, rate_bps, ("cpus",))["cpus"], layouts=per_layout)


def _hook_costs(codecs: pd.DataFrame) -> dict:
    """`fit.hook_costs` of a hook-path table, keyed by `run_label` ({} for no rows)."""
    return hook_costs(codecs.assign(method=codecs.apply(run_label, axis=1))) \
        if len(codecs) else {}


def predict_rate(out: Path, rate_bps: float, planned: dict, spec: dict, nodes: int, g: int,
                 layouts, contention: float = 1.0, compute_slowdown: float = 1.0,
                 inputs: SimpleNamespace | None = None, cores: int | None = None
                 ) -> pd.DataFrame:
    """Predicted against measured for every layout's training rows at `rate_bps` (`inputs`:
    `rate_inputs`' of these, when already read); `compute_slowdown`: the network's
    (`Network.compute_slowdown`, 1: the profile's compute as measured). A method with costs
    of one rank alone is priced where it shares the `cores` (None: those the testbed ran on,
    as recorded, else this machine's) with the other ranks (`slowdown`: column
    ``codec_share``, NaN for the others)."""
    if inputs is None:
        inputs = rate_inputs(out, rate_bps, planned, spec, nodes, g, layouts)
    profile_file, profile, load = inputs.profile_file, inputs.profile, inputs.load
    if cores is None:
        cores = os.cpu_count() if math.isnan(inputs.cores) else int(inputs.cores)
    rows = []
    for layout in layouts:
        hook_path, costs, train, network, alone = inputs.layouts[layout]
        network = replace(network, compute_slowdown=compute_slowdown)
        for _, run in train.iterrows():
            name = run["method"]
            cap = float(run["bucket_cap_mb"])

            def predict_at(share: float, run=run, cap=cap, network=network, costs=costs,
                           alone=alone):
                return predict(profile, network,
                               priced(run, blended_costs(costs, alone, share)),
                               DDP(cap, first_bucket_mb=cap), contention, baseline_s=math.nan,
                               layout=layout)

            share = math.nan
            if name == "auto":
                pred = NO_PREDICTION
            elif priced(run, alone).priced_by:  # its own codec measured alone
                pred, share = shared_prediction(predict_at, network.workers, cores)
            else:
                pred = predict_at(1.0)
            rows.append({**compared(rate_bps, run, pred, profile), "method": run_label(run),
                         "layout": layout, "codec_share": share,
                         "nodes": nodes, "gpus_per_node": g,
                         "inter_bandwidth_bps": network.bandwidth_bps
                         * network.efficiency_of("allreduce"),
                         "inter_alpha_s": network.alpha("allreduce"),
                         "intra_bandwidth_bps": network.intra_bandwidth_bps,
                         "intra_alpha_s": network.intra_latency_s,
                         "auto_choices": run.get("auto_choices", "") if name == "auto" else "",
                         "repeat": run["repeat"], "repeats": run["repeats"],
                         "profile_file": profile_file.name, "hook_file": hook_path.name,
                         **load})
    return pd.DataFrame(rows)


def predict_sweep(out: Path, rates, methods, spec: dict, nodes: int, g: int, layouts, sizes,
                  planned: dict, contention: float = 1.0, train_repeats: int = 1
                  ) -> pd.DataFrame:
    """Every rate's rows (`predict_rate`), each layout's predicted with its own compute
    slowdown lambda per rate (columns ``compute_slowdown`` and ``slowdown_source``):
    `slowdown.fit_slowdowns`' on that layout's ddp and none runs at the other rates, or, in
    the layouts of `slowdown.AT_RATE`, `slowdown.fit_at_rate`'s at each rate. Per layout
    because the layouts slow down differently (flat's 1.00-1.12 at every rate on the quiet
    run of 2026-11-28, hierarchical's 1.30-1.59: its loopback exchange's copies take CPU
    time from the other ranks' compute; the model prices their time, not that)."""
    plain = planned_keys([m for m in methods if m in UNCOMPRESSED] or ["none"], spec, nodes,
                         g, layouts, sizes, train_repeats)  # lambda's runs, priced alone
    tables = []
    for layout in layouts:
        inputs = read_once(lambda rate, keys, lay=layout: rate_inputs(out, rate, keys, spec,
                                                                      nodes, g, [lay]))

        def predict_at(rate: float, slowdown: float, keys: dict, lay=layout,
                       inputs=inputs) -> pd.DataFrame:
            return predict_rate(out, rate, keys, spec, nodes, g, [lay], contention, slowdown,
                                inputs(rate, keys))

        fit = predict_at_rate if layout in AT_RATE else predict_with_slowdowns
        tables.append(fit(rates, predict_at, planned, plain, runs=f" of the {layout} layout"))
    table = pd.concat(tables, ignore_index=True)
    order = {rate: i for i, rate in enumerate(rates)}  # rate by rate, as measured
    return table.sort_values("rate_bps", key=lambda r: r.map(order), kind="stable",
                             ignore_index=True)


def validate_two_tier(out, rates=DEFAULT_RATES, methods=DEFAULT_METHODS, model: str = "mlp",
                      batch_size: int | None = None, warmup: int = 5, iterations: int = 20,
                      bucket_cap_mb: float = 25.0, nodes: int = 2, gpus_per_node: int = 2,
                      threads: int = 1, contention: float = 1.0, layouts=LAYOUTS,
                      collective_sizes=None, progress: bool = True,
                      hook_repeats: int = HOOK_REPEATS, train_repeats: int = TRAIN_REPEATS,
                      min_timed_s: float = MIN_TIMED_S) -> pd.DataFrame:
    """Measure, predict and compare (module docstring) into the folder `out` (resumed);
    returns the validation table. `hook_repeats`: timed repeats of each hook-path cost
    (after `validate.hook_warmup` untimed ones); `train_repeats` and `min_timed_s`: training
    runs per method, layout and rate and each one's time budget (`validate.validate_sweep`'s)."""
    check_int(nodes, "nodes", 2)
    check_int(hook_repeats, "hook_repeats", 1)
    check_int(train_repeats, "train_repeats", 1)
    check_int(gpus_per_node, "gpus_per_node", 1)
    rates = [parse_rate(r, "rates") for r in rates]
    layouts = list(layouts)
    if not rates or not layouts or any(lay not in LAYOUTS for lay in layouts):
        raise ValueError(f"rates={rates!r}, layouts={layouts!r} are not allowed: give at least "
                         f"one rate and layouts of {', '.join(LAYOUTS)}")
    methods = with_auto_candidates(check_methods(methods))
    spec = make_spec(model, batch_size, warmup, iterations, bucket_cap_mb, None,
                     min_timed_s=min_timed_s)
    sizes = list(collective_sizes or model_collective_sizes(model))
    planned = planned_keys(methods, spec, nodes, gpus_per_node, layouts, sizes, train_repeats)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    say(progress, f"results in {out}")
    for rate in rates:
        measure_rate(out, rate, methods, spec, nodes, gpus_per_node, threads, layouts, sizes,
                     planned, progress, hook_repeats, train_repeats)
    table = predict_sweep(out, rates, methods, spec, nodes, gpus_per_node, layouts, sizes,
                          planned, contention, train_repeats)
    write_atomic(out / "validation.csv", table.to_csv(index=False))
    write_regret(out, table)
    write_atomic(out / "validation.md", two_tier_markdown(table, nodes, gpus_per_node))
    from ..report.plots import validation_sweep

    for layout in layouts:
        validation_sweep(table[table["layout"] == layout], out / f"validation-{layout}.png",
                         title=f"{model}, {layout}: {nodes} nodes x {gpus_per_node} ranks "
                               "(gloo): measured (points) and predicted (lines)")
    return table


def summarize_layouts(table: pd.DataFrame) -> pd.DataFrame:
    """`validate.summarize` per layout (a ``layout`` column first)."""
    return pd.concat([summarize(rows).assign(layout=layout)[["layout", *SUMMARY]]
                      for layout, rows in table.groupby("layout", sort=False)],
                     ignore_index=True)


def two_tier_markdown(table: pd.DataFrame, nodes: int, g: int) -> str:
    """Per layout `validate.markdown`'s table, then the advice regret."""
    loads = table[["load_1min_before", "load_1min_after"]].stack()
    head = (f"{nodes} nodes x {g} ranks in a two-tier testbed on {os.cpu_count()} cores. "
            "The profile and the hook-path costs were measured on all "
            f"{nodes * g} ranks at once, under the contention the training runs see, "
            + measured_where(table) + ". " + shared_where(table) + "Load average (1 min) "
            f"before and after each rate's measurements: {loads.min():.1f}-{loads.max():.1f}.\n")
    parts = [f"\n## Layout: {layout}\n\n"  # the head says where the profile came from
             + markdown(rows.drop(columns=["layout", "profile_file"], errors="ignore"))
             for layout, rows in table.groupby("layout", sort=False)]
    return head + "".join(parts) + "\n## Advice regret\n" + regret_markdown(table)


def shared_where(table: pd.DataFrame) -> str:
    """A sentence on the codecs priced between one rank alone and all at once (`slowdown`),
    where the table's column ``codec_share`` has any; else ""."""
    share = table["codec_share"].dropna() if "codec_share" in table else pd.Series(dtype=float)
    if share.empty:
        return ""
    return ("The hook-path costs were also measured on one rank alone, and each codec priced "
            "between the two by the ranks computing beside it (`codec_share`: 0 alone, 1 all "
            f"at once; {share.min():.2f}-{share.max():.2f} here). ")


def measured_where(table: pd.DataFrame) -> str:
    """Whether the rows' profile and hook-path costs (columns profile_file, hook_file) were
    measured once for every rate or per rate, and the files."""
    files = list(dict.fromkeys([*table["profile_file"], *table["hook_file"]]))
    once = (table.groupby("layout")[["profile_file", "hook_file"]].nunique() == 1).all().all()
    return ((("once, in the testbed of the first rate measured, and used at every rate "
              "(neither times any communication, so neither depends on the rate)")
             if once else "at each rate")
            + f" ({', '.join(files)})")


def concurrent_job(argv=None) -> int:
    """On every rank of a two-tier testbed: the profile under DDP (--profile-out) and the
    hook path's per-bucket costs of each layout, all ranks at once (--flat-out,
    --hierarchical-out), then on rank 0 alone while the others wait at a barrier
    (--flat-alone-out, --hierarchical-alone-out); rank 0 writes."""
    import torch.distributed as dist

    from ..benches.hookpath import bench_hook_path, workload_gradient
    from ..benches.train import model_profile
    from ..common.env import end_process_group, init_from_env
    from ..profiles.profiles import save_measured
    from .validate import concurrent_parser

    args = concurrent_parser(concurrent_job.__doc__)
    args.add_argument("--bucket-cap-mb", type=float, default=25.0)
    args.add_argument("--flat-out")
    args.add_argument("--hierarchical-out")
    args.add_argument("--flat-alone-out")
    args.add_argument("--hierarchical-alone-out")
    a = args.parse_args(argv)
    init_from_env("gloo")
    try:
        rank, g = dist.get_rank(), int(os.environ["LOCAL_WORLD_SIZE"])
        nodes = dist.get_world_size() // g
        save_measured(a.profile_out, model_profile, a.model, a.batch_size, repeats=20, warmup=5,
                      ddp_bucket_cap_mb=a.bucket_cap_mb)
        methods = [method_spec(*c) for c in parse_methods(a.methods)] if a.methods else []
        spec = {"model": a.model, "batch_size": a.batch_size, "bucket_cap_mb": a.bucket_cap_mb}
        gradient = workload_gradient(a.model, a.batch_size, a.bucket_cap_mb, rank)
        repeats = a.hook_repeats or HOOK_REPEATS
        for layout, path, alone in (("flat", a.flat_out, a.flat_alone_out),
                                    ("hierarchical", a.hierarchical_out,
                                     a.hierarchical_alone_out)):
            world, sizes = codec_plan(spec, nodes, g, layout)
            bench = partial(bench_hook_path, hook_methods(own_options(
                layout_cases(methods, layout, g))), sizes, world, repeats=repeats,
                warmup=hook_warmup(repeats), gradient=gradient)
            if path:
                dist.barrier()
                bench(out=path if rank == 0 else None, slowest_rank=True)
            if alone:
                dist.barrier()
                if rank == 0:
                    bench(out=alone)
        dist.barrier()
    finally:
        end_process_group()  # the profile's hooked DDP freed first
    return 0


if __name__ == "__main__":
    sys.exit(concurrent_job())
