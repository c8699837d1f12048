"""`gradcomp validate`: measure in the testbed, predict, compare; resumable (root)."""
import json
import math

import pandas as pd
import pytest

from gradcomp.evaluation.testbed import testbed
from gradcomp.evaluation.benches.hookpath import hook_sizes
from gradcomp.evaluation.testbed.validate import rate_tag, summarize, validate_sweep

from auto_rows import assert_choice_explained

REASON = testbed.unavailable_reason()


def validate_here(capsys, *args) -> str:
    """`gradcomp validate args` in this process (its testbed's jobs in processes of their
    own, as ever; a folder whose tables are all measured: it only predicts, nothing runs);
    its stdout."""
    from gradcomp import cli as command

    capsys.readouterr()
    assert command.main(["validate", *args]) == 0
    return capsys.readouterr().out


def test_rate_tags_name_files():
    assert [rate_tag(r) for r in (100e6, 500e6, 1e9, 2.5e9, 5e3)] == \
        ["100mbit", "500mbit", "1gbit", "2.5gbit", "5kbit"]


def test_hook_sizes_are_the_largest_bucket_and_its_quarters():
    # The MLP's 4,208,650 gradients fit one 25 MB bucket; at 8 MB the largest bucket is the
    # one torch's DDP forms.
    import torch.distributed as dist

    from gradcomp.evaluation.workloads.load import load_workload

    assert hook_sizes("mlp", 64, 25.0) == [4208650 // 4**j for j in range(5, -1, -1)]
    params = list(load_workload("mlp").model.parameters())[::-1]
    cap = [8 << 20] * 2
    buckets, _ = dist._compute_bucket_assignment_by_size(params, cap, [False] * len(params))
    assert max(hook_sizes("mlp", 64, 8.0)) == max(sum(params[i].numel() for i in b)
                                                  for b in buckets) == 2109450
    sizes = hook_sizes("tiny", None, 25.0)
    assert sizes == [432, 1730, 6922] and all(n & (n - 1) for n in sizes)  # no power of 2


def test_summary_is_the_median_and_max_error_per_method_and_overall():
    table = pd.DataFrame({"method": ["none", "none", "none", "fp16"],
                          "rel_error": [0.1, -0.3, 0.02, math.nan]})
    s = summarize(table).set_index("method")
    assert s.loc["none", "median_abs_rel_error"] == pytest.approx(0.1)
    assert s.loc["none", "max_abs_rel_error"] == pytest.approx(0.3)
    assert math.isnan(s.loc["fp16", "median_abs_rel_error"])  # NaN stays NaN
    assert s.loc["all", "runs"] == 4


def test_bad_rates_and_methods_are_named(capsys):
    from gradcomp import cli as command

    for argv, named in ((["--rates", "fast"], "rates='fast'"),
                        (["--rates", "1gbit", "--methods", "none,nosuch"], "nosuch"),
                        (["--model", "big"], "model='big' is not allowed"),
                        (["--hook-repeats", "0"], "--hook-repeats: '0': must be an integer >= 1"),
                        (["--train-repeats", "0"],
                         "--train-repeats: '0': must be an integer >= 1"),
                        (["--min-timed-seconds", "-1"], "min_timed_seconds='-1' is not allowed")):
        with pytest.raises(SystemExit):
            command.main(["validate", *argv])
        assert named in capsys.readouterr().err


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_validate_measures_predicts_and_resumes(tmp_path, capsys):
    # One timed hook-path repeat (after one untimed): the costs' values are not judged here.
    args = ("--rates", "2.5gbit", "--methods", "ddp,fp16,auto", "--model", "tiny",
            "--iterations", "3", "--hook-repeats", "1", "--train-repeats", "1",
            "--min-timed-seconds", "0", "--out", str(tmp_path), "--json")
    result = json.loads(validate_here(capsys, *args))
    rows = pd.DataFrame(result["rows"])
    # auto's candidates run fixed too, with its options, before it (each variant its row)
    assert list(rows["method"]) == ["ddp", "fp16", "none", "bf16", "powersgd(rank=4)",
                                    "topk(error_feedback=True)", "auto"]
    # auto: measured, no prediction, its choices reported, compared in the Markdown; it
    # trains in the same job as the fixed methods, its warm-up covering its longest
    # exploration (5 + 1 + 4 x (3 + 2 x 20) + 2 untimed iterations), so its 3 timed ones come
    # after its decision: its steady state. Its training row says what the decision rested
    # on and which switches it made while timed.
    auto = rows[rows["method"] == "auto"].iloc[0]
    assert auto["measured"] > 0 and math.isnan(auto["predicted"])
    choices = auto["auto_choices"]
    assert choices.startswith("bucket 0: ") and "exploring" not in choices
    trained = pd.read_csv(tmp_path / "train-2.5gbit.csv").set_index("method")
    warmup = trained.loc["auto", "warmup"]
    assert warmup == 5 + 1 + 4 * (3 + 2 * 20) + 2
    assert_choice_explained(choices, trained.loc["auto", "auto_switches"], warmup)
    assert (trained.drop("auto")["warmup"] == 5).all()
    decision = trained.loc["auto", "auto_decision"]
    assert decision.startswith("decided at ") and "priced: none " in decision
    # decided by the end of its exploration, confirmation rounds included (a decision may
    # keep the candidate that carried the bucket in the last round: its "since" comes first)
    assert int(decision.split()[2].rstrip(";")) <= 1 + 4 * (3 + 2 * 20)
    md = (tmp_path / "validation.md").read_text()
    assert "`auto` (its default candidates)" in md and choices in md
    # the advice regret: the model's pick among the fixed runs against the fastest measured
    assert "Advice regret" in md and "`auto`'s regret" in md
    assert result["regret"][0]["pick"] in set(rows["method"]) - {"auto"}
    assert result["regret"][0]["regret"] >= 0 and len(result["auto_regret"]) == 1
    # auto against its candidates' fixed runs (with its options) and every fixed run
    held = result["auto_regret"][0]
    assert held["fastest_candidate"] in ("none", "bf16", "powersgd(rank=4)",
                                         "topk(error_feedback=True)")
    assert held["fastest_fixed_measured"] == rows.loc[rows["method"] != "auto",
                                                      "measured"].min()
    assert list(pd.read_csv(tmp_path / "regret.csv")["rate_bps"]) == [2.5e9]
    rows = rows[rows["method"] != "auto"]
    assert (rows["rate_bps"] == 2.5e9).all()
    assert (rows["measured"] > 0).all() and (rows["predicted"] > 0).all()
    assert rows["rel_error"].to_numpy() == pytest.approx(
        ((rows["predicted"] - rows["measured"]) / rows["measured"]).to_numpy())
    assert set(pd.DataFrame(result["summary"])["method"]) == set(rows["method"]) | {"all"}
    for name in ("validation.csv", "validation.md", "validation.png", "conditions.csv",
                 "hook-2.5gbit.csv", "collective-2.5gbit.csv", "train-2.5gbit.csv",
                 "profile-tiny-b64-2.5gbit.json"):
        assert (tmp_path / name).stat().st_size > 0, name
    # Resumed: nothing is measured again (no table or profile rewritten), same rows.
    stamps = {p.name: p.stat().st_mtime for p in tmp_path.glob("*-2.5gbit.*")}
    again = validate_sweep(tmp_path, ["2.5gbit"], ["ddp", "fp16", "auto"], "tiny",
                           iterations=3, progress=False, hook_repeats=1, train_repeats=1)
    again = again[again["method"] != "auto"]
    assert {p.name: p.stat().st_mtime for p in tmp_path.glob("*-2.5gbit.*")} == stamps
    assert list(again["measured"]) == list(rows["measured"])
    # Resumed with other methods and batch size: what is new is measured (training,
    # codec costs, the profile), only what was asked is reported. A DiLoCo variant trains
    # in the same job (its options through the sub-job's --methods), priced per inner step.
    # Each run twice, interleaved: the second pass in the reverse order, the run of least
    # median time held against the model. Each times at least 0.2 s too (the time budget),
    # more than 3 of tiny's few-ms iterations, a DiLoCo variant's whole syncs.
    other = validate_sweep(tmp_path, ["2.5gbit"], ["fp16", "int8", "diloco:H=2,method=int8"],
                           "tiny", batch_size=32, iterations=3, progress=False, hook_repeats=1,
                           train_repeats=2, min_timed_s=0.2)
    assert list(other["method"]) == ["fp16", "int8", "diloco(H=2, method=int8)"]
    assert (other["measured"] > 0).all() and (other["predicted"] > 0).all()
    variant = other.iloc[2]  # one int8 exchange per 2 inner steps, the compute of a step
    assert variant["bytes_sent"] == pytest.approx(other.iloc[1]["bytes_sent"] / 2, rel=0.01)
    assert variant["predicted"] > variant["t_iter_single"] and variant["tokens_per_step"] == 32
    md = (tmp_path / "validation.md").read_text()
    assert "DiLoCo variants" in md and "| diloco(H=2, method=int8) |" in md
    assert "diloco" not in pd.read_csv(tmp_path / "regret.csv")["pick"].str.cat()
    train = pd.read_csv(tmp_path / "train-2.5gbit.csv")
    assert sorted(zip(train["method"], train["batch_size"], train["repeat"])) == \
        [("auto", 64, 0), ("bf16", 64, 0), ("ddp", 64, 0), ("diloco", 32, 0), ("diloco", 32, 1),
         ("fp16", 32, 0), ("fp16", 32, 1), ("fp16", 64, 0), ("int8", 32, 0), ("int8", 32, 1),
         ("none", 64, 0), ("powersgd", 64, 0), ("topk", 64, 0)]
    small = train[train["batch_size"] == 32]
    assert list(small["method"]) == ["fp16", "int8", "diloco", "diloco", "int8", "fp16"]
    assert (small["min_timed_s"] == 0.2).all() and (small["iterations"] > 3).all()
    assert (small.loc[small["method"] == "diloco", "iterations"] % 2 == 0).all()
    big = train[train["batch_size"] == 64]  # --min-timed-seconds 0: --iterations only
    assert (big["min_timed_s"] == 0).all() and (big["iterations"] == 3).all()
    assert list(other["measured"]) == list(small.groupby("method", sort=False)["t_iter_s"].min())
    assert set(other["repeats"]) == {2}
    hook = pd.read_csv(tmp_path / "hook-2.5gbit.csv")
    assert {"int8", "none"} <= set(hook["method"]) and set(hook["repeats"]) == {1}
    # Priced on the workload's own gradients, keyed by the batch size the sub-jobs resolve
    # (no --batch-size at first: tiny's own 64).
    assert set(hook["data"]) == {"tiny gradient, batch 64, 25 MB buckets",
                                 "tiny gradient, batch 32, 25 MB buckets"}
    # The profile is DDP's: its copies out of the buckets after backward are timed.
    assert json.loads((tmp_path / "profile-tiny-b64-2.5gbit.json").read_text())["finalize_s"] > 0
    small = json.loads((tmp_path / "profile-tiny-b32-2.5gbit.json").read_text())
    assert small != json.loads((tmp_path / "profile-tiny-b64-2.5gbit.json").read_text())
    assert (other["t_iter_single"] != rows["t_iter_single"].iloc[0]).all()
    assert list(pd.read_csv(tmp_path / "validation.csv")["method"]) == \
        ["fp16", "int8", "diloco(H=2, method=int8)"]


def test_the_model_buckets_as_torch_does_when_bench_train_sets_the_cap(tmp_path):
    # bench_train passes bucket_cap_mb to DDP; torch then uses that cap for the first bucket
    # too, and validate models it so (DDP(cap, first_bucket_mb=cap)).
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from gradcomp.evaluation.benches.train import model_profile
    from gradcomp.evaluation.model.bucketing import DDP
    from gradcomp.evaluation.workloads.load import load_workload

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    try:
        for cap in (25.0, 5.0):
            workload = load_workload("mlp", batch_size=8)
            model, (x, y) = workload.model, workload.batches(0, 0)
            ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap)
            for _ in range(3):  # DDP rebuilds its buckets in the second iteration
                F.cross_entropy(ddp(x), y).backward()
            torch_sizes = ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"]
            profile = model_profile("mlp", 8, repeats=1, warmup=0)
            modelled = [4 * sum(profile.sizes[i] for i in b.params)
                        for b in DDP(cap, first_bucket_mb=cap).assign(profile)]
            assert ", ".join(map(str, modelled)) == torch_sizes
    finally:
        dist.destroy_process_group()


