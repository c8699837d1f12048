"""Codec-cost tables by name, robust codec fits (outliers, poor fits flagged and excluded),
the one recommendation (never a method that did not converge) against fp32 DDP and a 16-bit
all-reduce, the bf16 baseline row, and the plot styles that keep every line visible."""
import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from gradcomp import names
from gradcomp.compressors import compressor
from gradcomp.evaluation.analyses import weighed
from gradcomp.evaluation.analyses.advise import advise
from gradcomp.evaluation.analyses.evidence import evidence_of
from gradcomp.evaluation.analyses.recommend import (recommend_by_accuracy,
                                                    recommend_by_iteration, sixteen_bit)
from gradcomp.evaluation.model.cost_tables import (CostTable, cost_table, default_costs,
                                                   hardware_note, measured_table)
from gradcomp.evaluation.model.fit import codec_costs, fit_codec, fit_status, summary
from gradcomp.evaluation.profiles.profiles import load_profile, save_profile
from gradcomp.evaluation.report.style import halo_widths, line_styles

SIZES = [2**k for k in range(10, 23, 2)]
QUESTION = "`resnet50` on 8 workers at 10 Gbit/s, ddp bucketing"


def weighed_ranking(table, methods, bandwidth="10gbit", device=None):
    """`weighed.ranking` of ResNet-50 on 8 workers, and the evidence it was weighed with."""
    evidence = evidence_of(table)
    return weighed.ranking("resnet50", dict(workers=8, bandwidth=bandwidth), table, evidence,
                           methods, device), evidence


def weighed_tta(runs, table, bandwidth="10gbit", device=None):
    """`weighed.accuracy` of convergence `runs` for ResNet-50 on 8 workers, and the
    evidence."""
    evidence = evidence_of(table)
    return weighed.accuracy(runs, "resnet50", dict(workers=8, bandwidth=bandwidth), table,
                            evidence, device), evidence


def linear_table(method="qsgd", a=50e-6, b=2e-9, noise=0.03, seed=0) -> pd.DataFrame:
    """A compress-bench-like table of a + b*n with a few % of multiplicative noise."""
    rng = np.random.default_rng(seed)
    n = np.array(SIZES, float)
    return pd.DataFrame({"method": method, "numel": SIZES, "device_name": "cpu",
                         "encode_s": (a + b * n) * rng.uniform(1 - noise, 1 + noise, len(n)),
                         "decode_s": (a / 2 + b * n / 4) * rng.uniform(1 - noise, 1 + noise,
                                                                      len(n))})


def test_an_injected_outlier_cannot_wreck_the_fit():
    table = linear_table()
    table.loc[table["numel"] == 2**18, "encode_s"] *= 15  # one measurement under load
    fit = fit_codec(table)["qsgd", "encode"]
    assert fit.dropped == (2**18,)
    assert fit.params["b"] == pytest.approx(2e-9, rel=0.05)
    assert fit.params["a"] == pytest.approx(50e-6, rel=0.3)
    assert fit.r2 > 0.99 and fit.worst_rel < 0.1 and fit_status(fit) == "ok"
    # Plain least squares is wrecked by it: the intercept the issue reported.
    plain = np.polyfit(table["numel"], table["encode_s"], 1)[1]
    assert plain > 10 * 50e-6
    row = summary(fit_codec(table)).set_index(["method", "phase"]).loc[("qsgd", "encode")]
    assert row["dropped"] == str(2**18) and row["status"] == "ok"
    assert row["worst_rel_residual"] == pytest.approx(fit.worst_rel)


def test_a_poor_fit_is_flagged_and_excluded_from_pricing():
    rng = np.random.default_rng(1)
    noisy = pd.DataFrame({"method": "int8", "numel": SIZES, "device_name": "cpu",
                          "encode_s": rng.uniform(1e-4, 1e-2, len(SIZES)),
                          "decode_s": 1e-5 + 1e-9 * np.array(SIZES, float)})
    table = pd.concat([noisy, linear_table("topk")], ignore_index=True)
    fits = fit_codec(table)
    assert fits["int8", "encode"].r2 < 0.9 and fit_status(fits["int8", "encode"]) == "excluded"
    assert set(codec_costs(fits, usable_only=True)) == {"topk"}
    costs = measured_table(table)
    assert "int8" in costs.excluded and "R^2" in costs.excluded["int8"]
    assert not costs.priced("int8") and costs.priced("topk") and costs.priced("none")
    ranking, evidence = weighed_ranking(costs, ["int8", "topk"])
    line = recommend_by_iteration(ranking, costs, "cpu", QUESTION, evidence)
    assert "int8" not in set(ranking["method"]) and "int8" not in line


