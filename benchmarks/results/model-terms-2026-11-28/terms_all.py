"""Term by term, for every training run (every repeat) of committed `gradcomp validate` sweeps:
the hook's telemetry in training (encode, comm, decode: mean over iterations and ranks; for
PowerSGD comm includes its middle step, computed between its two all-reduces) beside what the
model charges for each, and the rest of the iteration (measured less the telemetry; predicted
less the hook's stages: compute x lambda + finalize, and on the hierarchical layout the
reduce-scatter and all-gather inside the node too). Predicted as `gradcomp validate` predicts
(flat: the pooled profile and hook-path costs, the rate's fitted collectives; two tiers: the
rate's tier fits, profile and per-layout hook-path costs), with the lambda of the sweep's
re-predicted validation.csv (`LAMBDA_FROM`, per rate and layout).

    PYTHONPATH=$PWD python terms_all.py SWEEP=VALIDATION_CSV ... > runs.csv

Every sweep's MLP gradient is one DDP bucket (16.8 MB under a 25 MB cap), ready when backward
ends: encode, exchange and decode all follow backward, so overlap and the bucket timeline
play no part in these numbers.
"""
import math
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch

from gradcomp.evaluation.model import timeline
from gradcomp.evaluation.model.bucketing import DDP
from gradcomp.evaluation.model.fit import fit_collectives, network_from_fit
from gradcomp.evaluation.testbed import validate as flat
from gradcomp.evaluation.testbed import validate_tiers as tiers
from gradcomp.evaluation.testbed.validate_diloco import priced, run_label

ALL = type("All", (dict,), {"__missing__": lambda self, key: None})()  # every row of a table


def chain_terms(chain) -> dict:
    """The model's encode, comm (all between encode and decode) and decode of a bucket's
    stage chain (`timeline`'s (stream, seconds) pairs), less the hierarchical layout's
    reduce-scatter and all-gather inside the node (`intra`)."""
    intra = 0.0
    if len(chain) > 2 and chain[0][0] == "comm" and chain[-1][0] == "comm":
        intra, chain = chain[0][1] + chain[-1][1], chain[1:-1]
    return {"encode": chain[0][1], "comm": sum(s for _, s in chain[1:-1]),
            "decode": chain[-1][1], "intra": intra}


def model_terms(profile, network, method, layout, cap) -> tuple[float, dict]:
    pred = timeline.predict(profile, network, method, DDP(cap, first_bucket_mb=cap), 1.0,
                            baseline_s=math.nan, layout=layout)
    shapes = timeline._matrix_shapes(profile)  # noqa: the timeline's own cut, not repeated
    stages = timeline._hierarchical_stages if layout == "hierarchical" else timeline._stages
    chain, _ = stages(method, network, profile, list(shapes))
    assert len(pred.buckets) == 1, "one bucket per iteration is assumed"
    return pred.t_iter_s, chain_terms(chain)


def row(sweep, layout, rate, run, t_pred, terms, lam) -> dict:
    tele = {k: float(run[f"{k}_s"]) for k in ("encode", "comm", "decode")}
    r = {"sweep": sweep, "layout": layout, "rate_bps": rate, "method": run_label(run),
         "repeat": int(run.get("repeat", 0) if not pd.isna(run.get("repeat", 0)) else 0),
         "lambda": lam, "measured_ms": run["t_iter_s"] * 1e3, "predicted_ms": t_pred * 1e3,
         "spread_ms": run["t_iter_spread_s"] * 1e3}
    for k in ("encode", "comm", "decode"):
        r[f"{k}_tele_ms"], r[f"{k}_model_ms"] = tele[k] * 1e3, terms[k] * 1e3
    r["intra_model_ms"] = terms["intra"] * 1e3
    r["rest_tele_ms"] = (run["t_iter_s"] - sum(tele.values())) * 1e3
    r["rest_model_ms"] = (t_pred - terms["encode"] - terms["comm"] - terms["decode"]) * 1e3
    return r


def flat_sweep(out: Path, val: pd.DataFrame, sweep: str) -> list:
    rates = sorted(val["rate_bps"].unique())
    shared = flat.pooled_inputs(out, rates, None, "mlp", 64)
    rows = []
    for rate in rates:
        tag = flat.rate_tag(rate)
        fits = fit_collectives(pd.read_csv(out / f"collective-{tag}.csv"))
        lam = float(val.loc[val["rate_bps"] == rate, "compute_slowdown"].iloc[0])
        for _, run in pd.read_csv(out / f"train-{tag}.csv").iterrows():
            if run["method"] in ("ddp", "auto"):
                continue
            net = replace(network_from_fit(fits, int(run["workers"]), rate),
                          compute_slowdown=lam)
            t, terms = model_terms(shared.profile, net, priced(run, shared.costs), "flat",
                                   float(run["bucket_cap_mb"]))
            rows.append(row(sweep, "flat", rate, run, t, terms, lam))
    return rows


def tier_sweep(out: Path, val: pd.DataFrame, sweep: str) -> list:
    spec = {"model": "mlp", "batch_size": 64}
    nodes, g = int(val["nodes"].iloc[0]), int(val["gpus_per_node"].iloc[0])
    rows = []
    for (rate, layout), mine in val.groupby(["rate_bps", "layout"]):
        inputs = tiers.rate_inputs(out, rate, ALL, spec, nodes, g, [layout])
        lam = float(mine["compute_slowdown"].iloc[0])
        net = replace(inputs.network, compute_slowdown=lam)
        _, costs, _ = inputs.layouts[layout]
        train = pd.read_csv(out / f"train-{flat.rate_tag(rate)}-{layout}.csv")
        for _, run in train.iterrows():
            if run["method"] in ("ddp", "auto"):
                continue
            t, terms = model_terms(inputs.profile, net, priced(run, costs), layout,
                                   float(run["bucket_cap_mb"]))
            rows.append(row(sweep, layout, rate, run, t, terms, lam))
    return rows


if __name__ == "__main__":
    torch.set_num_threads(1)
    frames = []
    for arg in sys.argv[1:]:
        folder, validation = arg.split("=")
        val = pd.read_csv(validation)
        study = tier_sweep if "layout" in val.columns else flat_sweep
        frames.append(pd.DataFrame(study(Path(folder), val, Path(folder).name)))
    pd.concat(frames, ignore_index=True).to_csv(sys.stdout, index=False, float_format="%.3f")