def test_a_compute_slowdown_slows_every_predicted_iteration_by_its_compute():
    # The committed testbed tables of 2026-11-27: with lambda the profile's forward and
    # optimizer take lambda times as long, and backward (so every bucket's release) too;
    # lambda 1 is the prediction as before.
    from pathlib import Path

    from gradcomp.evaluation.profiles.profiles import load_profile
    from gradcomp.evaluation.testbed.validate import pooled_inputs, predict_rate

    out = Path(__file__).parent.parent / "benchmarks/results/testbed-2026-11-27"
    every = {"train": None, "hook": None, "collective": None}
    shared = pooled_inputs(out, [1e9], None, "mlp", 64)
    base = predict_rate(out, 1e9, every, shared)
    pd.testing.assert_frame_equal(base, predict_rate(out, 1e9, every, shared,
                                                     compute_slowdown=1.0))
    slow = predict_rate(out, 1e9, every, shared, compute_slowdown=1.5)
    profile = load_profile(out / "profile-mlp-b64-1gbit.json")
    fixed = profile.forward_s + profile.optimizer_s
    grew = (slow["predicted"] - base["predicted"]).dropna()
    assert len(grew) == 9 and list(slow["measured"]) == list(base["measured"])
    assert (grew >= 0.5 * fixed - 1e-12).all()
    assert (grew <= 0.5 * (fixed + profile.backward_s) + 1e-12).all()
    with pytest.raises(ValueError, match="compute_slowdown"):
        predict_rate(out, 1e9, every, shared, compute_slowdown=0.5)


