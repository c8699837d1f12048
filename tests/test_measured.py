"""Measured beside modelled (`analyses.measured`) on hand-made tables, and the batch size a
command records being the one its workload ran."""
import math
from pathlib import Path

import pandas as pd
import pytest

from gradcomp.evaluation.analyses.measured import (NOT_PREDICTED, error_summary,
                                                   measured_vs_predicted)
from gradcomp.evaluation.benches import train_fsdp
from gradcomp.evaluation.profiles.measure import profile_factory
from gradcomp.evaluation.profiles.profiles import Profile

USER_LM = f"{Path(__file__).parent / 'data' / 'user_lm.py'}:small_lm"


def _runs(*methods):
    return pd.DataFrame({"method": list(methods), "world_size": 2, "bucket_cap_mb": 25.0,
                         "t_iter_s": 0.01, "params": 3000, "model": "m", "batch_size": 8})


def test_auto_runs_are_not_predicted_and_excluded_fits_are_marked():
    profile = Profile("p", [1000, 2000], [0.001, 0.002], 0.001, 0.002, 0.003)
    table = measured_vs_predicted(_runs("ddp", "topk", "auto"), profile, "1gbit",
                                  excluded=("topk",))
    rows = table.set_index("method")
    assert rows.loc["topk", "costs"] == "assumed (fit excluded)"
    assert rows.loc["ddp", "costs"] == "none" and rows.loc["ddp", "predicted"] > 0
    assert rows.loc["auto", "costs"] == NOT_PREDICTED and math.isnan(rows.loc["auto", "predicted"])
    assert "over 2 runs" in error_summary(table)


def test_a_run_with_options_is_priced_by_its_variants_row():
    profile = Profile("p", [1000, 2000], [0.001, 0.002], 0.001, 0.002, 0.003)
    runs = _runs("topk", "topk").assign(options=['{"ratio": 0.05}', "{}"])
    costs = {"topk(ratio=0.05)": ((0.5, 0.0), (0.5, 0.0))}  # 1 s of codec per bucket
    table = measured_vs_predicted(runs, profile, "1gbit", costs=costs)
    assert list(table["costs"]) == ["fitted", "assumed"]
    assert table["predicted"].iloc[0] > 1.0 > table["predicted"].iloc[1]


def test_the_batch_size_recorded_is_the_one_the_workload_runs():
    assert train_fsdp.make_spec(USER_LM)["batch_size"] == 8  # its batches' leading dimension
    with pytest.raises(ValueError, match="batch_size=4 is not allowed .*no batch_size"):
        train_fsdp.make_spec(USER_LM, batch_size=4)
    with pytest.raises(ValueError, match="batch_size=4 is not allowed .*no batch_size"):
        profile_factory(USER_LM, batch_size=4)
