"""Hold the FSDP timeline (`model.fsdp.predict_fsdp`) against FSDP2 training at controlled
bandwidths (`gradcomp validate --parallelism fsdp`): in a `Testbed` of local namespaces, for
every rate of a sweep,

1. a sweep of FSDP's collectives (all-gather, reduce-scatter and all-to-all, payloads up to
   the largest FSDP unit) gives alpha and bandwidth of each at that rate
   (`fit.fit_collectives`), fitted to the mean time per size: an iteration holds a dozen
   collectives one after another, its time their sum, whose central value is the sum of
   their means (not of their medians: at low rates a collective's times are skewed, e.g.
   all-gathers at 100 Mbit/s alternating between the line rate and 0.6 of it);
2. FSDP training of the workload (`benches.train_fsdp`: fully_shard on each Linear and the
   root) with each method ("fsdp": FSDP's own reduce-scatter; else gradcomp's compressed
   one) gives measured iteration times;
3. right after, every worker measures at the same time the model's profile as FSDP runs it
   with collectives that communicate nothing (`benches.fsdp_profile`: FSDP's copies into and
   out of its buffers and the step on the shards included) and what the compressed reduce-scatter
   computes per unit (`benches.fsdp_codec`: encode of the p chunks, decode and sum of p
   payloads, the slowest rank's) at the units' sizes and sizes between them (not powers of
   two only: padding to a codec's blocks makes those its best case);
4. the timeline predicts each iteration from that profile, network (`fit.network_from_fit`)
   and codec costs (`fit.fsdp_codec_costs`), with the bench's units
   (`train_fsdp.unit_sizes`) and without overlap (gloo on a CPU: FSDP2 runs every
   collective in the compute thread), every method's compute slowed by the rate's compute
   slowdown lambda (`slowdown.fit_slowdowns`: fitted to the other rates' runs of the
   uncompressed `BASELINES`).

Tables in the output folder, appended as measured (an interrupted sweep resumes):
``collective-fsdp-<rate>.csv``, ``train-fsdp-<rate>.csv``,
``profile-fsdp-<model>-b<batch size>-<rate>.json``, ``fsdp-codec-<rate>.csv``,
``conditions-fsdp.csv``; the result in ``validation.csv``, ``validation.md`` and
``validation.png`` (as `validate`'s, lambda per rate in ``compute_slowdown`` and
``slowdown_source``). Nothing is fitted to the training runs judged, nothing
tuned per method.
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import torch

from ... import fsdp
from ...checks import check_choice, check_int
from ..benches import train_fsdp
from ..benches.collective import KEY_COLUMNS as COLLECTIVE_KEYS
from ..benches.collective import AFTER_COMPUTE_MS, collective_key
from ..benches.fsdp_codec import bench_fsdp_codec
from ..benches.hookpath import KEY_COLUMNS as CODEC_KEYS
from ..benches.hookpath import case_keys
from ..common.store import ResultTable, write_atomic
from ..common.units import format_rate, parse_rate
from ..model.fit import fit_collectives, fsdp_codec_costs, network_from_fit
from ..model.fsdp import predict_fsdp, units_of
from ..model.methods import resolve
from ..profiles.profiles import Profile, load_profile
from ..workloads.load import load_workload
from .slowdown import predict_with_slowdowns, read_once
from .testbed import Testbed
from ..common.conditions import conditions_at, record_conditions
from .validate import (DEFAULT_RATES, batch_args, compared, concurrent_parser, hook_warmup,
                       markdown, profile_path, rate_tag, run_job, say)

DEFAULT_METHODS = train_fsdp.DEFAULT_METHODS
METHODS = ("fsdp", *fsdp.METHODS)
COLLECTIVES = ("allgather", "reducescatter", "alltoall")
COLLECTIVE_SIZES = tuple(2**k for k in range(12, 25, 2))
#: The uncompressed runs lambda is fitted to: FSDP's own reduce-scatter and gradcomp's
#: uncompressed one (through the all-to-all).
BASELINES = ("fsdp", "none")
#: Timed repeats of each codec cost, after at most `CODEC_WARMUP` untimed ones.
CODEC_REPEATS, CODEC_WARMUP = 5, 2


def check_methods(methods) -> list[str]:
    """`methods` if each is "fsdp" or a `gradcomp.fsdp` method, else a ValueError naming
    the option."""
    methods = list(methods)
    if not methods:
        raise ValueError("methods=[] is not allowed: give at least one method")
    for m in methods:
        check_choice(m, "methods", METHODS)
    return methods


def units(model: str, batch_size: int | None) -> list[int]:
    """Parameters per FSDP unit (backward order) as the bench shards `model`; a ValueError
    naming `model`, before anything is measured, when the units are not consecutive
    gradients in backward order (the timeline's units, `model.fsdp.units_of`: e.g. a root
    holding LayerNorms between the Linears)."""
    built = load_workload(model, batch_size=batch_size).model
    sizes = train_fsdp.unit_sizes(built)
    backward = tuple(p.numel() for p in built.parameters())[::-1]
    try:
        units_of(Profile(model, sizes=backward, ready_s=(0.0,) * len(backward),
                         forward_s=0.0, backward_s=0.0, optimizer_s=0.0), 25.0, sizes)
    except ValueError as e:
        raise ValueError(f"model={model!r} is not allowed with --parallelism fsdp: its FSDP "
                         "units (each Linear, the root with the rest) are not consecutive "
                         f"gradients in backward order, as the FSDP timeline needs ({e})") from e
    return sizes


def collective_sizes(unit_numels, workers: int) -> list[int]:
    """`COLLECTIVE_SIZES` (4 KiB to 16 MiB: FSDP's payloads are a unit's, or a shard of it)
    up to the largest unit's bytes (at least two), in multiples of 4 `workers` bytes (the
    reduce-scatter and all-to-all split them in equal parts)."""
    top = 4 * max(unit_numels)
    return [n - n % (4 * workers) for n in COLLECTIVE_SIZES
            if n <= max(top, COLLECTIVE_SIZES[1])]


def codec_sizes(unit_numels, workers: int) -> list[int]:
    """The units' sizes padded to a multiple of `workers` (as FSDP pads), and four sizes
    spread geometrically from the smallest unit or 4096 elements, whichever is smaller, to the
    largest unit, moved off powers of two."""
    pad = [math.ceil(n / workers) * workers for n in unit_numels]
    lo, hi = min(min(pad), 4096), max(pad)
    spread = []
    for k in range(4):
        n = math.ceil(lo * (hi / lo) ** (k / 3) / workers) * workers
        spread.append(n + workers if n & (n - 1) == 0 else n)
    return sorted(set(pad) | set(spread))


def codec_methods(methods) -> list[str]:
    """The methods whose reduce-scatter has codec costs (all but FSDP's own)."""
    return [m for m in methods if m != "fsdp"]


def planned_keys(methods, spec: dict, workers: int, coll_sizes, codec: list[int]) -> dict:
    """The table keys (as stored) a rate's measurements need: "collective", "train",
    "codec"."""
    coll = ResultTable("collective.csv", COLLECTIVE_KEYS)
    table = ResultTable("codec.csv", CODEC_KEYS)
    return {"collective": {collective_key(coll, c, n, workers, "gloo", "cpu")
                           for c in COLLECTIVES for n in coll_sizes},
            "train": set(train_fsdp.plan_runs(methods, spec, workers, "gloo", "cpu",
                                              ResultTable("t.csv", train_fsdp.KEY_COLUMNS))),
            "codec": {table.key(k) for m in codec_methods(methods)
                      for k in case_keys(m, {}, codec, workers, "cpu", torch.float32, "cpu")}}


def paths(out: Path, rate_bps: float, model: str, batch_size: int) -> dict[str, Path]:
    """Where a rate's tables and profile are kept (module docstring)."""
    tag = rate_tag(rate_bps)
    prof = profile_path(out, rate_bps, model, batch_size)
    return {"collective": out / f"collective-fsdp-{tag}.csv",
            "train": out / f"train-fsdp-{tag}.csv", "codec": out / f"fsdp-codec-{tag}.csv",
            "profile": prof.with_name(prof.name.replace("profile-", "profile-fsdp-", 1))}


def measure_rate(out: Path, rate_bps: float, methods, spec: dict, given_batch: int | None,
                 workers: int, threads: int, coll_sizes, codec: list[int], planned: dict,
                 progress: bool, hook_repeats: int = CODEC_REPEATS) -> None:
    """The collective sweep, FSDP training with every method, then the profile and codec
    costs, in one testbed at `rate_bps`; what the tables already hold is skipped."""
    files = paths(out, rate_bps, spec["model"], spec["batch_size"])
    keys = {"collective": COLLECTIVE_KEYS, "train": train_fsdp.KEY_COLUMNS,
            "codec": CODEC_KEYS}
    need = {what: not planned[what] <= ResultTable(files[what], cols).done_keys()
            for what, cols in keys.items()}
    need["profile"] = not files["profile"].exists()
    if not any(need.values()):
        return
    rate, model = format_rate(rate_bps), spec["model"]
    say(progress, f"{rate}: testbed of {workers} namespaces (FSDP)")
    load, start = os.getloadavg()[0], time.monotonic()
    with Testbed(workers, rate_bps, threads=threads) as testbed:
        if need["collective"]:
            say(progress, f"{rate}: {', '.join(COLLECTIVES)} sweep")
            run_job(testbed, "gradcomp.evaluation.benches.collective",
                    ["--out", str(files["collective"]), "--backend", "gloo", "--collectives",
                     ",".join(COLLECTIVES), "--sizes", ",".join(map(str, coll_sizes)),
                     "--repeats", "9", "--warmup", "2",
                     "--after-compute-ms", repr(AFTER_COMPUTE_MS)], timeout=900)
        if need["train"]:
            say(progress, f"{rate}: FSDP training with {', '.join(methods)}")
            run_job(testbed, "gradcomp.evaluation.benches.train_fsdp",
                    ["--out", str(files["train"]), "--backend", "gloo", "--methods",
                     ",".join(methods), "--model", model, *batch_args(given_batch),
                     "--warmup", str(spec["warmup"]), "--iterations", str(spec["iterations"]),
                     "--bandwidth", repr(rate_bps)], timeout=1800)
        if need["profile"] or need["codec"]:
            say(progress, f"{rate}: profile and FSDP codec costs on every worker at once")
            run_job(testbed, "gradcomp.evaluation.testbed.validate_fsdp",
                    ["--model", model, *batch_args(given_batch),
                     "--methods", ",".join(codec_methods(methods)),
                     "--sizes", ",".join(map(str, codec)),
                     *(["--profile-out", str(files["profile"])] if need["profile"] else []),
                     *(["--codec-out", str(files["codec"])] if need["codec"] else []),
                     "--hook-repeats", str(hook_repeats)],
                    timeout=900)
    record_conditions(out / "conditions-fsdp.csv", rate_bps, load, start)


def concurrent_job(argv=None) -> int:
    """In every rank of a testbed (``python -m gradcomp.evaluation.testbed.validate_fsdp``):
    the model's profile (``--profile-out``) and the compressed reduce-scatter's costs
    (``--codec-out``), measured on all ranks at once; rank 0 writes them."""
    import torch.distributed as dist

    from ..benches.fsdp_profile import measure_fsdp_profile
    from ..common.env import init_from_env
    from ..profiles.profiles import save_measured

    args = concurrent_parser(concurrent_job.__doc__)
    args.add_argument("--sizes", default="", help="comma-separated elements per unit")
    a = args.parse_args(argv)
    init_from_env("gloo")
    try:
        save_measured(a.profile_out, measure_fsdp_profile, a.model, a.batch_size, repeats=20,
                      warmup=5)
        methods = [m for m in a.methods.split(",") if m]
        if a.codec_out and methods:
            dist.barrier()
            repeats = a.hook_repeats or CODEC_REPEATS
            bench_fsdp_codec(methods, [int(n) for n in a.sizes.split(",")],
                             dist.get_world_size(), repeats=repeats,
                             warmup=hook_warmup(repeats, CODEC_WARMUP),
                             out=a.codec_out if dist.get_rank() == 0 else None,
                             slowest_rank=True)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def rate_inputs(out: Path, rate_bps: float, planned: dict, spec: dict) -> SimpleNamespace:
    """What `predict_rate` prices at `rate_bps`, read from the tables and fitted: the training
    rows of `planned` (`train`), the fitted collectives (`fits`), the codec costs (`costs`),
    the profile and the load while measuring."""
    files = paths(out, rate_bps, spec["model"], spec["batch_size"])
    codecs = ResultTable(files["codec"], CODEC_KEYS).frame(planned["codec"])
    return SimpleNamespace(
        costs=fsdp_codec_costs(codecs) if len(codecs) else {},
        train=ResultTable(files["train"], train_fsdp.KEY_COLUMNS).frame(planned["train"]),
        fits=fit_collectives(ResultTable(files["collective"], COLLECTIVE_KEYS)
                             .frame(planned["collective"]), "time_mean_s"),
        profile=load_profile(files["profile"]),
        load=conditions_at(out / "conditions-fsdp.csv", rate_bps))


def predict_rate(out: Path, rate_bps: float, planned: dict, spec: dict,
                 unit_numels: list[int], compute_slowdown: float = 1.0,
                 inputs: SimpleNamespace | None = None) -> pd.DataFrame:
    """Predicted against measured for the training rows of `planned` at `rate_bps` (`inputs`:
    `rate_inputs`' of these, when already read); `compute_slowdown`: the network's
    (`Network.compute_slowdown`, 1: the profile's compute as measured)."""
    if inputs is None:
        inputs = rate_inputs(out, rate_bps, planned, spec)
    costs, train, fits, profile, load = (inputs.costs, inputs.train, inputs.fits,
                                         inputs.profile, inputs.load)
    rows = []
    for _, run in train.iterrows():
        network = dataclasses.replace(network_from_fit(fits, int(run["workers"]), rate_bps),
                                      compute_slowdown=compute_slowdown)
        pred = predict_fsdp(profile, network, timeline_method(run["method"], costs),
                            baseline_s=math.nan, unit_sizes=unit_numels, overlap=False)
        rows.append({**compared(rate_bps, run, pred, profile),
                     "rs_wire_bytes": pred.rs_wire_bytes,
                     **{f"{c}_{k}": fits[c].params[k] for c in COLLECTIVES
                        for k in ("bandwidth_bps", "alpha_s")},
                     **load})
    return pd.DataFrame(rows)


def timeline_method(name: str, costs: dict):
    """The timeline's method for a bench method: "fsdp" is FSDP's own reduce-scatter (the
    timeline's "none"); gradcomp's "none" goes through the all-to-all with its codec costs."""
    if name == "fsdp":
        return resolve("none")
    method = resolve(name, costs)
    return dataclasses.replace(method, name="none (all-to-all)") if name == "none" else method


def validate_fsdp_sweep(out, rates=DEFAULT_RATES, methods=DEFAULT_METHODS, model: str = "mlp",
                        batch_size: int | None = None, warmup: int = 2, iterations: int = 10,
                        workers: int = 2, threads: int = 1, progress: bool = True,
                        hook_repeats: int = CODEC_REPEATS) -> pd.DataFrame:
    """Measure, predict and compare (module docstring) into the folder `out` (resumed when it
    holds tables of an earlier run); returns the validation table, also written to
    ``validation.csv``, ``validation.md`` and ``validation.png``. `hook_repeats`: timed
    repeats of each codec cost (after `validate.hook_warmup` untimed ones)."""
    rates = [parse_rate(r, "rates") for r in rates]
    if not rates:
        raise ValueError("rates=[] is not allowed: give at least one rate")
    methods = check_methods(methods)
    check_int(hook_repeats, "hook_repeats", 1)
    spec = train_fsdp.make_spec(model, batch_size, warmup, iterations)
    unit_numels = units(model, batch_size)
    coll_sizes = collective_sizes(unit_numels, workers)
    codec = codec_sizes(unit_numels, workers)
    planned = planned_keys(methods, spec, workers, coll_sizes, codec)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    say(progress, f"results in {out}")
    for rate in rates:
        measure_rate(out, rate, methods, spec, batch_size, workers, threads, coll_sizes, codec,
                     planned, progress, hook_repeats)
    inputs = read_once(lambda rate, keys: rate_inputs(out, rate, keys, spec))

    def predict_at(rate: float, slowdown: float, keys: dict) -> pd.DataFrame:
        return predict_rate(out, rate, keys, spec, unit_numels, slowdown, inputs(rate, keys))

    plain = planned_keys([m for m in methods if m in BASELINES] or ["fsdp"], spec, workers,
                         coll_sizes, codec)  # the runs lambda is fitted to, priced alone
    table = predict_with_slowdowns(rates, predict_at, planned, plain, BASELINES)
    write_atomic(out / "validation.csv", table.to_csv(index=False))
    write_atomic(out / "validation.md", "FSDP2 (fully_shard on each Linear and the root; "
                 "fsdp: FSDP's own reduce-scatter). " + markdown(table))
    from ..report.plots import validation_sweep

    validation_sweep(table, out / "validation.png",
                     title=f"FSDP2: {model} on {workers} workers (gloo, {threads} thread "
                           "each): measured (points) and predicted (lines)")
    return table


if __name__ == "__main__":
    sys.exit(concurrent_job())
