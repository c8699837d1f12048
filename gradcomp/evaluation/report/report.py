"""The report of one evaluation run: from the measurement tables in a results folder, fit the
model, ask it about the chosen profile / workers / bandwidth, draw the figures and write
``report.md`` beside them. Every number in the report is computed from that folder's tables.

Inputs (any may be missing; its sections then say so): ``compress.csv`` (`bench_compress`),
``collective.csv`` (`bench_collective`), ``train.csv``, ``train_profile.json`` and
``hook.csv`` (`bench_train`: its runs, profile and hook-path costs), ``converge.csv`` and
its curve table (`converge`). Outputs: ``advise.csv``, ``speedup_sweep.csv``,
``scaling_sweep.csv``, ``codec_fits.csv``, ``collective_fits.csv``, ``train_validation.csv``,
``cluster_fit.json`` (`cluster_report`), ``time_to_accuracy.csv``, the PNGs of `plots` and
`converge_plots`, and ``report.md``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ... import diloco, names
from ..analyses import weighed
from ..analyses.evidence import Evidence, evidence_of, network_spread, with_intervals
from ..analyses.measured import NOT_PREDICTED, train_predictions
from ..analyses.recommend import (best_safe, choose, question_gpu, question_text, ranked,
                                  recommend_by_accuracy, recommend_by_iteration, sixteen_bit)
from ..analyses.whatif import sweep
from ..benches.converge import CONVERGE, curve_path
from ..common.env import environment
from ..common.store import ResultTable, write_atomic
from ..model.cost_tables import ASSUMED  # noqa: F401 - the notebook's label for assumed costs
from ..model.cluster import Cluster, resolve_cluster
from ..model.cost_tables import CostTable, cost_table, default_costs, measured_table, same_gpu
from ..model.methods import method_spec
from ..model.fit import codec_costs, fit_codec, fit_collectives, poor_fits, summary
from ..profiles.profiles import load_profile
from . import plots
from .cluster_report import cluster_section
from .converge_report import convergence_section

COMPRESS, COLLECTIVE, TRAIN, HOOK = "compress.csv", "collective.csv", "train.csv", "hook.csv"
TABLES = (COMPRESS, COLLECTIVE, TRAIN)
TRAIN_PROFILE = "train_profile.json"
SWEEP, VALIDATION = "speedup_sweep.csv", "train_validation.csv"
HEAT_WORKERS = (2, 4, 8, 16, 32, 64, 128)
HEAT_BANDWIDTHS = tuple(g * 1e9 for g in (1, 2.5, 5, 10, 25, 40, 100, 200, 400))
ENV_COLUMNS = ("device_name", "cpu", "torch_version", "gradcomp_version", "python_version",
               "hostname")


@dataclass(frozen=True)
class Report:
    """What `write_report` wrote: the results `folder`, the `path` of its ``report.md`` and
    the `verdicts` as they stand there (markdown list items): exactly one, the
    recommendation (`analyses.recommend`)."""
    folder: Path
    path: Path
    verdicts: tuple[str, ...]


def check_results(results_dir) -> Path:
    """`results_dir` as a Path, when it is a folder holding at least one measurement table
    of `gradcomp run`; else a ValueError naming it and what it lacks."""
    out = Path(results_dir)
    why = ("no such folder" if not out.exists() else "it is not a folder" if not out.is_dir()
           else None if any((out / t).is_file() for t in (*TABLES, CONVERGE)) else
           f"it holds none of {', '.join((*TABLES, CONVERGE))}")
    if why:
        raise ValueError(f"results={str(out)!r} is not allowed: {why}; give a folder written "
                         "by `gradcomp run --out FOLDER`")
    return out


def copy_measurements(results_dir, out_dir) -> Path:
    """Copy the measurement tables of results folder `results_dir` into `out_dir`, a new
    folder (a ValueError when it exists), so that a report of another question goes there
    and the folder's own report stays as it was."""
    src, out = check_results(results_dir), Path(out_dir)
    if out.exists():
        raise ValueError(f"out={str(out)!r} is not allowed: it exists; give a new folder")
    out.mkdir(parents=True)
    for name in (*TABLES, HOOK, TRAIN_PROFILE, CONVERGE, curve_path(CONVERGE).name):
        if (src / name).is_file():
            write_atomic(out / name, (src / name).read_text())
    return out


def load_tables(results_dir) -> dict[str, pd.DataFrame]:
    """The measurement tables of `results_dir` by file name (empty when missing)."""
    return {name: ResultTable(Path(results_dir) / name).frame()
            for name in (*TABLES, HOOK)}


