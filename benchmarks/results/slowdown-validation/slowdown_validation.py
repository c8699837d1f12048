"""Does the compute slowdown (`Network.compute_slowdown`, MLSys 2022's lambda) improve the
model on the testbed's measurements, out of sample?

Per testbed folder and rate, every method is predicted exactly as `gradcomp validate` does
(`validate.predict_rate`, all rows of the folder's tables) with lambda = 1, with lambda fitted
(`fit.fit_slowdown`) to the uncompressed runs (ddp, none) of that rate ("in-rate": the
compressed methods are out of sample), and with lambda fitted to the uncompressed runs of the
folder's OTHER rates ("leave-rate-out": every method is out of sample); and with the lambda
that `cluster_fit.fit_runs_slowdown` (the verdict's fit) gets from that rate's uncompressed runs
("verdict in-rate": it prices them without the hook-path cost that `predict_rate` gives method
none, so its lambda absorbs that cost too).

    PYTHONPATH=$PWD python benchmarks/results/slowdown-validation/slowdown_validation.py

writes ``slowdown_validation.csv`` (one row per run and variant) and ``README.md`` here.
"""
from __future__ import annotations

import datetime
import sys
from pathlib import Path

import pandas as pd

from gradcomp.evaluation.analyses.cluster_fit import UNCOMPRESSED, fit_runs_slowdown
from gradcomp.evaluation.common.store import write_atomic
from gradcomp.evaluation.common.units import format_rate, parse_rate
from gradcomp.evaluation.model.fit import fit_collectives, fit_slowdown
from gradcomp.evaluation.profiles.profiles import load_profile
from gradcomp.evaluation.testbed.validate import (DEFAULT_RATES, pooled_inputs, predict_rate,
                                                  rate_tag)

HERE = Path(__file__).parent
RESULTS = HERE.parent
RATES = tuple(parse_rate(r, "rates") for r in DEFAULT_RATES)  # as every folder has
EVERY_ROW = {"train": None, "hook": None, "collective": None}
VARIANTS = ("lambda=1", "in-rate", "leave-rate-out", "verdict in-rate")


def readable(folder: Path) -> bool:
    """A `gradcomp validate` folder of the MLP at batch 64 with hook-path costs per rate
    (older folders priced codecs from ``compress-*.csv``, which `predict_rate` does not read)."""
    return all((folder / f"{kind}-{rate_tag(r)}{ext}").exists() for r in RATES
               for kind, ext in (("hook", ".csv"), ("train", ".csv"),
                                 ("profile-mlp-b64", ".json")))


def predicted(folder: Path, rate: float, slowdown: float) -> pd.DataFrame:
    shared = pooled_inputs(folder, [rate], None, "mlp", 64)  # each rate's own, as in this study
    table = predict_rate(folder, rate, EVERY_ROW, shared, compute_slowdown=slowdown)
    return table[table["method"] != "auto"]


def fitted_lambda(folder: Path, rates) -> float:
    """Lambda fitted to the uncompressed runs of `rates`, each predicted by `predict_rate`."""
    def uncompressed(slowdown):
        return pd.concat([predicted(folder, r, slowdown) for r in rates]).query(
            "method in @UNCOMPRESSED")

    return fit_slowdown(uncompressed(1.0)["measured"],
                        lambda s: uncompressed(s)["predicted"]).params["compute_slowdown"]


def verdict_lambda(folder: Path, rate: float) -> float:
    """`fit_runs_slowdown` on the rate's tables, as the verdict fits lambda."""
    tag = rate_tag(rate)
    train = pd.read_csv(folder / f"train-{tag}.csv")
    allreduce = fit_collectives(pd.read_csv(folder / f"collective-{tag}.csv"))["allreduce"]
    profile = load_profile(folder / f"profile-mlp-b64-{tag}.json")
    return fit_runs_slowdown(train, profile, allreduce).params["compute_slowdown"]


