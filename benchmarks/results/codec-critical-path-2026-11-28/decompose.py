"""Per flat run of a committed two-tier `gradcomp validate` folder: the model's encode,
exchange, decode and rest of the iteration (as `gradcomp validate --nodes 2 --gpus-per-node 2`
predicts it now, lambda included) beside the training telemetry's (rank means, summed over
buckets; rest = t_iter - encode - comm - decode) of the run validate compares with (its least
disturbed).

    PYTHONPATH=$PWD python decompose.py OUT.csv NAME=FOLDER=TRAIN_REPEATS ...

Prediction only (`validate_tiers.predict_sweep`: a run missing from a folder is left out, never
measured), at 100mbit, 1gbit and 2.5gbit with the default methods and auto's candidates, as the
folders' READMEs do."""
import sys
from pathlib import Path

import pandas as pd

from gradcomp.evaluation.testbed import validate_tiers as tiers

METHODS = "ddp,none,fp16,bf16,int8,topk,randomk,powersgd,signsgd,auto".split(",")
RATES = {1e8: "100mbit", 1e9: "1gbit", 2.5e9: "2.5gbit"}
NODES, GPUS_PER_NODE = 2, 2


ORIGINAL = tiers.predict
ROWS = []  # every prediction's stage sums (`recorded`)


def recorded(profile, network, method, *args, **kwargs):
    """`validate_tiers.predict`, its stage sums appended to `ROWS`."""
    pred = ORIGINAL(profile, network, method, *args, **kwargs)
    b = pred.buckets
    ROWS.append({"layout": kwargs.get("layout", "flat"), "rate_bps": network.bandwidth_bps,
                 "method": method.name, "t": pred.t_iter_s,
                 **{p: float((b[f"{p}_end_s"] - b[f"{p}_start_s"]).sum())
                    for p in ("encode", "comm", "decode")}})
    return pred


tiers.predict = recorded


def predicted(folder: Path, repeats: int) -> pd.DataFrame:
    """validate's flat rows of `folder`, with the model's stage sums (seconds)."""
    ROWS.clear()
    methods = tiers.with_auto_candidates(tiers.check_methods(METHODS))
    spec = tiers.make_spec("mlp", None, 5, 20, 25.0, None, min_timed_s=tiers.MIN_TIMED_S)
    sizes = list(tiers.model_collective_sizes("mlp"))
    layouts = list(tiers.LAYOUTS)
    planned = tiers.planned_keys(methods, spec, NODES, GPUS_PER_NODE, layouts, sizes, repeats)
    table = tiers.predict_sweep(folder, list(RATES), methods, spec, NODES, GPUS_PER_NODE,
                                layouts, sizes, planned, 1.0, repeats)
    last = pd.DataFrame(ROWS).groupby(["layout", "rate_bps", "method"], sort=False).last()
    table = table[table["layout"] == "flat"].join(last, on=["layout", "rate_bps", "method"])
    return table.dropna(subset=["t"])


def decompose(name: str, folder: Path, repeats: int) -> pd.DataFrame:
    out = []
    for _, row in predicted(folder, repeats).iterrows():
        train = pd.read_csv(folder / f"train-{RATES[row['rate_bps']]}-flat.csv")
        train = train[train.apply(tiers.run_label, axis=1) == row["method"]]
        run = train.loc[(train["t_iter_s"] - row["measured"]).abs().idxmin()]
        rest = run["t_iter_s"] - run["encode_s"] - run["comm_s"] - run["decode_s"]
        out.append({"folder": name, "rate": RATES[row["rate_bps"]], "method": row["method"],
                    "measured_ms": 1e3 * row["measured"], "predicted_ms": 1e3 * row["t"],
                    "error": row["t"] / row["measured"] - 1,
                    **{f"model_{p}_ms": 1e3 * row[p] for p in ("encode", "comm", "decode")},
                    "model_rest_ms": 1e3 * (row["t"] - row["encode"] - row["comm"]
                                            - row["decode"]),
                    **{f"train_{p}_ms": 1e3 * run[f"{p}_s"] for p in ("encode", "comm", "decode")},
                    "train_rest_ms": 1e3 * rest})
    return pd.DataFrame(out)


if __name__ == "__main__":
    spec = [a.split("=") for a in sys.argv[2:]]
    table = pd.concat([decompose(n, Path(f), int(r)) for n, f, r in spec], ignore_index=True)
    table.round(4).to_csv(sys.argv[1], index=False)
    print(table.round(3).to_string())
