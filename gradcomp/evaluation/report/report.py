"""The report of one evaluation run: from the measurement tables in a results folder, fit the
model, ask it about the chosen profile / workers / bandwidth, draw the figures and write
``report.md`` beside them. Every number in the report is computed from that folder's tables.

Inputs (any may be missing; its sections then say so): ``compress.csv`` (`bench_compress`),
``collective.csv`` (`bench_collective`), ``train.csv`` and ``train_profile.json``
(`bench_train`), ``converge.csv`` and its curve table (`converge`). Outputs: ``advise.csv``,
``speedup_sweep.csv``, ``scaling_sweep.csv``, ``codec_fits.csv``, ``collective_fits.csv``,
``train_validation.csv``, ``time_to_accuracy.csv``, the PNGs of `plots` and
`converge_plots`, and ``report.md``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ... import names
from ..analyses.advise import advise, verdict
from ..analyses.measured import train_predictions
from ..analyses.whatif import sweep
from ..benches.converge import CONVERGE
from ..common.env import environment
from ..common.store import ResultTable, write_atomic
from ..common.units import format_rate, parse_rate
from ..model.fit import codec_costs, fit_codec, fit_collectives, summary
from ..profiles.profiles import load_profile
from . import plots
from .converge_report import convergence_section

COMPRESS, COLLECTIVE, TRAIN = "compress.csv", "collective.csv", "train.csv"
TABLES = (COMPRESS, COLLECTIVE, TRAIN)
TRAIN_PROFILE = "train_profile.json"
SWEEP, VALIDATION = "speedup_sweep.csv", "train_validation.csv"
HEAT_WORKERS = (2, 4, 8, 16, 32, 64, 128)
HEAT_BANDWIDTHS = tuple(g * 1e9 for g in (1, 2.5, 5, 10, 25, 40, 100, 200, 400))
ASSUMED = "assumed (memory-bound floors)"
ENV_COLUMNS = ("device_name", "cpu", "torch_version", "gradcomp_version", "python_version",
               "hostname")


@dataclass(frozen=True)
class Report:
    """What `write_report` wrote: the results `folder`, the `path` of its ``report.md`` and
    the `verdicts` the report computed, as they stand there (markdown list items): one per
    source of encode/decode costs, then time to accuracy when the folder's convergence runs
    give one."""
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


def load_tables(results_dir) -> dict[str, pd.DataFrame]:
    """The measurement tables of `results_dir` by file name (empty when missing)."""
    return {name: ResultTable(Path(results_dir) / name).frame()
            for name in TABLES}


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


def _advice(out: Path, profile, workers, bandwidth, bucketing, latency_s, methods,
            sources) -> tuple[list[str], list[str], str | None]:
    """The verdict and ranking sections, their verdict lines, and the best method other
    than none (first source; None when there is none)."""
    verdicts, tables = [], []
    for label, costs in sources.items():
        table = advise(profile, workers, bandwidth, methods, costs, bucketing, latency_s)
        tables.append(table.assign(cost_source=label))
        verdicts.append(f"- **Encode/decode costs {label}:** {verdict(table)}")
    lines = ["## Verdict", "", *verdicts]
    _save_csv(pd.concat(tables, ignore_index=True), out / "advise.csv")
    p = load_profile(profile)
    lines += ["", f"Question: profile `{p.name}` on {workers} workers at "
                  f"{format_rate(parse_rate(bandwidth))}, {bucketing} bucketing"
                  + (f", latency {latency_s * 1e6:g} us per hop" if latency_s else "")
                  + ". Profile "
                  f"source: {p.source or 'not recorded'}"]
    if len(sources) > 1:
        lines.append("The profile's device and the device whose encode/decode costs were "
                     "measured may differ: the verdicts with measured and with assumed costs "
                     "show how much that matters.")
    lines.append("")
    for label, table in zip(sources, tables):
        lines += [f"### Ranking, costs {label}", "", _md(table, {
            "rank": ("rank", _num("d")), "method": ("method", _text),
            "aggregation": ("aggregation", _text),
            "t_iter_s": ("iteration (ms)", _num(".2f", 1e3)), "sf": ("SF", _num(".3f")),
            "speedup": ("speedup", _num(".2f")), "compression": ("compression", _num(".3g")),
            "exposed_comm_s": ("exposed comm (ms)", _num(".2f", 1e3)),
            "codec_s": ("encode+decode (ms)", _num(".2f", 1e3)), "costs": ("costs", _text)}),
            ""]
    others = tables[0][tables[0]["method"] != "none"]["method"]
    return lines, verdicts, others.iloc[0] if len(others) else None


def _whatif(out: Path, profile, workers, bandwidth, bucketing, latency_s, methods, sources,
            best: str | None) -> list[str]:
    curves = pd.concat([sweep(profile, workers=workers, methods=methods, costs=costs,
                              bucketing=bucketing, latency_s=latency_s).assign(costs=label)
                        for label, costs in sources.items()], ignore_index=True)
    _save_csv(curves, out / SWEEP)
    plots.speedup_vs_bandwidth(curves, out / "speedup_vs_bandwidth.png")
    label, costs = next(iter(sources.items()))
    shown = ["none"] + ([best] if best else [])
    heat = sweep(profile, HEAT_BANDWIDTHS, HEAT_WORKERS, shown, costs=costs,
                 bucketing=bucketing, latency_s=latency_s).assign(costs=label)
    _save_csv(heat, out / "scaling_sweep.csv")
    plots.scaling_heatmap(heat, out / "scaling_heatmap.png")
    return ["## What if", "",
            "Modelled speedup over uncompressed for every method, 1-400 Gbit/s "
            "(`speedup_sweep.csv`):", "", "![speedup vs bandwidth](speedup_vs_bandwidth.png)",
            "", "Scaling factor over bandwidth x workers, uncompressed"
                + (f" and {best} (the best other method at {format_rate(parse_rate(bandwidth))}"
                   f", costs {label})" if best else "") + " (`scaling_sweep.csv`):", "",
            "![scaling factor](scaling_heatmap.png)", ""]


def _codec(out: Path, compress: pd.DataFrame, fits: dict) -> list[str]:
    lines = ["## Encode/decode costs", ""]
    if compress.empty:
        return lines + ["Not measured in this run (no `compress.csv`): the model used the "
                        "assumed memory-bound floors.", ""]
    table = summary(fits)
    _save_csv(table, out / "codec_fits.csv")
    plots.codec_costs(compress, out / "codec_costs.png", fits)
    wide = table.pivot(index="method", columns="phase", values=["a", "b", "r2", "n"])
    wide.columns = [f"{v}_{p}" for v, p in wide.columns]
    wide = wide.reindex(list(dict.fromkeys(compress["method"]))).reset_index()
    device = compress["device_name"].iloc[0]
    sizes = ", ".join(f"{n:,}" for n in sorted(compress["numel"].unique()))
    return lines + [f"Fitted `a + b*numel` per application on {device} (sizes {sizes} "
                    "elements; `codec_fits.csv`):", "", _md(wide, {
                        "method": ("method", _text),
                        "a_encode": ("encode a (us)", _num(".3g", 1e6)),
                        "b_encode": ("encode b (ns/element)", _num(".3g", 1e9)),
                        "r2_encode": ("encode R^2", _num(".3f")),
                        "a_decode": ("decode a (us)", _num(".3g", 1e6)),
                        "b_decode": ("decode b (ns/element)", _num(".3g", 1e9)),
                        "r2_decode": ("decode R^2", _num(".3f")),
                        "n_encode": ("sizes", _num(".0f"))}),
                    "", "![encode and decode costs](codec_costs.png)", ""]


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


def _train(out: Path, train: pd.DataFrame, collective_fits: dict, costs: dict) -> list[str]:
    lines = ["## Training: measured vs predicted", ""]
    profile_path = out / TRAIN_PROFILE
    if train.empty or not collective_fits or not profile_path.exists():
        return lines + ["Not available: needs `train.csv`, `train_profile.json` and "
                        "`collective.csv` from this run.", ""]
    try:
        table = train_predictions(train, load_profile(profile_path), collective_fits, costs)
    except ValueError as e:
        return lines + [f"Not available: {e}.", ""]
    _save_csv(table, out / VALIDATION)
    plots.predicted_vs_measured(table, out / "predicted_vs_measured.png")
    rel = table["rel_error"].abs()
    row = train.iloc[0]
    return lines + [
        f"Model `{row['model']}` ({int(row['params']):,} parameters, batch "
        f"{int(row['batch_size'])} per worker), {int(row['world_size'])} {row['backend']} "
        f"workers, median of {int(row['iterations'])} iterations after {int(row['warmup'])} "
        f"warm-up. Predicted from this run's other measurements only: the model's profile "
        f"(`{TRAIN_PROFILE}`), the collective fits as the network and the codec fits (methods "
        "without them: assumed costs); contention 1; no parameter fitted to these runs. "
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
                 bucketing: str = "ddp", latency_s: float = 0.0) -> Report:
    """Analyse the tables in `results_dir` and write ``report.md`` there: the verdict and
    ranking for `profile` on `workers` at `bandwidth` (`bucketing`, `latency_s` per hop),
    what-if curves, the fits, the training validation, the figures and the environment.
    Returns its path and verdicts (`Report`). A folder that does not exist or holds none of
    the measurement tables is a ValueError: the report would claim numbers it has not."""
    out = Path(results_dir)
    check_results(out)
    tables = load_tables(out)
    compress, collective, train = tables[COMPRESS], tables[COLLECTIVE], tables[TRAIN]
    codec_fits = fit_codec(compress) if not compress.empty else {}
    costs = codec_costs(codec_fits)
    collective_fits = fit_collectives(collective) if not collective.empty else {}
    methods = list(dict.fromkeys(compress["method"])) if costs else names()
    sources = {ASSUMED: {}}
    if costs:
        sources = {f"measured on {compress['device_name'].iloc[0]}": costs, **sources}
    lines = ["# gradcomp evaluation report", "",
             f"Results folder `{out}`; all numbers below were computed from its tables.", ""]
    advice, verdicts, best = _advice(out, profile, workers, bandwidth, bucketing, latency_s,
                                     methods, sources)
    lines += advice
    lines += _whatif(out, profile, workers, bandwidth, bucketing, latency_s, methods, sources,
                     best)
    lines += _codec(out, compress, codec_fits)
    lines += _collectives(out, collective, collective_fits)
    lines += _train(out, train, collective_fits, costs)
    convergence, tta = convergence_section(out, profile, workers, bandwidth, bucketing, costs,
                                           latency_s)
    lines += convergence
    lines += _environment(tables)
    path = write_atomic(out / "report.md", "\n".join(lines))
    return Report(out, path, (*verdicts, *([tta] if tta else [])))