def _md(frame: pd.DataFrame, columns: dict) -> str:
    """A markdown table of `frame`: {column: (header, formatter)}; numbers right-aligned."""
    cells = pd.DataFrame({header: [fmt(v) for v in frame[col]]
                          for col, (header, fmt) in columns.items()})
    align = ["left" if fmt is _text else "right" for _, fmt in columns.values()]
    return cells.to_markdown(index=False, disable_numparse=True, colalign=align)


def _num(spec: str, scale: float = 1.0):
    return lambda v: format(v if scale == 1 else v * scale, spec)


def _text(v) -> str:
    return str(v)


def _save_csv(frame: pd.DataFrame, path: Path) -> None:
    write_atomic(path, frame.to_csv(index=False))


def _as_method(row) -> str:
    """A ranked variant's method as `resolve` takes it: a DiLoCo variant with its options
    (``diloco:H=10,method=int8,...``), else its name."""
    if row["method"] != diloco.NAME:
        return row["method"]
    return method_spec(row["method"], json.loads(row["options"]))


def _ranking(out: Path, profile, net: dict, bucketing, methods, table: CostTable,
             evidence: Evidence, device: str) -> tuple[list[str], pd.DataFrame]:
    """The supporting ranking by predicted iteration time (`advise.csv`) of the methods the
    table prices on the network `net` (`Cluster.question`), weighed (`weighed.ranking`),
    and its section; `device`: the GPU the codecs and the 16-bit baseline run on
    (`question_gpu`)."""
    ranking = weighed.ranking(profile, net, table, evidence, methods, device=device,
                              bucketing=bucketing)
    _save_csv(ranking.assign(cost_table=table.name), out / "advise.csv")
    p = load_profile(profile)
    half = sixteen_bit(device)
    excluded = table.excluded
    gpu = ("" if same_gpu(device, p.device) else
           f"; codecs and the 16-bit baseline on the cluster's {device}")
    lines = [f"Profile source: {p.source or 'not recorded'} (device: "
             f"{p.device or 'not recorded'}{gpu}). Codec costs: {table.provenance}.", ""]
    if table.changed:
        measured = (f"the {table.scaled_from} measurement that table `{table.name}` was "
                    "scaled from" if table.scaled_from else
                    f"table `{table.name}` was measured")
        lines += [f"Kernels changed since {measured}: "
                  f"{', '.join(table.changed)} (see the encode/decode section).", ""]
    if excluded:
        lines += ["Not priced (codec fit excluded, never ranked or recommended): "
                  + "; ".join(f"{m} ({why})" for m, why in excluded.items()) + ".", ""]
    lines += [f"### Supporting ranking: predicted time per iteration, costs {table.label}", "",
              "Iteration time only (convergence not included); `none` is fp32 DDP and "
              f"`{half}` a {half} all-reduce, the two baselines (`advise.csv`). Intervals "
              f"from: {evidence.describe(ranking['method'])}.", "",
              _md(with_intervals(ranking), {
                  "rank": ("rank", _num("d")), "method": ("method", _text),
                  "aggregation": ("aggregation", _text),
                  "t_iter_s": ("iteration (ms)", _num(".2f", 1e3)), "sf": ("SF", _num(".3f")),
                  "speedup": ("speedup vs fp32 (interval)", _text),
                  "vs_16bit": (f"vs {half} (interval)", _text),
                  "compression": ("compression", _num(".3g")),
                  "exposed_comm_s": ("exposed comm (ms)", _num(".2f", 1e3)),
                  "codec_s": ("codec (ms)", _num(".2f", 1e3)),
                  "costs": ("costs", _text)}), ""]
    borrowed = ranking[ranking["costs"].str.startswith("fitted: ")]
    if len(borrowed):
        lines += ["Priced with their method's default options, the table having no row for "
                  "the variant: " + ", ".join(borrowed["method"]) + ".", ""]
    return lines, ranking


