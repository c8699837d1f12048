"""The benchmarks on this machine: tidy rows with environment columns, resumable sweeps, the
nccl-tests report of collectives on 2 gloo processes and their fit, DDP iteration times with
hooks on 2 gloo processes (one spawn per benchmark)."""
import json
import math
import time

import pandas as pd
import pytest
import torch

import gradcomp
from gradcomp.evaluation.benches import collective as bc, compress as bz, train as bt
from gradcomp.evaluation.benches.hookpath import hook_sizes
from gradcomp.evaluation.common.store import ResultTable
from gradcomp.evaluation.model.cost_tables import cost_table
from gradcomp.evaluation.model.fit import fit_runs
from gradcomp.evaluation.profiles.profiles import load_profile
from gradcomp.evaluation.workloads.load import load_workload

from auto_rows import assert_choice_explained

ENV = ("device_name", "cpu", "torch_version", "gradcomp_version", "world_size", "backend",
       "hostname", "python_version", "date")
METHODS = ["none", "fp16", ("topk", {"ratio": 0.05}), "qsgd"]
SIZES = [256, 1024]


def test_compress_rows_match_the_compressors_wire_size(tmp_path):
    df = bz.bench_compress(METHODS, SIZES, repeats=1, warmup=0, out=tmp_path / "c.csv")
    assert len(df) == len(METHODS) * len(SIZES)
    assert set(ENV) <= set(df.columns)
    assert (df["world_size"] == 1).all() and (df["backend"] == "none").all()
    assert (df["device_name"] == "cpu").all()
    assert (df["gradcomp_version"] == gradcomp.__version__).all()
    for row in df.to_dict("records"):
        comp = gradcomp.compressor(row["method"], **json.loads(row["options"]))
        assert row["bytes_sent"] == comp.wire_nbytes(row["numel"])
        assert row["bytes_original"] == 4 * row["numel"]
        assert row["ratio"] == pytest.approx(row["bytes_original"] / row["bytes_sent"])
        assert row["encode_s"] > 0 and row["decode_s"] > 0
    topk = df[df["method"] == "topk"]
    assert json.loads(topk["options"].iloc[0])["ratio"] == 0.05
    assert (topk["ratio"] > 5).all()
    assert bz.quick_sizes()[0] == 2**10 and bz.quick_sizes()[-1] == 2**16
    assert bz.default_sizes()[-1] == 2**26


def test_an_interrupted_compress_sweep_resumes_without_redoing_rows(tmp_path, monkeypatch):
    measured, real = [], bz.measure_cases

    def measure(cases, *args):
        if len(measured) == 2:
            raise RuntimeError("stopped")  # the sweep is stopped after two blocks
        measured.append(cases)
        return real(cases, *args)

    monkeypatch.setattr(bz, "measure_cases", measure)
    path = tmp_path / "c.csv"
    with pytest.raises(RuntimeError, match="stopped"):
        bz.bench_compress(METHODS, SIZES, repeats=1, warmup=0, out=path, block=1)
    first = ResultTable(path, bz.KEY_COLUMNS).frame()
    assert len(first) == 2 * len(SIZES)  # every size of the first two methods
    measured.clear()
    monkeypatch.setattr(bz, "measure_cases", lambda cases, *a: measured.extend(cases)
                        or real(cases, *a))
    df = bz.bench_compress(METHODS, SIZES, repeats=1, warmup=0, out=path, block=3)
    assert len(measured) == (len(METHODS) - 2) * len(SIZES)
    assert len(df) == len(METHODS) * len(SIZES)
    assert not df.duplicated(["method", "options", "numel"]).any()
    assert df.head(len(first))["encode_s"].tolist() == first["encode_s"].tolist()
    # A sweep over fewer cases returns only its own rows.
    assert len(bz.bench_compress(["fp16"], [256], out=path)) == 1


class Spy:
    """A real compressor whose compress calls are recorded (and, at `slow_size`, made
    `slow_s` slower on calls `slow_calls`: a burst of load on one point)."""

    calls: list = []

    def __init__(self, name, slow_size=None, slow_calls=(), slow_s=0.0, **options):
        self.inner, self.name = gradcomp.compressor(name, **options), name
        self.slow = (slow_size, set(slow_calls), slow_s)
        self.count = 0

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

    def compress(self, grad, key=None):
        size, calls, seconds = self.slow
        Spy.calls.append((self.name, grad.numel()))
        if grad.numel() == size and self.count in calls:
            time.sleep(seconds)
        self.count += 1
        return self.inner.compress(grad, key=key)


