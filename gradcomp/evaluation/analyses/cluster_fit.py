"""The cluster as measured (issue #30, "measured, not assumed"): per tier, the latency and
efficiency that a collective table shows (`fit_tiers`: nccl-tests' busbw over the line rate),
and the compute slowdown of a DDP worker that training runs show (`fit_runs_slowdown`: MLSys
2022's lambda), as `cluster.Cluster` fields (`fitted_fields`); and where they apply
(`apply_fitted`): to a question whose profile was measured on the machine that measured them,
as `cost_tables.default_costs` prices such a profile with that machine's codec costs.
Elsewhere they describe this machine, not the question's cluster.

A collective table may carry two optional columns: `bandwidth_bps`, the line rate its rows
were measured at (a testbed's shaped rate, a NIC's), and `tier` (`TIERS`): "inter" for rows
measured across nodes, "intra" for rows between the GPUs of one node. Without `tier` every
row is inter-node; without a line rate (loopback) no efficiency is fitted, and the alpha,
being loopback's, is not taken as a network's latency.
"""
from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from ..model.cluster import Cluster, with_options
from ..model.fit import Fit, fit_collectives, fit_slowdown, network_from_fit
from ..model.network import Network
from ..profiles.profiles import Profile
from .measured import predict_runs

#: Values of a collective table's column `tier`, and the prefix of their `Cluster` fields.
TIERS = {"inter": "", "intra": "intra_"}
#: The Cluster fields a fit can set, at the values that mean "not known" (`Cluster.describe`
#: calls them assumed); a question that gave another value keeps it.
NEUTRAL = {"latency_s": 0.0, "efficiency": 1.0, "intra_latency_s": 0.0,
           "intra_efficiency": 1.0, "compute_slowdown": 1.0}
UNCOMPRESSED = ("ddp", "none")


def fit_tiers(table: pd.DataFrame, line_rate_bps=None) -> pd.DataFrame:
    """Per tier of a collective table's all-reduce rows: the fitted alpha (`latency_s`) and
    bus bandwidth (`busbw_bps`: nccl-tests' busbw, the B of `network`), the line rate the
    rows were measured at (`line_rate_bps`: their bandwidth_bps column, else `line_rate_bps`
    for the inter-node tier, e.g. a testbed's rate) and `efficiency` = busbw / line rate, at
    most 1; NaN, with the reason in `note`, without a line rate or a resolved bandwidth."""
    tiers = table["tier"] if "tier" in table else pd.Series("inter", index=table.index)
    for tier in sorted(set(tiers) - set(TIERS)):
        raise ValueError(f"tier={tier!r} is not allowed: choose one of {', '.join(TIERS)}")
    rows = []
    for tier in TIERS:
        part = table[(tiers == tier).to_numpy() & (table["collective"] == "allreduce")]
        if part.empty:
            continue
        rates = set(part["bandwidth_bps"].dropna()) if "bandwidth_bps" in part else set()
        if len(rates) > 1:
            raise ValueError(f"bandwidth_bps: the {tier}-node rows were measured at several "
                             f"line rates ({', '.join(map(str, sorted(rates)))}): fit each "
                             "rate's rows alone")
        rate = rates.pop() if rates else line_rate_bps if tier == "inter" else None
        rate = math.nan if rate is None else Network(2, rate).bandwidth_bps
        fit = fit_collectives(part)["allreduce"]
        busbw = fit.params["bandwidth_bps"]
        note = ("no line rate (loopback, or no bandwidth_bps recorded): efficiency not "
                "fitted" if math.isnan(rate) else "bandwidth not resolved (payloads too "
                "small): efficiency not fitted" if not math.isfinite(busbw) else
                f"busbw {busbw / rate:.3g}x the line rate: taken as 1" if busbw > rate else "")
        rows.append({"tier": tier, "latency_s": fit.params["alpha_s"], "busbw_bps": busbw,
                     "line_rate_bps": rate, "efficiency": min(busbw / rate, 1.0)
                     if math.isfinite(busbw) else math.nan, "r2": fit.r2, "n": fit.n,
                     "note": note})
    return pd.DataFrame(rows, columns=["tier", "latency_s", "busbw_bps", "line_rate_bps",
                                       "efficiency", "r2", "n", "note"])