def _whatif(out: Path, profile, net: dict, bucketing, methods, table: CostTable,
            evidence: Evidence, best: str | None, device: str) -> list[str]:
    methods = list(dict.fromkeys(ranked(["none", sixteen_bit(device), *methods], device,
                                        table)))  # the baselines first
    common = dict(bucketing=bucketing, latency_s=net["latency_s"],
                  efficiency=net["efficiency"], tiers=net["tiers"])
    curves = weighed.sweep(profile, net, table, evidence, methods, device,
                           bucketing).assign(costs=table.name)
    _save_csv(curves, out / SWEEP)
    plots.speedup_vs_bandwidth(curves, out / "speedup_vs_bandwidth.png",
                               scenario_bps=net["bandwidth"], recommended=best)
    shown = list(dict.fromkeys(["none"] + ([best] if best else [])))
    per_node = net["tiers"].get("gpus_per_node", 1)
    heat = sweep(profile, HEAT_BANDWIDTHS, [w for w in HEAT_WORKERS if w % per_node == 0],
                 shown, costs=table.costs, **common).assign(costs=table.name)
    _save_csv(heat, out / "scaling_sweep.csv")
    plots.scaling_heatmap(heat, out / "scaling_heatmap.png",
                          scenario=(net["workers"], net["bandwidth"]))
    return ["## What if", "",
            f"Modelled speedup over fp32 DDP for every priced method, 1-400 Gbit/s, codec "
            f"costs {table.label}, each with its interval as the ranking weighs it (columns "
            "`speedup_low` / `speedup_high`, drawn as a band for the baselines and the "
            "recommendation; `speedup_vs_bandwidth.png`, `speedup_sweep.csv`):", "",
            "![speedup vs bandwidth](speedup_vs_bandwidth.png)", "",
            "Scaling factor over bandwidth x workers, fp32 DDP"
            + (f" and the recommended method's {best}" if best and best != "none" else "")
            + " (`scaling_sweep.csv`; the scenario's cell outlined in red where the grid "
            "has it):", "", "![scaling factor](scaling_heatmap.png)", ""]


def _fit_table(fits: dict, order) -> str:
    table = summary(fits)
    wide = table.pivot(index="method", columns="phase",
                       values=["a", "b", "r2", "worst_rel_residual", "n", "status"])
    wide.columns = [f"{v}_{p}" for v, p in wide.columns]
    wide = wide.reindex([m for m in dict.fromkeys(order) if m in wide.index]).reset_index()
    return _md(wide, {
        "method": ("method", _text),
        "a_encode": ("encode a (us)", _num(".3g", 1e6)),
        "b_encode": ("encode b (ns/el.)", _num(".3g", 1e9)),
        "r2_encode": ("encode R^2", _num(".3f")),
        "worst_rel_residual_encode": ("encode worst", _num(".0%")),
        "status_encode": ("encode fit", _text),
        "a_decode": ("decode a (us)", _num(".3g", 1e6)),
        "b_decode": ("decode b (ns/el.)", _num(".3g", 1e9)),
        "r2_decode": ("decode R^2", _num(".3f")),
        "worst_rel_residual_decode": ("decode worst", _num(".0%")),
        "status_decode": ("decode fit", _text),
        "n_encode": ("points", _num(".0f"))})


FIT_RULE = ("Fit: `a + b*numel` by least squares weighted by 1/time (small sizes count), a "
            "point > 50% and 4x the median off the line dropped as an outlier (up to a third; "
            "`codec_fits.csv` names them); worst: the largest |relative residual| of the "
            "points used. A fit with R^2 < 0.9 is excluded and its method not priced, unless "
            "every point lies within 20% of it (`flat`: a cost that hardly grows with size, "
            "where R^2 has nothing to explain); one with R^2 >= 0.9 is `ok` when every point "
            "lies within 50% of it, else `rough` (priced; the cost bends away from a line). "
            "Measured with sizes and repeats interleaved, a point > 50% off its method's line "
            "measured again (up to twice) and its least disturbed attempt kept.")


def _codec(out: Path, compress: pd.DataFrame, fits: dict, table: CostTable,
           emphasised) -> list[str]:
    lines = ["## Encode/decode costs", ""]
    if compress.empty:
        lines += ["Not measured on this machine in this run (no `compress.csv`).", ""]
    else:
        _save_csv(summary(fits), out / "codec_fits.csv")
        plots.codec_costs(compress, out / "codec_costs.png", fits, emphasised=emphasised)
        device = compress["device_name"].iloc[0]
        sizes = ", ".join(f"{n:,}" for n in sorted(compress["numel"].unique()))
        poor = poor_fits(fits)
        lines += [f"Measured on this machine ({device}; sizes {sizes} elements; "
                  "`codec_fits.csv`). " + FIT_RULE, "", _fit_table(fits, compress["method"]),
                  "", "Excluded here: " + ("; ".join(f"{m} ({why})" for m, why in
                                                    poor.items()) if poor else "none") + ".",
                  "", "![encode and decode costs](codec_costs.png)", ""]
    if table.fits and table.name != "measured":
        lines += [f"The question is priced with table {table.label}: {table.provenance}.", "",
                  _fit_table(table.fits, [m for m, _ in table.fits]), "",
                  *[f"- {note}" for note in table.notes], ""]
    elif not table.fits:
        lines += [f"The question is priced with {table.label}: {table.provenance}.", ""]
    return lines