def test_repeats_are_interleaved_round_robin_over_sizes_and_methods(monkeypatch):
    monkeypatch.setattr(bz, "compressor", Spy)
    Spy.calls.clear()
    rows = bz.measure_cases([(m, {}, n) for m in ("fp16", "int8") for n in (256, 1024, 4096)],
                            repeats=3, warmup=1, remeasure=0)
    points = {(r["method"], r["numel"]) for r in rows}
    assert len(points) == 6 and all(r["attempts"] == 1 for r in rows)
    timed = Spy.calls[: 4 * 6]  # warm-up and timed rounds; then one call per row
    for i in range(0, len(timed), 6):  # every round visits every point once
        assert set(timed[i:i + 6]) == points


def test_a_point_disturbed_by_load_is_measured_again(monkeypatch):
    # The first attempt at 2^14 elements is 0.2 s slower per encode (a burst of load): far off
    # the line through the other sizes, so it is measured again and the undisturbed attempt
    # kept; without re-measurement the disturbed one stays.
    sizes = [2**k for k in range(10, 21, 2)]
    monkeypatch.setattr(bz, "compressor", lambda name, **o: Spy(name, 2**14, (1, 2, 3), 0.2, **o))
    rows = {r["numel"]: r for r in bz.measure_cases([("fp16", {}, n) for n in sizes],
                                                    repeats=3, warmup=1, remeasure=2)}
    assert rows[2**14]["attempts"] >= 2 and rows[2**14]["encode_s"] < 0.1
    monkeypatch.setattr(bz, "compressor", lambda name, **o: Spy(name, 2**14, (1, 2, 3), 0.2, **o))
    once = {r["numel"]: r for r in bz.measure_cases([("fp16", {}, n) for n in sizes],
                                                    repeats=3, warmup=1, remeasure=0)}
    assert once[2**14]["attempts"] == 1 and once[2**14]["encode_s"] >= 0.2


def test_the_compress_sweep_runs_with_the_threads_asked_and_restores_them(tmp_path):
    before = torch.get_num_threads()
    df = bz.bench_compress(["fp16"], [256, 1024], repeats=1, warmup=0, threads=1)
    assert (df["threads"] == 1).all() and torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        bz.bench_compress(["fp16"], [256], threads=0)


def test_bad_options_are_refused_by_name():
    with pytest.raises(ValueError, match="sizes"):
        bz.bench_compress(["fp16"], [0])
    with pytest.raises(ValueError, match="unknown compressor"):
        bz.bench_compress(["nosuch"], [16])
    with pytest.raises(ValueError, match="backend"):
        bc.bench_collective(backend="mpi")
    with pytest.raises(ValueError, match="sizes"):
        bc.bench_collective(sizes=[6])
    with pytest.raises(ValueError, match="collective"):
        bc.bench_collective(collectives=["gather"])
    with pytest.raises(ValueError, match="model"):
        bt.bench_train(model="resnet")
    with pytest.raises(ValueError, match="ddp"):
        bt.bench_train([("ddp", {"ratio": 0.1})])
    with pytest.raises(ValueError, match="min_timed_s=-1 is not allowed"):
        bt.bench_train(min_timed_s=-1)


def test_the_time_budget_times_at_least_its_seconds_and_the_iterations():
    # n = max(iterations, ceil(budget / iteration time)): 8 s of 90 ms iterations are 89; of
    # 1.4 s ones, the 20 asked for (28 s) already; no budget: the iterations asked for
    assert bt.budgeted_iterations(0.09, 20, 8.0) == 89
    assert bt.budgeted_iterations(1.4, 20, 8.0) == 20
    assert bt.budgeted_iterations(0.25, 3, 1.0) == 4  # 4 x 0.25 s = 1 s exactly
    assert bt.budgeted_iterations(0.001, 20, 0.0) == 20
    # the sub-jobs of `validate` get both (its --min-timed-seconds of 0 too)
    spec = bt.make_spec("tiny", None, 2, 3, 25.0, None, min_timed_s=0.5)
    assert bt.timing_args(spec) == ["--iterations", "3", "--min-timed-seconds", "0.5"]


@pytest.fixture(scope="module")
def collective(tmp_path_factory):
    path = tmp_path_factory.mktemp("coll") / "coll.csv"
    sizes = [4, 256, 4096, 65536, 262144, 1 << 20, 4 << 20]
    return path, sizes, bc.bench_collective(2, "gloo", sizes, repeats=7, warmup=1, out=path,
                                            bandwidth_bps="1gbit")


