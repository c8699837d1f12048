"""A two-tier `gradcomp validate` folder predicted twice, both ways the model can price a
codec: `shared` (each codec between its cost on one rank alone and on all ranks at once, by
the ranks computing beside it; what validate does when the folder has ``hook-*-alone.csv``)
and `together` (all ranks at once, the price before; the alone tables hidden). Per run: the
measured iteration, both predictions and errors, the share, and the model's codec (encode +
middle + decode after backward, summed over buckets) beside the training telemetry's (encode + decode, rank
means), the run's own.

    PYTHONPATH=REPO python codec_share.py FOLDER TRAIN_REPEATS OUT.csv

Prediction only (`validate_tiers.predict_sweep` on a copy of the folder), at 100mbit, 1gbit
and 2.5gbit with the default methods and auto's candidates, as the folders' READMEs say."""
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

from gradcomp.evaluation.benches.train import make_spec
from gradcomp.evaluation.model.timeline import LAYOUTS
from gradcomp.evaluation.testbed import validate_tiers as tiers
from gradcomp.evaluation.testbed.pooled import MIN_TIMED_S
from gradcomp.evaluation.testbed.regret import with_auto_candidates
from gradcomp.evaluation.testbed.tier_plan import planned_keys
from gradcomp.evaluation.testbed.validate import check_methods, model_collective_sizes
from gradcomp.evaluation.testbed.validate_diloco import run_label

METHODS = "ddp,none,fp16,bf16,int8,topk,randomk,powersgd,signsgd,auto".split(",")
RATES = {1e8: "100mbit", 1e9: "1gbit", 2.5e9: "2.5gbit"}
NODES, GPUS_PER_NODE = 2, 2
ORIGINAL = tiers.predict
CODEC = {}  # (layout, rate_bps, method) -> the model's codec seconds, its last prediction


def recorded(profile, network, method, *args, **kwargs):
    """`validate_tiers.predict`, its codec seconds kept in `CODEC`."""
    pred = ORIGINAL(profile, network, method, *args, **kwargs)
    # every codec stage, PowerSGD's middle too (the MLP's one bucket: all after backward)
    codec = pred.buckets["codec_after_backward_s"].sum()
    CODEC[kwargs.get("layout", "flat"), network.bandwidth_bps, method.name] = codec
    return pred


tiers.predict = recorded


def predicted(folder: Path, repeats: int, alone: bool) -> pd.DataFrame:
    methods = with_auto_candidates(check_methods(METHODS))
    spec = make_spec("mlp", None, 5, 20, 25.0, None, min_timed_s=MIN_TIMED_S)
    sizes = list(model_collective_sizes("mlp"))
    layouts = list(LAYOUTS)
    planned = planned_keys(methods, spec, NODES, GPUS_PER_NODE, layouts, sizes, repeats)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp)
        for f in folder.iterdir():
            if f.is_file() and (alone or not f.name.endswith("-alone.csv")):
                shutil.copy(f, copy)
        CODEC.clear()
        table = tiers.predict_sweep(copy, list(RATES), methods, spec, NODES, GPUS_PER_NODE,
                                    layouts, sizes, planned, 1.0, repeats)
    table["model_codec_ms"] = [1e3 * CODEC.get((r.layout, r.rate_bps * 1.0, r.method),
                                               float("nan")) for r in table.itertuples()]
    return table


def telemetry(folder: Path, row) -> float:
    """The training telemetry's encode + decode (ms) of the run validate compared with."""
    train = pd.read_csv(folder / f"train-{RATES[row.rate_bps]}-{row.layout}.csv")
    train = train[train.apply(run_label, axis=1) == row.method]
    run = train.loc[(train["t_iter_s"] - row.measured).abs().idxmin()]
    return 1e3 * (run["encode_s"] + run["decode_s"])


if __name__ == "__main__":
    folder, repeats, out = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    shared = predicted(folder, repeats, True)
    together = predicted(folder, repeats, False)
    keys = ["layout", "rate_bps", "method", "repeat"]
    table = shared[keys + ["rate", "measured", "predicted", "rel_error", "codec_share",
                           "model_codec_ms"]].merge(
        together[keys + ["predicted", "rel_error", "model_codec_ms"]], on=keys,
        suffixes=("", "_together"))
    table = table[table["method"] != "auto"]
    table["train_codec_ms"] = [telemetry(folder, r) for r in table.itertuples()]
    table.round(5).to_csv(out, index=False)
    pd.set_option("display.width", 250)
    print(table.drop(columns=["rate_bps", "repeat"]).round(3).to_string())
    for name, col in (("shared", "rel_error"), ("together", "rel_error_together")):
        med = table.groupby(["layout", "method"])[col].apply(lambda e: e.abs().median())
        print(f"\n{name}: median |error| per layout",
              table.groupby("layout")[col].apply(lambda e: round(100 * e.abs().median(), 1))
              .to_dict(), "; methods over 10%:",
              {k: round(100 * v, 1) for k, v in med[med > 0.10].items()})