def test_each_rates_lambda_is_fitted_on_the_other_rates_uncompressed_runs_only():
    from gradcomp.evaluation.testbed.slowdown import ASSUMED, fit_slowdowns

    def predictor(true_lambda):
        def predict_at(rate, slowdown):  # 10 ms of compute and the rate's communication
            compute, comm = 0.01, 8e6 / rate
            return pd.DataFrame({"method": ["ddp", "none", "topk"],
                                 "measured": [compute * true_lambda[rate] + comm] * 2 + [9.0],
                                 "predicted": [compute * slowdown + comm] * 3})
        return predict_at

    rates = [1e8, 1e9, 2.5e9]
    fitted = fit_slowdowns(rates, predictor({1e8: 2.0, 1e9: 1.25, 2.5e9: 1.25}))
    # 100 Mbit/s from the other two (both 1.25; top-k's far-off time fits nothing)
    assert fitted[1e8][0] == pytest.approx(1.25, abs=2e-3)
    assert fitted[1e8][1] == "fitted to the ddp and none runs at 1 Gbit/s, 2.5 Gbit/s"
    assert 1.25 < fitted[1e9][0] < 2.0 and 1.25 < fitted[2.5e9][0] < 2.0
    # a rate's own runs never move its lambda; they move the others'
    again = fit_slowdowns(rates, predictor({1e8: 1.0, 1e9: 1.25, 2.5e9: 1.25}))
    assert again[1e8] == fitted[1e8] and again[1e9][0] < fitted[1e9][0]
    assert fit_slowdowns([1e9], predictor({1e9: 1.5})) == {1e9: (1.0, ASSUMED)}

    def compressed_only(rate, slowdown):
        return predictor({r: 1.5 for r in rates})(rate, slowdown).iloc[2:]

    assert fit_slowdowns(rates, compressed_only)[1e9] == (1.0, ASSUMED)


