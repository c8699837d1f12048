"""Per run of a `gradcomp validate` folder: measured per-phase times (the hook's telemetry in
training: encode, comm, decode; the rest of the iteration is compute) beside the model's
(the hook bench's codec costs, the fitted collectives, the profile's compute x lambda), each
predicted as `gradcomp validate` does (validation.csv's lambda per rate).

    PYTHONPATH=$PWD python phases.py FOLDER   (writes FOLDER/phases.csv, prints Markdown)
"""
import math
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

from gradcomp.evaluation.model.bucketing import DDP
from gradcomp.evaluation.model.fit import fit_collectives, hook_costs, network_from_fit
from gradcomp.evaluation.model.methods import resolve
from gradcomp.evaluation.model.timeline import predict
from gradcomp.evaluation.profiles.profiles import load_profile
from gradcomp.evaluation.testbed.validate import rate_tag


def phases(folder: Path) -> pd.DataFrame:
    table = pd.read_csv(folder / "validation.csv")
    rows = []
    for rate, part in table.groupby("rate_bps"):
        tag = rate_tag(rate)
        costs = hook_costs(pd.read_csv(folder / f"hook-{tag}.csv"))
        fits = fit_collectives(pd.read_csv(folder / f"collective-{tag}.csv"))
        train = pd.read_csv(folder / f"train-{tag}.csv").set_index("method")
        profile = load_profile(folder / f"profile-mlp-b64-{tag}.json")
        slowdown = float(part["compute_slowdown"].iloc[0]) if "compute_slowdown" in part else 1.0
        for method in part["method"]:
            if method in ("ddp", "auto"):
                continue
            run = train.loc[method]
            net = replace(network_from_fit(fits, int(run["workers"]), rate),
                          compute_slowdown=slowdown)
            cap = float(run["bucket_cap_mb"])
            pred = predict(profile, net, resolve(method, costs), DDP(cap, first_bucket_mb=cap),
                           1.0, baseline_s=math.nan)
            b = pred.buckets
            enc = float((b["encode_end_s"] - b["encode_start_s"]).sum())
            dec = float((b["decode_end_s"] - b["decode_start_s"]).sum())
            comm = float((b["comm_end_s"] - b["comm_start_s"]).sum())
            m_codec = run["encode_s"] + run["comm_s"] + run["decode_s"]
            rows.append({
                "rate": tag, "method": method, "measured_ms": run["t_iter_s"] * 1e3,
                "predicted_ms": pred.t_iter_s * 1e3,
                "encode_ms": f"{run['encode_s'] * 1e3:.1f} / {enc * 1e3:.1f}",
                "comm_ms": f"{run['comm_s'] * 1e3:.1f} / {comm * 1e3:.1f}",
                "decode_ms": f"{run['decode_s'] * 1e3:.1f} / {dec * 1e3:.1f}",
                "rest_ms": f"{(run['t_iter_s'] - m_codec) * 1e3:.1f} / "
                           f"{(pred.t_iter_s - enc - comm - dec) * 1e3:.1f}",
                "single_ms": run["t_iter_single_s"] * 1e3, "lambda": slowdown,
                "rel_error": pred.t_iter_s / run["t_iter_s"] - 1})
    return pd.DataFrame(rows)


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    out = phases(folder)
    out.to_csv(folder / "phases.csv", index=False)
    print(out.to_markdown(index=False, floatfmt=".3g"))