def fit_runs_slowdown(train: pd.DataFrame, profile: Profile, allreduce: Fit) -> Fit:
    """`fit.fit_slowdown` on the uncompressed runs of a `bench train` table (method ddp or
    none: no codec cost to absorb), each predicted as `measured.predict_runs` does, from
    `profile` on the network of the collective bench's `allreduce` fit. Lambda is relative
    to `profile`, the compute the model is given."""
    runs = train[train["method"].isin(UNCOMPRESSED)]
    if runs.empty:
        raise ValueError("no uncompressed training run (method ddp or none)")
    rate = allreduce.params["bandwidth_bps"]
    if not 0 < rate < math.inf:
        raise ValueError("the all-reduce fit has no positive, finite bandwidth")

    def predicted_at(slowdown: float):
        def network_of(p: int) -> Network:
            return replace(network_from_fit({"allreduce": allreduce}, p, rate),
                           compute_slowdown=slowdown)
        return predict_runs(runs, profile, network_of, {})["predicted"]

    return fit_slowdown(runs["t_iter_s"], predicted_at)


def fitted_fields(tiers: pd.DataFrame, slowdown: Fit | None) -> dict:
    """The `Cluster` fields measured: latency and efficiency of each tier whose efficiency
    was fitted (`fit_tiers`), and the compute slowdown (`fit_runs_slowdown`; None: not
    fitted)."""
    fields = {TIERS[row.tier] + name: float(getattr(row, name)) for row in tiers.itertuples()
              if math.isfinite(row.efficiency) for name in ("latency_s", "efficiency")}
    if slowdown is not None:
        fields["compute_slowdown"] = slowdown.params["compute_slowdown"]
    return fields


def measured_on(train: pd.DataFrame) -> str:
    """The device the training runs of `train` ran on ("" when not one recorded)."""
    devices = set(train["device_name"].astype(str)) if "device_name" in train else set()
    return devices.pop() if len(devices) == 1 else ""


def apply_fitted(cluster: Cluster, fields: dict, profile: Profile, device: str
                 ) -> tuple[Cluster, str]:
    """`cluster` with the `fields` fitted on `device` (this machine) when `profile` was
    measured there, each marked measured, except where the cluster holds a value of its own
    (`NEUTRAL`: not known) and, for a cluster of one GPU per node, the intra-node tier's;
    and the sentence saying what was applied."""
    if not fields:
        return cluster, "Nothing was fitted, so nothing applies to the verdict's cluster."
    if not (profile.device and device and profile.device.lower() == device.lower()):
        return cluster, (f"Not applied to the verdict: they describe this machine "
                         f"({device or 'device not recorded'}), and the question's profile "
                         f"`{profile.name}` was measured on "
                         f"{profile.device or 'an unrecorded device'}.")
    usable = {f: v for f, v in fields.items()
              if cluster.gpus_per_node > 1 or not f.startswith("intra_")}
    take = {f: v for f, v in usable.items() if getattr(cluster, f) == NEUTRAL[f]}
    kept = [f for f in usable if f not in take]
    if not take:
        return cluster, ("Not applied: " + (f"the question gives its own {', '.join(kept)}."
                                            if kept else "the question's cluster has one GPU "
                                            "per node (no intra-node tier)."))
    measured = tuple(dict.fromkeys((*cluster.measured, *take)))
    return with_options(cluster, **take, measured=measured), (
        f"Applied to the verdict's cluster (the profile `{profile.name}` was measured on this "
        f"machine, {device}): {', '.join(take)}."
        + (f" Kept the question's own {', '.join(kept)}." if kept else ""))