def test_validate_predicts_every_method_with_the_lambda_of_the_other_rates(tmp_path, capsys):
    # The committed testbed run of 2026-11-27, predicted again (every table measured, so
    # nothing is run): every rate is predicted from the least disturbed of the four rates'
    # profiles (2.5 Gbit/s') and hook-path costs; each rate's lambda is the one fitted to the
    # other three rates' ddp and none runs against it (1.202, 1.194, 1.167, 1.333; with each
    # rate's own profile benchmarks/results/slowdown-validation found 1.162, 1.168, 1.140,
    # 1.187), applied to every method, and reported.
    import shutil
    from pathlib import Path

    from gradcomp.evaluation.benches import collective, hookpath, train
    from gradcomp.evaluation.benches.train import make_spec
    from gradcomp.evaluation.common.store import ResultTable
    from gradcomp.evaluation.testbed.validate import (model_collective_sizes, planned_keys,
                                                      pooled_inputs, predict_rate)

    source = Path(__file__).parent.parent / "benchmarks/results/testbed-2026-11-27"
    for name in source.glob("*-*bit*"):
        shutil.copy(name, tmp_path)
    shutil.copy(source / "conditions.csv", tmp_path)
    # (auto left out: its settings changed since, so validate would measure it again, and
    # its candidates with its options, which that run has not measured)
    methods = "ddp,none,fp16,bf16,int8,topk,randomk,powersgd,signsgd"
    planned = planned_keys(methods.split(","), make_spec("mlp", None, 5, 20, 25.0, None), 2,
                           model_collective_sizes("mlp"))
    key_columns = {"collective": collective.KEY_COLUMNS, "hook": hookpath.KEY_COLUMNS}
    for table, keys in planned.items():  # all measured (the runs once: repeat 0): validate
        for tag in ("100mbit", "500mbit", "1gbit", "2.5gbit"):  # only predicts
            path = tmp_path / f"{table}-{tag}.csv"
            stored = (train.train_table(path) if table == "train" else
                      ResultTable(path, key_columns[table]))
            assert keys <= stored.done_keys()
    stdout = validate_here(capsys, "--methods", methods, "--train-repeats", "1", "--out",
                           str(tmp_path))
    rows = pd.read_csv(tmp_path / "validation.csv")
    lambdas = rows.drop_duplicates("rate_bps").set_index("rate_bps")["compute_slowdown"]
    assert list(lambdas) == pytest.approx([1.202, 1.194, 1.167, 1.333], abs=2e-3)
    every = {"train": None, "hook": None, "collective": None}
    rates = (100e6, 500e6, 1e9, 2.5e9)
    shared = pooled_inputs(tmp_path, rates, None, "mlp", 64)  # the least disturbed of the four
    assert shared.profile_file.name == "profile-mlp-b64-2.5gbit.json"
    for rate in rates:
        expected = predict_rate(tmp_path, rate, every, shared, compute_slowdown=lambdas[rate])
        here = rows[rows["rate_bps"] == rate].reset_index(drop=True)
        assert list(here["predicted"].dropna()) == pytest.approx(
            list(expected["predicted"].dropna()), rel=1e-12)
    assert set(rows.loc[rows["rate_bps"] == 1e9, "slowdown_source"]) == {
        "fitted to the ddp and none runs at 100 Mbit/s, 500 Mbit/s, 2.5 Gbit/s"}
    line = ("Compute slowdown lambda, applied to every method: 100 Mbit/s "
            f"{lambdas[100e6]:.3f} (fitted to the ddp and none runs at 500 Mbit/s, 1 Gbit/s, "
            "2.5 Gbit/s);")
    assert line in (tmp_path / "validation.md").read_text() and line in stdout