def folder_rows(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every run under each variant (column variant, lambda), and the lambdas per rate."""
    runs, lambdas = [], []
    for rate in RATES:
        others = [r for r in RATES if r != rate]
        fits = {"lambda=1": 1.0, "in-rate": fitted_lambda(folder, [rate]),
                "leave-rate-out": fitted_lambda(folder, others),
                "verdict in-rate": verdict_lambda(folder, rate)}
        lambdas.append({"folder": folder.name, "rate": format_rate(rate),
                        **{v: fits[v] for v in VARIANTS[1:]}})
        for variant, slowdown in fits.items():
            runs.append(predicted(folder, rate, slowdown).assign(
                folder=folder.name, variant=variant, slowdown=slowdown))
    return pd.concat(runs, ignore_index=True), pd.DataFrame(lambdas)


def error_table(runs: pd.DataFrame, by: str) -> pd.DataFrame:
    """Median / max |relative error| per `by` value (rows) and variant (columns)."""
    runs = runs.assign(err=runs["rel_error"].abs())
    cells = runs.groupby([by, "variant"], sort=False)["err"].agg(["median", "max", "count"])
    wide = pd.DataFrame({v: [f"{cells.loc[(k, v), 'median']:.1%} / "
                             f"{cells.loc[(k, v), 'max']:.1%}" for k in runs[by].unique()]
                         for v in VARIANTS}, index=runs[by].unique())
    wide["runs"] = [int(cells.loc[(k, VARIANTS[0]), "count"]) for k in wide.index]
    return wide.rename_axis(by).reset_index()


def grouped(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with a column `group`: uncompressed (ddp, none) or compressed."""
    return runs.assign(group=["uncompressed" if m in UNCOMPRESSED else "compressed"
                              for m in runs["method"]])


def cell_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Signed relative error per method (rows) and rate, each cell the `VARIANTS`' in order."""
    runs = runs.assign(rate=[format_rate(r) for r in runs["rate_bps"]])
    err = runs.pivot_table(index=["method", "rate"], columns="variant", values="rel_error",
                           sort=False)
    cells = err.apply(lambda r: " / ".join(f"{r[v]:+.0%}" for v in VARIANTS), axis=1)
    return cells.unstack("rate").reindex(runs["method"].unique())[
        [format_rate(r) for r in RATES]].reset_index()


def changed(runs: pd.DataFrame, variant: str) -> str:
    """One line: `variant` against lambda = 1 over `runs` (median |error|, runs better and
    worse)."""
    err = runs.assign(err=runs["rel_error"].abs()).pivot_table(
        index=["folder", "rate_bps", "method"], columns="variant", values="err")
    return (f"- {variant}: median |error| {err['lambda=1'].median():.1%} -> "
            f"{err[variant].median():.1%}, mean {err['lambda=1'].mean():.1%} -> "
            f"{err[variant].mean():.1%}; {int((err[variant] < err['lambda=1']).sum())} of "
            f"{len(err)} runs closer, {int((err[variant] > err['lambda=1']).sum())} further.")


def markdown(runs: pd.DataFrame, lambdas: pd.DataFrame, command: str) -> str:
    runs = grouped(runs)
    compressed = runs[runs["group"] == "compressed"]
    lines = [
        "# Does the compute slowdown (lambda) improve the model out of sample?", "",
        f"Produced {datetime.date.today()} by", "", f"    {command}", "",
        __doc__.split("\n\n")[1].replace("\n", " "), "",
        "Cells: median / max |relative error| of the prediction against the measured "
        "iteration time; lambda=1 is `gradcomp validate`'s prediction as committed.", "",
        "Folders: every `testbed-*` one whose tables `predict_rate` reads (hook-path costs "
        "and the MLP's profile per rate); the 2026-11-22 and 2026-11-24 runs priced codecs "
        "from `compress-*.csv` and are left out. Folders before 2026-11-27 were measured by "
        "older code (their hook benches on other data); they are predicted by today's model.",
        "", "## Compressed methods (out of sample under every variant)", "",
        *[changed(compressed, v) for v in VARIANTS[1:]], "",
        "Per folder, and all folders pooled:", "",
        error_table(pd.concat([compressed, compressed.assign(folder="all folders")]),
                    "folder").to_markdown(index=False), "",
        "Per rate, over the folders:", "",
        error_table(compressed.assign(rate=[format_rate(r) for r in compressed["rate_bps"]]),
                    "rate").to_markdown(index=False), "",
        "Per method, over the folders and rates:", "",
        error_table(compressed, "method").to_markdown(index=False), "",
        "## Uncompressed (ddp, none: in sample for in-rate, out of sample for leave-rate-out)",
        "", error_table(runs[runs["group"] == "uncompressed"], "folder")
        .to_markdown(index=False), "",
        "## Everything, per folder", "", error_table(runs, "folder").to_markdown(index=False),
        "", "## The fitted lambdas", "",
        "`in-rate` from that rate's ddp and none runs, `leave-rate-out` from the other three "
        "rates' (both through `predict_rate`), `verdict in-rate` by `fit_runs_slowdown` from "
        "the in-rate runs.", "",
        lambdas.to_markdown(index=False, floatfmt=".3f"), "",
        "## Per method and rate, signed errors: " + " / ".join(VARIANTS), ""]
    for folder, part in runs.groupby("folder", sort=False):
        lines += [f"`{folder}`:", "", cell_table(part).to_markdown(index=False), ""]
    return "\n".join(lines)


def main() -> int:
    folders = sorted(f for f in RESULTS.glob("testbed-2*") if f.is_dir() and readable(f))
    parts = [folder_rows(f) for f in folders]
    runs = pd.concat([p[0] for p in parts], ignore_index=True)
    lambdas = pd.concat([p[1] for p in parts], ignore_index=True)
    write_atomic(HERE / "slowdown_validation.csv", runs.to_csv(index=False))
    command = "PYTHONPATH=$PWD python " + str(Path(__file__).resolve().relative_to(
        RESULTS.parent.parent))
    write_atomic(HERE / "README.md", markdown(runs, lambdas, command))
    print((HERE / "README.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