def _collectives(out: Path, collective: pd.DataFrame, fits: dict) -> list[str]:
    lines = ["## Collectives", ""]
    if collective.empty:
        return lines + ["Not measured in this run (no `collective.csv`).", ""]
    table = summary(fits)
    _save_csv(table, out / "collective_fits.csv")
    plots.collective_times(collective, out / "collective_times.png", fits)
    where = ", ".join(sorted({f"{b}, {p} workers" for b, p in
                              zip(collective["backend"], collective["world_size"])}))
    return lines + [f"Alpha-beta fits ({where}; `collective_fits.csv`):", "", _md(table, {
        "collective": ("collective", _text), "alpha_s": ("alpha (us)", _num(".3g", 1e6)),
        "bandwidth_bps": ("bandwidth (Gbit/s)", _num(".3g", 1e-9)),
        "r2": ("R^2", _num(".3f")), "n": ("n", _num("d")),
        "rmse": ("RMSE (us)", _num(".3g", 1e6))}),
        "", "![collective times](collective_times.png)", ""]


def _train(out: Path, train: pd.DataFrame, collective_fits: dict, codec_fits: dict,
           hook: pd.DataFrame) -> list[str]:
    lines = ["## Training: measured vs predicted", ""]
    profile_path = out / TRAIN_PROFILE
    if train.empty or not collective_fits or not profile_path.exists():
        return lines + ["Not available: needs `train.csv`, `train_profile.json` and "
                        "`collective.csv` from this run.", ""]
    if not hook.empty:  # what the hook computes per bucket, priced once per bucket
        hook_table = measured_table(hook, HOOK)
        costs, excluded = hook_table.costs, hook_table.excluded
        costs_text = (f"the hook-path costs measured with it (`{HOOK}`: what each method's "
                      "hook computes per bucket, at the model's bucket sizes, every worker at "
                      "once)")
    else:
        costs, excluded = codec_costs(codec_fits, usable_only=True), poor_fits(codec_fits)
        costs_text = (f"this machine's codec fits (`{COMPRESS}`; the hook-path costs, "
                      f"`{HOOK}`, were not measured)")
    try:
        table = train_predictions(train, load_profile(profile_path), collective_fits, costs,
                                  excluded)
    except ValueError as e:
        return lines + [f"Not available: {e}.", ""]
    _save_csv(table, out / VALIDATION)
    predicted = table[table["costs"] != NOT_PREDICTED]
    plots.predicted_vs_measured(predicted.assign(method=[
        m if c in ("fitted", "none") else f"{m} (assumed)"
        for m, c in zip(predicted["method"], predicted["costs"])]),
        out / "predicted_vs_measured.png")
    rel = predicted["rel_error"].abs()
    row = train.iloc[0]
    return lines + [
        f"Model `{row['model']}` ({int(row['params']):,} parameters, batch "
        f"{int(row['batch_size'])} per worker), {int(row['world_size'])} {row['backend']} "
        f"workers, median of {int(row['iterations'])} iterations after {int(row['warmup'])} "
        f"warm-up. Predicted from this run's other measurements only: the model's profile "
        f"(`{TRAIN_PROFILE}`), the collective fits as the network and {costs_text}; methods "
        "without a usable fit are priced with assumed costs, as the costs column says; "
        "contention 1; no parameter fitted to these runs. "
        "`ddp` (DDP without a hook) is modelled as `none`.", "",
        f"Relative error: mean |e| {rel.mean():.1%}, max |e| {rel.max():.1%} "
        "(`train_validation.csv`).", "", _md(table, {
            "method": ("method", _text), "measured": ("measured (ms)", _num(".2f", 1e3)),
            "predicted": ("predicted (ms)", _num(".2f", 1e3)),
            "rel_error": ("relative error", _num("+.1%")), "costs": ("costs", _text)}),
        "", "![predicted vs measured](predicted_vs_measured.png)", ""]