def test_validate_holds_each_runs_least_disturbed_repeat_against_the_model(tmp_path, capsys):
    # The committed quiet sweep of 2026-11-28 (one run per method, stored before the repeat
    # column: repeat 0) at two rates, given a second run of each (int8's 20% faster and timed
    # for 75 iterations, as under a time budget, the others 10% slower): validate with its
    # default two repeats measures nothing and holds int8's second run and the others' first
    # against the model, and says how many iterations each timed.
    import shutil
    from pathlib import Path

    from gradcomp.evaluation.benches.train import train_table

    source = Path(__file__).parent.parent / "benchmarks/results/testbed-2026-11-28-auto"
    for name in (*source.glob("*-1gbit*"), *source.glob("*-2.5gbit*"),
                 source / "conditions.csv"):
        shutil.copy(name, tmp_path)
    args = ("--rates", "1gbit,2.5gbit", "--methods", "ddp,none,int8", "--out", str(tmp_path))
    validate_here(capsys, *args, "--train-repeats", "1")
    once = pd.read_csv(tmp_path / "validation.csv")
    assert set(once["repeat"]) == {0} and set(once["repeats"]) == {1}
    for tag in ("1gbit", "2.5gbit"):
        table = train_table(tmp_path / f"train-{tag}.csv")
        for _, row in table.frame().iterrows():
            factor, timed = (0.8, 75) if row["method"] == "int8" else (1.1, 20)
            table.append({**row.to_dict(), "repeat": 1, "t_iter_s": row["t_iter_s"] * factor,
                          "iterations": timed})
    validate_here(capsys, *args)  # every run measured twice: nothing to measure
    twice = pd.read_csv(tmp_path / "validation.csv")
    assert list(twice["method"]) == list(once["method"]) and set(twice["repeats"]) == {2}
    int8 = twice["method"] == "int8"
    assert list(twice.loc[int8, "measured"]) == pytest.approx(
        list(0.8 * once.loc[int8, "measured"]), rel=1e-12)
    assert list(twice.loc[~int8, "measured"]) == list(once.loc[~int8, "measured"])
    assert list(twice["repeat"]) == [1 if m == "int8" else 0 for m in twice["method"]]
    assert list(twice["iterations"]) == [75 if m == "int8" else 20 for m in twice["method"]]
    # the other runs and the rest of the inputs are as before: lambda and predictions too
    assert list(twice["predicted"]) == list(once["predicted"])
    md = (tmp_path / "validation.md").read_text()
    assert "Training runs: 2 per method and rate, measured interleaved" in md
    assert "Timed iterations per training run: 20-75 (at least `--iterations`" in md