def test_a_flat_cost_is_used_though_its_r2_says_nothing():
    rng = np.random.default_rng(2)
    flat = pd.DataFrame({"method": "signsgd", "numel": SIZES,
                         "encode_s": 250e-6 * rng.uniform(0.95, 1.05, len(SIZES)),
                         "decode_s": 1e-5 + 1e-9 * np.array(SIZES, float)})
    fit = fit_codec(flat)["signsgd", "encode"]
    assert fit.r2 < 0.9 and fit.worst_rel <= 0.2 and fit_status(fit) == "flat"
    assert "signsgd" in codec_costs(fit_codec(flat), usable_only=True)


def test_a_flat_cost_measured_with_noise_is_priced_as_rough():
    """A host-bound call: flat, one point 40% above the rest (the H200 table's top-k decode
    had one 27% off); priced, its worst point said, not left out."""
    flat = pd.DataFrame({"method": "topk", "numel": SIZES, "encode_s": 1e-4,
                         "decode_s": [1.4e-4] + [1e-4] * (len(SIZES) - 1)})
    fit = fit_codec(flat)["topk", "decode"]
    assert fit.r2 < 0.9 and 0.2 < fit.worst_rel <= 0.5 and fit_status(fit) == "rough"
    assert "topk" in codec_costs(fit_codec(flat), usable_only=True)


def test_an_ok_fit_has_no_point_more_than_half_off_its_line():
    # A cost that bends at the smallest size (a launch overhead): R^2 is high, the line
    # misses that point by 3x. Not "ok", but priced ("rough"), its worst point said.
    bent = linear_table("fp16", a=5e-6, b=1e-9, noise=0.0)
    bent.loc[bent["numel"] == SIZES[0], "encode_s"] *= 4
    fit = fit_codec(bent)["fp16", "encode"]
    assert fit.r2 >= 0.9 and fit.worst_rel > 0.5 and fit_status(fit) == "rough"
    assert "fp16" in codec_costs(fit_codec(bent), usable_only=True)
    assert summary(fit_codec(bent)).set_index(["method", "phase"]).loc[
        ("fp16", "encode"), "status"] == "rough"
    # The rule holds for every fit, whatever its noise: every point an "ok" line is drawn
    # through (all but the dropped outliers), measured against the line itself.
    oks = 0
    for seed in range(20):
        table = linear_table(noise=0.6, seed=seed)
        for (_, phase), fit in fit_codec(table).items():
            if fit_status(fit) != "ok":
                continue
            oks += 1
            used = table[~table["numel"].isin(fit.dropped)]
            line = fit.params["a"] + fit.params["b"] * used["numel"].to_numpy(float)
            assert (abs(used[f"{phase}_s"].to_numpy(float) / line - 1) <= 0.5 + 1e-9).all()
    assert oks > 0  # the check ran on some "ok" fits


def test_named_cost_tables_and_bad_names():
    h200 = cost_table("h200")
    assert h200.device == "NVIDIA H200" and h200.name == "h200"
    for fact in ("2026-11-27", "b390ee5", "benchmarks/results/h200-2026-11-27/compress_h200.csv"):
        assert fact in h200.provenance
    assert h200.changed == () and h200.notes == ()  # measured at the current kernels
    # threshold's decode: a flat cost whose 2^10 point lies 52% above the line
    assert set(h200.excluded) == {"threshold"} and "52% off" in h200.excluded["threshold"]
    assert set(names()) - {"none", "threshold"} <= set(h200.costs)
    assert {f.n for f in h200.fits.values()} == {9}  # 2^10, 2^12, ..., 2^26, none dropped
    assert all(h200.priced(m) for m in names() if m != "threshold")
    assumed = cost_table("assumed")
    assert assumed.costs == {} and assumed.priced("topk") and assumed.device == ""
    for bad in ("b200", "H100", ""):
        with pytest.raises(ValueError, match=r"costs=.* is not allowed: choose one of 'h200', "
                                             r"'v100', 'a100-80gb', 'a100-40gb', 'h100', "
                                             r"'measured', 'assumed'"):
            cost_table(bad)
    with pytest.raises(ValueError, match="costs='measured' is not allowed here"):
        cost_table("measured")
    measured = cost_table("measured", linear_table())
    assert measured.device == "cpu" and set(measured.costs) == {"qsgd"}