def _environment(tables: dict) -> list[str]:
    env = environment()
    lines = ["## Environment", "", _md(pd.DataFrame(
        {"k": list(ENV_COLUMNS), "v": [env[c] for c in ENV_COLUMNS]}),
        {"k": ("report written on", _text), "v": ("", _text)}), ""]
    rows = [{"table": name, "rows": len(t),
             "devices": ", ".join(sorted(map(str, t["device_name"].unique()))),
             "backends": ", ".join(sorted(map(str, t["backend"].unique()))),
             "taken": f"{t['date'].min()} .. {t['date'].max()}"}
            for name, t in tables.items() if not t.empty]
    if rows:
        frame = pd.DataFrame(rows)
        lines += [_md(frame, {c: (c, _text) for c in frame.columns}), ""]
    return lines


def write_report(results_dir, profile="resnet50", workers: int = 8, bandwidth="10gbit",
                 bucketing: str = "ddp", latency_s: float = 0.0, costs=None,
                 cluster: tuple[Cluster, int] | None = None, methods=None) -> Report:
    """Analyse the tables in `results_dir` and write ``report.md`` there: one recommendation
    for `profile` on `workers` at `bandwidth` (`bucketing`, `latency_s` per hop), or on
    `cluster` (a `Cluster` and its node count, `cluster.resolve_cluster`), priced with
    the codec-cost table `costs` (a `cost_tables` name or CSV; None: the table of the
    question's GPU, `question_gpu`: the cluster's when it names one, else the profile's
    device; the 16-bit baseline is that GPU's too; for a profile measured on this machine
    the cluster takes the efficiency and compute slowdown fitted here, `cluster_report`),
    the supporting ranking, what-if curves, the fits, the training validation, the
    cluster fitted here, convergence, the figures and the environment.
    `methods` (names or ``name:key=value,...``): those priced (None: the compress table's).
    Returns its path and verdict (`Report`). A folder that does not exist or holds none of
    the measurement tables is a ValueError: the report would claim numbers it has not."""
    out = Path(results_dir)
    check_results(out)
    tables = load_tables(out)
    compress, collective, train = tables[COMPRESS], tables[COLLECTIVE], tables[TRAIN]
    prof = load_profile(profile)
    nodes_of, nodes = cluster or resolve_cluster(None, workers, bandwidth_bps=bandwidth,
                                                 latency_s=latency_s)
    device = question_gpu(nodes_of, prof.device)
    table = cost_table(costs if costs is not None else
                       default_costs(device, not compress.empty), compress)
    codec_fits = fit_codec(compress) if not compress.empty else {}
    collective_fits = fit_collectives(collective) if not collective.empty else {}
    if methods is None:
        methods = list(dict.fromkeys(compress["method"])) if not compress.empty else names()
    nodes_of, fitted_lines = cluster_section(out, collective, train, collective_fits,
                                             out / TRAIN_PROFILE, nodes_of, prof)
    net = nodes_of.question(nodes)
    question = question_text(profile, nodes_of, nodes, bucketing)
    fitted = "efficiency" in nodes_of.measured and not collective.empty
    evidence = evidence_of(table, network_spread(collective) if fitted else 0.0,
                           f"fitted from `{COLLECTIVE}` (two standard errors of the "
                           "all-reduce's slope)")
    ranking_lines, ranking = _ranking(out, profile, net, bucketing, methods, table, evidence,
                                      device)
    convergence, tta = convergence_section(out, profile, net, table, evidence, bucketing,
                                           device)
    if tta is not None:
        flips = weighed.accuracy_flips(ResultTable(out / CONVERGE).frame(), tta, profile, net,
                                       table, evidence, device=device, bucketing=bucketing)
        verdict = recommend_by_accuracy(tta, table, device, question, evidence, flips,
                                        compute_device=prof.device)
        best = choose(tta, table, device).row
        best_method = None if best is None else _as_method(best)
    else:
        verdict = recommend_by_iteration(ranking, table, device, question, evidence,
                                         weighed.ranking_flips(profile, net, table, device,
                                                               bucketing=bucketing),
                                         compute_device=prof.device)
        best_method = best_safe(ranking, table, device)["method"]
    lines = ["# gradcomp evaluation report", "",
             f"Results folder `{out}`; all numbers below were computed from its tables.", "",
             "## Verdict", "", verdict, "", *ranking_lines]
    lines += _whatif(out, profile, net, bucketing, methods, table, evidence, best_method,
                     device)
    lines += _codec(out, compress, codec_fits, table,
                    [m for m in ("none", sixteen_bit(device), best_method) if m])
    lines += _collectives(out, collective, collective_fits)
    lines += _train(out, train, collective_fits, codec_fits, tables[HOOK])
    lines += fitted_lines
    lines += convergence
    lines += _environment(tables)
    path = write_atomic(out / "report.md", "\n".join(lines))
    return Report(out, path, (verdict,))
