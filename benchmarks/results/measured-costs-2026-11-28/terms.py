"""Per run of a `gradcomp validate` folder, each term of the iteration: the hook's telemetry in
training (encode, comm, decode: mean over iterations and ranks) beside what the model charges
for it (the pooled hook-path costs, the fitted collectives), and the rest of the iteration
(measured time less the telemetry; predicted time less the hook's stages: compute x lambda),
predicted as `gradcomp validate` does (the lambda of the folder's validation.csv).

    PYTHONPATH=$PWD python terms.py FOLDER [METHODS] [VALIDATION_CSV]   (Markdown on stdout)
"""
import math
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

from gradcomp.evaluation.benches.hookpath import KEY_COLUMNS
from gradcomp.evaluation.common.store import ResultTable
from gradcomp.evaluation.model.bucketing import DDP
from gradcomp.evaluation.model.fit import fit_collectives, network_from_fit
from gradcomp.evaluation.model.timeline import predict
from gradcomp.evaluation.testbed.pooled import least_disturbed
from gradcomp.evaluation.testbed.validate import profile_path, rate_tag
from gradcomp.evaluation.testbed.validate_diloco import priced, run_label


def terms(out: Path, methods, validation: Path) -> pd.DataFrame:
    val = pd.read_csv(validation)
    rates = sorted(val["rate_bps"].unique())
    shared = least_disturbed(
        [profile_path(out, r, "mlp", 64) for r in rates],
        [ResultTable(out / f"hook-{rate_tag(r)}.csv", KEY_COLUMNS).frame(None) for r in rates],
        KEY_COLUMNS, run_label)
    rows = []
    for rate in rates:
        tag = rate_tag(rate)
        fits = fit_collectives(pd.read_csv(out / f"collective-{tag}.csv"))
        for _, run in pd.read_csv(out / f"train-{tag}.csv").iterrows():
            label = run_label(run)
            mine = val[(val["rate_bps"] == rate) & (val["method"] == label)]
            if label not in methods or mine.empty:
                continue
            net = replace(network_from_fit(fits, int(run["workers"]), rate),
                          compute_slowdown=float(mine["compute_slowdown"].iloc[0]))
            pred = predict(shared.profile, net, priced(run, shared.costs),
                           DDP(25.0, first_bucket_mb=25.0), 1.0, baseline_s=math.nan)
            b = pred.buckets
            model = {"encode": (b["encode_end_s"] - b["encode_start_s"]).sum(),
                     "comm": (b["comm_end_s"] - b["comm_start_s"]).sum(),
                     "decode": (b["decode_end_s"] - b["decode_start_s"]).sum()}
            tele = {k: run[f"{k}_s"] for k in model}
            row = {"rate": tag, "method": label, "measured / predicted ms":
                   f"{run['t_iter_s'] * 1e3:.1f} / {pred.t_iter_s * 1e3:.1f} "
                   f"({pred.t_iter_s / run['t_iter_s'] - 1:+.1%})"}
            for k in model:
                row[f"{k} ms"] = f"{tele[k] * 1e3:.1f} / {model[k] * 1e3:.1f}"
            row["rest ms"] = (f"{(run['t_iter_s'] - sum(tele.values())) * 1e3:.1f} / "
                              f"{(pred.t_iter_s - sum(model.values())) * 1e3:.1f}")
            rows.append(row)
    return pd.DataFrame(rows)


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    methods = sys.argv[2].split(",") if len(sys.argv) > 2 else ["int8", "fp16", "topk"]
    validation = Path(sys.argv[3]) if len(sys.argv) > 3 else folder / "validation.csv"
    print(terms(folder, methods, validation).to_markdown(index=False))