def test_the_shipped_h200_table_is_the_committed_measurement():
    from pathlib import Path

    from gradcomp.evaluation.model import cost_tables

    meta = json.loads((cost_tables.DATA / "h200.json").read_text())
    committed = Path(__file__).parent.parent / meta["file"]
    assert (cost_tables.DATA / "h200.csv").read_bytes() == committed.read_bytes()


def test_the_question_is_priced_on_its_own_device(tmp_path):
    assert load_profile("resnet50").device == "NVIDIA V100"
    assert load_profile("gpt2").device == "NVIDIA V100"
    path = save_profile(load_profile("vgg16"), tmp_path / "p.json")
    assert load_profile(path).device == "NVIDIA V100"
    assert default_costs("NVIDIA V100", measured=False) == "v100"
    assert default_costs("NVIDIA H100 80GB HBM3", measured=False) == "h100"
    assert default_costs("NVIDIA H200", measured=False) == "h200"
    assert default_costs("NVIDIA A100-SXM4-40GB", measured=False) == "a100-40gb"
    assert default_costs("NVIDIA GeForce RTX 4090", measured=False) == "h200"  # no known kind
    assert default_costs("cpu", measured=True) == "measured"
    with pytest.raises(ValueError, match="give --costs"):
        default_costs("cpu", measured=False)
    h200 = cost_table("h200")
    assert hardware_note("NVIDIA H200", h200) is None
    assert hardware_note("NVIDIA V100", h200) == (
        "mixed hardware: NVIDIA V100 compute with NVIDIA H200 codec costs, two "
        "different GPUs: the codecs would run slower on the profile's GPU")
    v100 = cost_table("v100")
    assert hardware_note("NVIDIA V100", v100) == (
        "NVIDIA V100 compute with NVIDIA V100 codec costs scaled from NVIDIA H200 by "
        "memory bandwidth, not measured")
    assert hardware_note("NVIDIA H100 80GB HBM3", v100).startswith(
        "mixed hardware: NVIDIA H100 80GB HBM3 compute with NVIDIA V100 codec costs (scaled "
        "from NVIDIA H200, not measured), two different GPUs: the codecs would run faster")
    assert hardware_note("NVIDIA H100 80GB HBM3", cost_table("h100")) == (
        "NVIDIA H100 80GB HBM3 compute with NVIDIA H100 codec costs scaled from NVIDIA H200 by "
        "memory bandwidth, not measured")
    assert sixteen_bit("NVIDIA V100") == "fp16" and sixteen_bit("NVIDIA H100 80GB HBM3") == \
        "bf16" and sixteen_bit("cpu") == "bf16"


def test_on_a_cluster_of_another_gpu_the_note_says_whose_compute_and_whose_codecs():
    # A V100 profile on A100 nodes: the compute is the V100's as measured, the codecs (and
    # the 16-bit baseline) the cluster's A100s', their table scaled, never "A100 compute".
    a100 = cost_table("a100-40gb")
    note = hardware_note("NVIDIA V100", a100, gpu="NVIDIA A100 40GB")
    assert note == ("NVIDIA V100 compute as measured (the profile's), codecs and the 16-bit "
                    "baseline on the cluster's NVIDIA A100 40GB, with NVIDIA A100 40GB codec "
                    "costs scaled from NVIDIA H200 by memory bandwidth, not measured")
    # the cluster's GPU measured (another spelling of the H200 is the same kind)
    assert hardware_note("NVIDIA V100", cost_table("h200"), gpu="NVIDIA H200 141GB") == (
        "NVIDIA V100 compute as measured (the profile's), codecs and the 16-bit baseline on "
        "the cluster's NVIDIA H200 141GB, with NVIDIA H200 codec costs as measured")
    assert hardware_note("NVIDIA H200", cost_table("h200"), gpu="NVIDIA H200 141GB") is None
    # a table of a third GPU: mixed, and the codecs' speed against the cluster's GPU
    assert hardware_note("NVIDIA V100", cost_table("v100"), gpu="NVIDIA H100").endswith(
        "with NVIDIA V100 codec costs (scaled from NVIDIA H200, not measured), two "
        "different GPUs: the codecs would run faster on the cluster's GPU")
    assert hardware_note("NVIDIA V100", cost_table("assumed"), gpu="NVIDIA A100 40GB") == (
        "NVIDIA V100 compute as measured (the profile's), codecs and the 16-bit baseline on "
        "the cluster's NVIDIA A100 40GB, with assumed codec costs (memory-bound floors, not "
        "measured)")
    # the same GPU named by the cluster: the note as without a cluster
    v100 = cost_table("v100")
    assert hardware_note("NVIDIA V100", v100, gpu="NVIDIA V100") == \
        hardware_note("NVIDIA V100", v100)


