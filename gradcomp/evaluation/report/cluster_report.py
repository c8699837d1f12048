"""The report's section on the cluster as the run measured it (`analyses.cluster_fit`): the
latency and efficiency per tier from ``collective.csv``, the compute slowdown from
``train.csv`` and ``train_profile.json``, written to ``cluster_fit.json`` and applied to the
verdict's cluster where the question's profile was measured on this machine."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from ..analyses.cluster_fit import (UNCOMPRESSED, apply_fitted, fit_runs_slowdown, fit_tiers,
                                    fitted_fields, measured_on)
from ..common.store import strict_json, write_atomic
from ..model.cluster import Cluster
from ..profiles.profiles import Profile, load_profile

CLUSTER_FIT = "cluster_fit.json"
SLOWDOWN_SOURCE = ("MLSys 2022 (Agarwal et al., \"On the utility of gradient compression in "
                   "distributed training systems\") found 1.04-1.1 against a single GPU")


def _tiers_text(tiers: pd.DataFrame) -> list[str]:
    if tiers.empty:
        return ["Network: not fitted (no all-reduce rows in `collective.csv`).", ""]
    shown = pd.DataFrame({
        "tier": tiers["tier"], "alpha (us)": [f"{v * 1e6:.3g}" for v in tiers["latency_s"]],
        "busbw (Gbit/s)": [f"{v / 1e9:.3g}" for v in tiers["busbw_bps"]],
        "line rate (Gbit/s)": [f"{v / 1e9:.3g}" if math.isfinite(v) else "unknown"
                               for v in tiers["line_rate_bps"]],
        "efficiency": [f"{v:.3f}" if math.isfinite(v) else "not fitted"
                       for v in tiers["efficiency"]], "note": tiers["note"]})
    return ["Network, per tier: the all-reduce's alpha and fitted bus bandwidth (busbw, as "
            "nccl-tests reports it), and efficiency = busbw / the line rate the rows were "
            "measured at (column `bandwidth_bps` of `collective.csv`).", "",
            shown.to_markdown(index=False, disable_numparse=True), ""]


def _slowdown_text(slowdown: dict | None, why: str) -> list[str]:
    if slowdown is None:
        return [f"Compute slowdown: not fitted ({why}).", ""]
    value = slowdown["value"]
    bound = (" (at the fit's lower bound 1: with no slowdown the model already predicts the "
             "runs as slow as measured, or slower)"
             if value <= 1.0 + 1e-6 else " (at the fit's upper bound 3)"
             if value >= 3.0 - 1e-6 else "")
    ratio = slowdown["profile_over_single"]
    return [f"Compute slowdown {value:.3f}{bound}: the factor on the profile's forward, "
            f"backward and optimizer (`train_profile.json`, measured as DDP runs it, on every "
            f"worker at once, without communicating) that best fits the "
            f"{slowdown['runs']} uncompressed run(s) of `train.csv` on the fitted network; "
            f"{SLOWDOWN_SOURCE}."
            + (f" That profile's iteration is {ratio:.2f}x the single process's here "
               "(`t_iter_single_s`)." if ratio is not None else ""), ""]


def cluster_section(out: Path, collective: pd.DataFrame, train: pd.DataFrame,
                    collective_fits: dict, run_profile: Path, cluster: Cluster,
                    profile: Profile) -> tuple[Cluster, list[str]]:
    """Fit what `out`'s tables allow (`collective_fits`: `fit.fit_collectives` of
    `collective`; `run_profile`: the runs' profile), write ``cluster_fit.json`` there, and
    return the question's `cluster` with the fits applied where `profile` was measured on
    this machine (`cluster_fit.apply_fitted`) and the report's section."""
    tiers = fit_tiers(collective if "collective" in collective else
                      pd.DataFrame({"collective": []}))
    slowdown, why, fit = None, ("needs `train.csv` with an uncompressed run (method "
                                f"{' or '.join(UNCOMPRESSED)}), `train_profile.json` and "
                                "an all-reduce in `collective.csv`"), None
    if not train.empty and "allreduce" in collective_fits and run_profile.exists():
        measured = load_profile(run_profile)
        try:
            fit = fit_runs_slowdown(train, measured, collective_fits["allreduce"])
        except ValueError as e:
            why = str(e)
        else:
            single = (train["t_iter_single_s"].median() if "t_iter_single_s" in train
                      else math.nan)
            slowdown = {"value": fit.params["compute_slowdown"], "runs": fit.n,
                        "r2": strict_json(fit.r2), "profile": run_profile.name,
                        "profile_over_single": strict_json(measured.t_iter_single / single)}
    fields = fitted_fields(tiers, fit)
    applied, sentence = apply_fitted(cluster, fields, profile, measured_on(train))
    record = {"tiers": [{k: strict_json(v) for k, v in row.items()}
                        for row in tiers.to_dict("records")],
              "compute_slowdown": slowdown, "fields": fields, "applied": sentence}
    write_atomic(out / CLUSTER_FIT, json.dumps(record, indent=1, allow_nan=False) + "\n")
    return applied, ["## Cluster fitted on this machine", "",
                     "What this run's measurements say about the machine, as the cluster "
                     f"model's fields (`{CLUSTER_FIT}`).", "", *_tiers_text(tiers),
                     *_slowdown_text(slowdown, why), sentence, ""]