@pytest.mark.slow
def test_collective_rows_report_as_nccl_tests(collective):
    _, sizes, df = collective
    assert len(df) == 3 * len(sizes) and set(ENV) <= set(df.columns)
    assert (df["world_size"] == 2).all() and (df["backend"] == "gloo").all()
    assert (df["bandwidth_bps"] == 1e9).all()  # the line rate, for the efficiency fit
    assert (df["time_s"] > 0).all() and (df["time_spread_s"] >= 0).all()
    assert (df["time_min_s"] > 0).all() and (df["time_min_s"] <= df["time_s"]).all()
    p = 2
    for row in df.to_dict("records"):
        factor = {"allreduce": 2 * (p - 1) / p, "allgather": (p - 1) / p, "broadcast": 1}
        size = row["nbytes"] * (p if row["collective"] == "allgather" else 1)
        assert row["size_bytes"] == size and row["count"] == row["nbytes"] // 4
        assert row["algbw_GBps"] == pytest.approx(size / row["time_s"] / 1e9)
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * factor[row["collective"]])


@pytest.mark.slow
def test_collective_fit_gives_latency_and_bandwidth(collective):
    fit = bc.collective_fit(collective[2]).set_index("collective")
    assert set(fit.index) == {"allreduce", "allgather", "broadcast"}
    assert (fit["beta_s_per_byte"] > 0).all() and (fit["bandwidth_bps"] > 0).all()
    assert (fit["alpha_s"] >= 0).all()
    assert fit["r2"].notna().all()


@pytest.mark.slow
def test_a_finished_collective_sweep_is_not_measured_again(collective, monkeypatch):
    path, sizes, df = collective
    monkeypatch.setattr(bc, "launch", lambda *a: pytest.fail("spawned again"))
    again = bc.bench_collective(2, "gloo", sizes, repeats=7, warmup=1, out=path)
    assert again["time_s"].tolist() == df["time_s"].tolist()


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    folder = tmp_path_factory.mktemp("train")
    methods = ["ddp", "none", ("topk", {"ratio": 0.05}),
               ("auto", {"explore_iters": 2, "candidates": ["none", ("topk", {"ratio": 0.05})]})]
    df = bt.bench_train(methods, 2, "gloo", model="tiny", batch_size=16, warmup=2,
                        iterations=3, bandwidth_bps="10gbit", out=folder / "runs.csv",
                        profile_out=folder / "tiny.json", hook_out=folder / "hook.csv",
                        hook_repeats=2)
    return folder, methods, df


@pytest.mark.slow
def test_training_rows_time_every_method(training):
    _, methods, df = training
    assert df["method"].tolist() == ["ddp", "none", "topk", "auto"]
    assert set(ENV) <= set(df.columns)
    assert (df["t_iter_s"] > 0).all() and (df["t_iter_single_s"] > 0).all()
    assert df["scaling_factor"].tolist() == pytest.approx(
        (df["t_iter_single_s"] / df["t_iter_s"]).tolist())
    assert (df["workers"] == 2).all() and (df["bandwidth_bps"] == 10e9).all()
    # no time budget: the iterations asked for, and the table says so
    assert (df["iterations"] == 3).all() and (df["min_timed_s"] == 0).all()
    params = sum(p.numel() for p in load_workload("tiny").model.parameters())
    assert (df["params"] == params).all() and (df["bytes_original"] == 4 * params).all()
    rows = df.set_index("method")
    assert rows.loc["topk", "bytes_sent"] < rows.loc["topk", "bytes_original"]
    assert rows.loc["none", "bytes_sent"] == rows.loc["none", "bytes_original"]
    assert rows.loc["topk", "encode_s"] > 0 and rows.loc["topk", "comm_s"] > 0
    assert math.isnan(rows.loc["ddp", "encode_s"])
    # auto is timed in its steady state: untimed, the warm-up and its longest exploration
    # (from iteration 1, 2 candidates x (2 explored + at most 20 confirmation rounds of two),
    # 2 to act), so its choice (decided, not exploring) holds from before its timed iterations
    # unless it switched while timed (`assert_choice_explained`); what the decision rested
    # on is reported
    warmup = rows.loc["auto", "warmup"]
    assert warmup == 2 + 1 + 2 * (2 + 2 * 20) + 2  # rounds: turns of 2
    assert (rows.drop("auto")["warmup"] == 2).all()
    choices = rows.loc["auto", "auto_choices"]
    assert choices.split(" since ")[0] in ("bucket 0: none", "bucket 0: topk")
    assert_choice_explained(choices, rows.loc["auto", "auto_switches"], warmup)
    assert rows.loc["auto", "auto_decision"].startswith("decided at ")
    assert "priced: none " in rows.loc["auto", "auto_decision"]
    assert json.loads(rows.loc["auto", "options"])["candidates"][1] == ["topk", {"ratio": 0.05}]


