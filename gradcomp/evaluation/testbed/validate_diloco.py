"""DiLoCo variants in `gradcomp validate` (``--methods ddp,none,diloco:H=100,method=int8``):
their training rows (`bench train`: the time per inner step over whole syncs) are priced by
the model's DiLoCo timeline (`model.timeline`: the single worker's step, the profile's
``t_iter_single``, plus each fragment's exchange once per H steps, less what `delay` steps
hide), and reported beside the per-step methods with

* utilisation: compute time over wall time, the profile's ``t_iter_single`` (the step as
  every worker computes it at once, without communicating) over the measured (predicted)
  time per inner step; and by telemetry, within the same run: the exchange's share of the
  time (its encode, collective and decode seconds per inner step over the measured time; with
  a delay the collective runs beside the next steps, so one minus it is a lower bound);
* bytes per token: the telemetry's bytes sent per inner step over the tokens of a step (a
  rank's token ids, or samples where the inputs are not token ids), and how many times fewer
  than fp32 data parallelism's: the ``none`` hook's telemetry at the same rate (DDP's
  gradient bytes where ``none`` did not run).
"""
from __future__ import annotations

import json
import math

import pandas as pd

from ...diloco import NAME, outer_method
from ..common.units import format_rate
from ..model.cost_tables import changed_options, variant_name
from ..model.methods import MethodCost, resolve


def priced(run, costs: dict) -> MethodCost:
    """The method of a `bench train` row as the model prices it: "ddp" as "none" (DDP's
    all-reduce), a DiLoCo variant with its options (the row's ``options``), else by name with
    the options that differ from its defaults (`costs` keyed by `run_label`: a variant's own
    hook-path costs)."""
    name = run["method"]
    if name == NAME:
        return resolve(name, costs, **json.loads(run["options"]))
    return resolve("none" if name == "ddp" else name, costs,
                   **changed_options(name, run["options"]))


def run_label(run) -> str:
    """A `bench train` (or hook-path) row's method as validation tables name it: the method,
    or ``name(key=value, ...)`` where its options are not the method's defaults (two variants
    of one method are two rows)."""
    return variant_name(run["method"], run["options"])


def is_diloco(methods: pd.Series) -> pd.Series:
    """Which of a validation table's `methods` (labels) are DiLoCo variants."""
    return methods.map(lambda m: outer_method(m) is not None)


def diloco_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per DiLoCo variant and rate of a validation table (columns rate_bps, method,
    measured, predicted, rel_error, t_iter_single, bytes_sent, exchange_s, tokens_per_step):
    rate, variant, measured_ms, predicted_ms, rel_error, utilisation, predicted_utilisation,
    exchange_share, bytes_per_token, fp32_bytes_per_token, fewer_bytes (fp32's over the variant's)."""
    rows = []
    if not is_diloco(table["method"]).any():  # e.g. FSDP's and two tiers' tables
        return pd.DataFrame(rows)
    for rate, runs in table.groupby("rate_bps", sort=True):
        fp32 = runs.loc[runs["method"] == "none", "bytes_sent"]
        if not len(fp32):
            fp32 = runs.loc[runs["method"] == "ddp", "bytes_sent"]
        fp32_bytes = float(fp32.iloc[0]) if len(fp32) else math.nan
        for _, run in runs[is_diloco(runs["method"])].iterrows():
            per_token = run["bytes_sent"] / run["tokens_per_step"]
            rows.append({"rate": format_rate(rate), "variant": run["method"],
                         "measured_ms": run["measured"] * 1e3,
                         "predicted_ms": run["predicted"] * 1e3, "rel_error": run["rel_error"],
                         "utilisation": run["t_iter_single"] / run["measured"],
                         "predicted_utilisation": run["t_iter_single"] / run["predicted"],
                         "exchange_share": run["exchange_s"] / run["measured"],
                         "bytes_per_token": per_token,
                         "fp32_bytes_per_token": fp32_bytes / run["tokens_per_step"],
                         "fewer_bytes": fp32_bytes / run["bytes_sent"]})
    return pd.DataFrame(rows)


def diloco_markdown(table: pd.DataFrame) -> str:
    """`diloco_table` as Markdown ("" when no DiLoCo variant ran)."""
    rows = diloco_table(table)
    if not len(rows):
        return ""
    return ("\nDiLoCo variants: time per inner step (measured over whole syncs) against the "
            "model's, compute utilisation (the profile's compute per step over the time per "
            "step, measured and predicted; the profile measured after the training runs), the "
            "outer exchange's share of the measured time by telemetry, and bytes sent per token by telemetry, with how "
            "many times fewer than fp32 data parallelism's (the `none` hook's telemetry):\n\n"
            + rows.to_markdown(index=False, floatfmt=".4g") + "\n")
