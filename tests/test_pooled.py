"""A sweep's repeated measurements of rate-independent quantities (the compute profile, the
hook-path costs): the least disturbed repeat is used at every rate; and of the training runs,
measured in interleaved passes: each run's least disturbed repeat."""
import shutil
from pathlib import Path

import pandas as pd
import pytest

from gradcomp.evaluation.benches.train import make_spec, train_table
from gradcomp.evaluation.profiles.profiles import Profile, save_profile
from gradcomp.evaluation.testbed.pooled import (least_disturbed_costs, least_disturbed_profile,
                                                least_disturbed_runs, pass_order, profile_line,
                                                repeats_line, train_keys, training_passes)

#: The quiet flat sweep of 2026-11-28: one training run per method and rate, stored before
#: the ``repeat`` column existed.
QUIET = Path(__file__).parents[1] / "benchmarks/results/testbed-2026-11-28-auto"


def profile(forward_s: float) -> Profile:
    return Profile("mlp", sizes=(10, 20), ready_s=(0.01, 0.02), forward_s=forward_s,
                   backward_s=0.03, optimizer_s=0.005)


def test_the_profile_with_the_shortest_iteration_is_used(tmp_path):
    paths = [tmp_path / f"profile-{r}.json" for r in ("100mbit", "500mbit", "1gbit")]
    for path, forward in zip(paths, (0.09, 0.02, 0.05)):
        save_profile(profile(forward), path)
    chosen, path = least_disturbed_profile([*paths, tmp_path / "not-measured.json"])
    assert path == paths[1] and chosen.forward_s == pytest.approx(0.02)
    with pytest.raises(FileNotFoundError, match="no profile"):
        least_disturbed_profile([tmp_path / "none.json"])


def test_per_key_the_hook_row_with_the_least_time_is_kept():
    keys = ("method", "numel")
    rate_a = pd.DataFrame({"method": ["topk", "topk", "none"], "numel": [100, 200, 100],
                           "encode_s": [0.010, 0.020, 0.001], "middle_s": [None] * 3,
                           "decode_s": [0.002, 0.004, 0.0]})
    rate_b = pd.DataFrame({"method": ["topk", "topk", "none"], "numel": [100, 200, 100],
                           "encode_s": [0.006, 0.030, 0.002], "middle_s": [None] * 3,
                           "decode_s": [0.003, 0.001, 0.0]})
    kept = least_disturbed_costs([rate_a, pd.DataFrame(), rate_b], keys)
    got = {(r.method, r.numel): (r.encode_s, r.decode_s) for r in kept.itertuples()}
    assert got == {("topk", 100): (0.006, 0.003), ("topk", 200): (0.020, 0.004),
                   ("none", 100): (0.001, 0.0)}
    assert least_disturbed_costs([pd.DataFrame()], keys).empty


def test_the_line_names_the_profile_used():
    table = pd.DataFrame({"profile_file": ["profile-mlp-b64-1gbit.json"] * 2,
                          "t_iter_single": [0.0431, 0.0431]})
    line = profile_line(table)
    assert "profile-mlp-b64-1gbit.json" in line and "43.1 ms" in line


def test_each_training_pass_runs_every_method_in_another_order():
    methods = ["ddp", "none", "fp16", "topk", "auto"]
    passes = [pass_order(methods, r) for r in range(4)]
    assert passes[0] == methods and passes[1] == methods[::-1]
    assert passes[2] == ["none", "fp16", "topk", "auto", "ddp"]
    assert all(sorted(p) == sorted(methods) for p in passes)

    def follows(order):
        return dict(zip(order[1:], order))

    # no method follows the same one in the first two passes, nor in passes 2 and 3
    for a, b in ((passes[0], passes[1]), (passes[2], passes[3])):
        assert not set(follows(a).items()) & set(follows(b).items())
    assert pass_order([], 3) == []


def test_the_run_of_least_median_time_is_kept_and_old_tables_read_as_repeat_0(tmp_path):
    shutil.copy(QUIET / "train-1gbit.csv", tmp_path)
    table = train_table(tmp_path / "train-1gbit.csv")
    first = table.frame()
    assert set(first["repeat"]) == {0}  # no repeat column: the one run is repeat 0
    measured = list(first["t_iter_s"])
    for method, factor in (("int8", 0.8), ("ddp", 1.1)):  # int8 ran faster, ddp slower
        row = first[first["method"] == method].iloc[0].to_dict()
        assert table.append({**row, "repeat": 1, "t_iter_s": row["t_iter_s"] * factor})
    kept = least_disturbed_runs(table.frame())
    assert list(kept["method"]) == list(first["method"])  # as first measured
    by = kept.set_index(kept["method"] + kept["options"])
    int8, ddp = (first[first["method"] == m].iloc[0] for m in ("int8", "ddp"))
    assert by.loc["int8" + int8["options"], "t_iter_s"] == pytest.approx(0.8 * int8["t_iter_s"])
    assert by.loc["int8" + int8["options"], "repeat"] == 1
    assert by.loc["ddp{}", ["t_iter_s", "repeat"]].tolist() == [ddp["t_iter_s"], 0]
    assert sorted(kept["repeats"]) == [1] * (len(first) - 2) + [2, 2]
    # The regret's time: the median of a run's repeats (of two, their mean).
    assert by.loc["int8" + int8["options"], "t_iter_runs_median_s"] == pytest.approx(
        0.9 * int8["t_iter_s"])
    assert by.loc["ddp{}", "t_iter_runs_median_s"] == pytest.approx(1.05 * ddp["t_iter_s"])
    others = kept[~kept["method"].isin(["int8", "ddp"])]
    assert list(others["t_iter_s"]) == [t for m, t in zip(first["method"], measured)
                                        if m not in ("int8", "ddp")]
    assert least_disturbed_runs(pd.DataFrame()).empty
    assert repeats_line(kept).startswith("Training runs: 1-2 per method and rate, measured "
                                         "interleaved")
    assert repeats_line(least_disturbed_runs(first)).startswith("Training runs: one per")


def test_a_resumed_sweep_measures_only_the_missing_repeats_in_pass_order(tmp_path):
    shutil.copy(QUIET / "train-1gbit.csv", tmp_path)
    table = train_table(tmp_path / "train-1gbit.csv")
    # auto with the margin these runs had
    methods = ["ddp", "none", "topk:ratio=0.01,error_feedback=True", "auto:confirm_margin=0.25"]
    cases = [("ddp", {}), ("none", {}), ("topk", {"ratio": 0.01, "error_feedback": True}),
             ("auto", {"confirm_margin": 0.25})]
    spec = make_spec("mlp", None, 5, 20, 25.0, None)
    keys = train_keys(cases, spec, 2, 2)
    # pass 0 is done (as repeat 0) but for auto, whose settings have changed since (its
    # rounds race on: `confirm_max_rounds`), so it is measured again; pass 1 runs them in the
    # reverse order in one job, auto among them (`benches.train` times it after its
    # exploration)
    assert training_passes(methods, keys, table.done_keys()) == [
        (0, ["auto:confirm_margin=0.25"]),
        (1, ["auto:confirm_margin=0.25", "topk:ratio=0.01,error_feedback=True", "none", "ddp"])]
    row = table.frame().query("method == 'none'").iloc[0].to_dict()
    table.append({**row, "repeat": 1})  # an interrupted pass: none's second run is done
    assert training_passes(methods[:3], keys, table.done_keys()) == [
        (1, ["topk:ratio=0.01,error_feedback=True", "ddp"])]
    assert training_passes(methods[:3], train_keys(cases[:3], spec, 2, 1),
                           table.done_keys()) == []