@pytest.mark.slow
def test_training_rows_and_profile_feed_the_model_fit(training):
    folder, _, df = training
    profile = load_profile(folder / "tiny.json")
    assert profile.numel == df["params"].iloc[0]
    fit = fit_runs(df[~df["method"].isin(["ddp", "auto"])], profile, levels=2, points=3)
    assert 1 <= fit.params["contention"] <= 4 and fit.n == 2


@pytest.mark.slow
def test_a_finished_training_sweep_is_not_run_again(training, monkeypatch):
    folder, methods, df = training
    monkeypatch.setattr(bt, "launch", lambda *a: pytest.fail("spawned again"))
    again = bt.bench_train(methods, 2, "gloo", model="tiny", batch_size=16, warmup=2,
                           iterations=3, bandwidth_bps="10gbit", out=folder / "runs.csv",
                           profile_out=folder / "tiny.json", hook_out=folder / "hook.csv",
                           hook_repeats=2)
    assert again["t_iter_s"].tolist() == df["t_iter_s"].tolist()


@pytest.mark.slow
def test_a_sweep_resumed_for_its_hook_path_keeps_the_measured_profile(training):
    folder, _, _ = training
    before = (folder / "tiny.json").read_bytes()
    bt.bench_train(["none"], 2, "gloo", model="tiny", batch_size=16, warmup=2, iterations=3,
                   bandwidth_bps="10gbit", out=folder / "runs.csv",
                   profile_out=folder / "tiny.json", hook_out=folder / "hook-again.csv",
                   hook_repeats=1)
    assert len(pd.read_csv(folder / "hook-again.csv")) == len(hook_sizes("tiny", 16, 25.0))
    assert (folder / "tiny.json").read_bytes() == before  # not measured again


@pytest.mark.slow
def test_training_measures_the_hook_path_at_the_workloads_bucket_sizes(training):
    folder, _, df = training
    hook = pd.read_csv(folder / "hook.csv")
    sizes = hook_sizes("tiny", 16, 25.0)
    # ddp and none are priced by none's hook path, auto by none (not predicted)
    assert sorted(set(zip(hook["method"], hook["options"]))) == [
        ("none", "{}"), ("topk", '{"ratio": 0.05}')]
    assert sorted(hook.loc[hook["method"] == "topk", "numel"]) == sizes
    assert hook["slowest_rank"].all() and (hook["world_size"] == 2).all()
    assert (hook["encode_s"] > 0).all() and (hook["repeats"] == 2).all()
    # usable as a cost table (advise --costs hook.csv): fitted the hook path's way
    table = cost_table(str(folder / "hook.csv"))
    assert table.provenance.startswith("the hook path") and ("topk", "middle") not in table.fits
    # measured at ratio 0.05, not top-k's default: the variant's own row
    assert {("topk(ratio=0.05)", "encode"), ("topk(ratio=0.05)", "decode")} <= set(table.fits)



def test_collectives_can_be_timed_right_after_compute(tmp_path):
    # Training calls a collective right after computing: the sweep can time it so, the
    # compute run untimed after the barrier, before each call.
    import time

    import torch
    import torch.distributed as dist

    from gradcomp.evaluation.common.timing import compute_for, slowest_rank_times

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    try:
        cpu = torch.device("cpu")
        events = []
        times, _ = slowest_rank_times(lambda: events.append("call"), cpu, 2, 1,
                                      lead_in=lambda: events.append("lead-in"))
        assert events == ["lead-in", "call"] * 3 and len(times) == 2
        start = time.perf_counter()
        compute_for(0.02, cpu)
        assert time.perf_counter() - start >= 0.02
        row = bc.measure_collective("allreduce", 4096, 2, 0, cpu, after_compute_s=0.01)
        assert row["after_compute_s"] == 0.01 and row["time_s"] > 0
        assert bc.measure_collective("allreduce", 4096, 2, 0, cpu)["after_compute_s"] == 0.0
    finally:
        dist.destroy_process_group()
    with pytest.raises(SystemExit):
        bc.main(["--out", str(tmp_path / "c.csv"), "--after-compute-ms", "-1"])