def test_validate_prices_diloco_variants_per_inner_step(tmp_path, capsys):
    # The committed testbed run of DiLoCo variants (GPT, its 100 Mbit/s tables), predicted
    # again (every table measured: nothing runs): the variants, given with their options on
    # the command line, are priced by the DiLoCo timeline and reported with utilisation and
    # bytes per token against the none hook's.
    import shutil
    from pathlib import Path

    from gradcomp.evaluation.model.fit import fit_collectives, hook_costs, network_from_fit
    from gradcomp.evaluation.model.methods import resolve
    from gradcomp.evaluation.model.timeline import predict
    from gradcomp.evaluation.profiles.profiles import load_profile

    source = Path(__file__).parent.parent / "benchmarks/results/testbed-diloco-2026-11-28"
    for name in (*source.glob("*-*bit*"), source / "conditions.csv"):
        shutil.copy(name, tmp_path)
    validate_here(capsys, "--rates", "100mbit", "--methods", DILOCO_METHODS, "--model", "gpt",
                  "--iterations", "200", "--train-repeats", "1", "--out", str(tmp_path))
    rows = pd.read_csv(tmp_path / "validation.csv")
    variants = rows[rows["method"].str.startswith("diloco")]
    assert list(variants["method"]) == [
        "diloco(H=10, method=none)", "diloco(H=100, method=none)", "diloco(H=10, method=int8)",
        "diloco(H=100, method=int8)", "diloco(H=100, method=int8, fragments=4, delay=5)"]
    fits = fit_collectives(pd.read_csv(tmp_path / "collective-100mbit.csv"))
    costs = hook_costs(pd.read_csv(tmp_path / "hook-100mbit.csv"))
    profile = load_profile(tmp_path / "profile-gpt-b16-100mbit.json")
    train = pd.read_csv(tmp_path / "train-100mbit.csv")
    for _, row in variants.iterrows():  # the DiLoCo timeline on the rate's fitted network
        variant = "diloco:" + row["method"][7:-1].replace(" ", "")
        pred = predict(profile, network_from_fit(fits, 2, 1e8), resolve(variant, costs))
        assert pred.bucketing == "diloco" and row["predicted"] == pytest.approx(pred.t_iter_s)
        run = train[train["options"].map(lambda o: resolve("diloco", None, **json.loads(o))
                                         .name if o.startswith('{"H"') else "") == row["method"]]
        assert row["exchange_s"] == pytest.approx(  # the telemetry's seconds per inner step
            float(run[["encode_s", "comm_s", "decode_s"]].sum(axis=1).iloc[0]))
    md = (tmp_path / "validation.md").read_text()
    assert "DiLoCo variants" in md and "fewer_bytes" in md and "exchange_share" in md
    assert not pd.read_csv(tmp_path / "regret.csv")["pick"].str.startswith("diloco").any()


DILOCO_METHODS = ("ddp,none,int8,diloco:H=10,diloco:H=100,diloco:H=10,method=int8,"
                  "diloco:H=100,method=int8,diloco:H=100,method=int8,fragments=4,delay=5")