def test_a_gpu_without_a_measurement_gets_the_nearest_table_scaled_by_memory_bandwidth():
    h200 = cost_table("h200")
    bandwidths = {"v100": 900e9, "a100-40gb": 1555e9, "a100-80gb": 2039e9, "h100": 3.35e12}
    for name, bandwidth in bandwidths.items():
        scaled = cost_table(name)
        assert scaled.scaled_from == h200.device and "measured" not in scaled.label.replace(
            "not measured", "")
        assert "scaled from NVIDIA H200, not measured" in scaled.label
        assert "scaled from NVIDIA H200, not measured" in scaled.provenance
        assert scaled.excluded == h200.excluded and scaled.changed == h200.changed
        for method, phases in h200.costs.items():
            for (a, b), (a_scaled, b_scaled) in zip(phases, scaled.costs[method]):
                assert a_scaled == a  # launch-bound: as measured
                assert b_scaled == pytest.approx(b * 4.8e12 / bandwidth, rel=1e-12)
    v100 = cost_table("v100")
    assert "900 GB/s" in v100.provenance and "V100 datasheet" in v100.provenance
    assert v100.notes == ()  # the measured table has none: no stale kernels to carry


def test_run_asks_for_costs_before_measuring_a_profile_of_no_device(tmp_path):
    from gradcomp.evaluation.run import run

    data = json.loads(save_profile(load_profile("resnet50"), tmp_path / "p.json").read_text())
    data.pop("device")  # as a profile saved before profiles carried their device
    (tmp_path / "old.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="unrecorded device .* give --costs"):
        run(tmp_path / "r", profile=tmp_path / "old.json", progress=False)
    with pytest.raises(ValueError, match="costs='b200' is not allowed"):
        run(tmp_path / "r", costs="b200", progress=False)
    assert not (tmp_path / "r").exists()


def test_every_ranking_holds_the_16_bit_baseline_of_the_profiles_gpu():
    table = advise("resnet50", 8, "10gbit", ["topk"])  # a V100 profile: no bf16 there
    assert set(table["method"]) == {"none", "fp16", "topk"}
    assert set(advise("resnet50", 8, "10gbit", ["bf16"])["method"]) == {"none", "fp16"}
    h100 = dataclasses.replace(load_profile("resnet50"), device="NVIDIA H100 80GB HBM3")
    assert set(advise(h100, 8, "10gbit", ["topk"])["method"]) == {"none", "bf16", "topk"}


def convergence_runs(reached: dict) -> pd.DataFrame:
    """A `bench converge` summary: one seed per (method, error feedback) of `reached`,
    {(method, ef): iterations or None (not reached)}."""
    rows = []
    for (method, ef), iterations in reached.items():
        rows.append({"task": "teacher", "metric": "accuracy", "target": 0.85,
                     "method": method, "options": json.dumps(compressor(method).options()),
                     "error_feedback": ef, "seed": 0, "reached": iterations is not None,
                     "iterations_to_target": np.nan if iterations is None else iterations,
                     "max_iters": 200, "final_accuracy": 0.9 if iterations else 0.3,
                     "diverged": False, "bytes_sent_per_iter": 1000.0, "ratio": 4.0})
    return pd.DataFrame(rows)


def test_one_verdict_never_recommends_a_method_that_did_not_converge():
    # randomk is the fastest per iteration at 10 Gbit/s, but it never reached the target.
    runs = convergence_runs({("none", False): 70, ("bf16", False): 70, ("fp16", False): 70,
                             ("randomk", False): None, ("randomk", True): None,
                             ("topk", False): 150, ("topk", True): 40})
    h200 = cost_table("h200")
    tta, evidence = weighed_tta(runs, h200, device="NVIDIA H200")
    per_iteration = tta.sort_values("t_iter_s").iloc[0]
    assert per_iteration["method"] == "randomk"
    line = recommend_by_accuracy(tta, h200, "NVIDIA H200", QUESTION, evidence)
    reached = tta[tta["time_to_target_s"].notna()]
    best = reached.iloc[0]
    assert best["variant"] == "topk +EF" and "**topk +EF**" in line
    none = tta[(tta["method"] == "none")].iloc[0]
    bf16 = tta[(tta["method"] == "bf16")].iloc[0]
    assert f"{none['time_to_target_s'] / best['time_to_target_s']:.2f}x (" in line
    assert f"{bf16['time_to_target_s'] / best['time_to_target_s']:.2f}x (" in line
    assert "x) sooner than fp32 DDP" in line and "x) sooner than the bf16 all-reduce" in line
    assert "did not reach the target: randomk, randomk +EF" in line
    # the table measured topk without error feedback: the verdict says so
    assert "its codec cost is topk's with default options and without error feedback" in line
    assert "codec cost is" not in recommend_by_accuracy(
        tta[tta["variant"] != "topk +EF"], h200, "NVIDIA H200", QUESTION, evidence)
    assert line.startswith("- **Recommendation** for") and "mixed" not in line  # same device
    # On a V100 the 16-bit baseline is fp16.
    v100, _ = weighed_tta(runs, h200, device="NVIDIA V100")
    assert "than the fp16 all-reduce" in recommend_by_accuracy(v100, h200, "NVIDIA V100",
                                                               QUESTION, evidence)


def test_a_baseline_the_table_does_not_price_is_said_not_compared():
    runs = convergence_runs({("none", False): 70, ("bf16", False): 70, ("qsgd", False): 70})
    costs = measured_table(linear_table("qsgd"))  # no bf16 row: bf16 is not priced
    tta, evidence = weighed_tta(runs, costs, "1gbit", "cpu")
    line = recommend_by_accuracy(tta, costs, "cpu", QUESTION, evidence)
    assert "**qsgd**" in line and "sooner than fp32 DDP" in line
    assert "no comparison with the bf16 all-reduce: bf16 is not priced by table `measured`" \
        in line and "sooner than the bf16" not in line


def test_without_convergence_runs_only_lossless_casts_are_recommended():
    h100 = cost_table("h100")
    ranking, evidence = weighed_ranking(h100, ["fp16", "topk", "randomk"], "1gbit")
    assert ranking.iloc[0]["method"] in ("topk", "randomk")  # faster per iteration
    line = recommend_by_iteration(ranking, h100, "NVIDIA H100 80GB HBM3", QUESTION, evidence)
    by = ranking.set_index("method")
    safe = by.loc[["none", "fp16"], "t_iter_s"].idxmin()  # the V100 profile: no bf16 row
    assert f"**{'bf16 all-reduce' if safe == 'bf16' else 'fp16 all-reduce'}**" in line
    assert "No convergence runs" in line and "unverified: " + ranking.iloc[0]["method"] in line


def test_no_line_hides_another_and_error_feedback_is_dashed():
    x = np.arange(10.0)
    same = np.linspace(0.3, 0.9, 10)
    widths = halo_widths({"none": (x, same), "fp16": (x, same + 1e-4), "bf16": (x, same),
                          "randomk": (x, same * 0 + 0.3)})
    assert widths["none"] > widths["fp16"] > widths["bf16"] == widths["randomk"]
    styles = line_styles(["none", "topk", "topk +EF", *[f"m{i}" for i in range(16)]])
    assert styles["topk +EF"]["color"] == styles["topk"]["color"]
    assert styles["topk +EF"]["linestyle"] == "--" and styles["topk"]["linestyle"] == "-"
    colours = [styles[m]["color"] for m in styles if not m.endswith("+EF")]
    assert len(set(colours)) == len(colours) == 18


def test_cost_table_is_a_plain_value():
    table = CostTable("x", "cpu", "made here")
    assert table.costs == {} and table.excluded == {} and not table.priced("topk")
    assert table.label == "`x` (cpu)"
