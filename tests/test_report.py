"""Figures, the markdown report and the main job `run` (quick, end to end, resumed after an
interruption)."""
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.layout_engine import ConstrainedLayoutEngine

from gradcomp.evaluation.analyses import weighed
from gradcomp.evaluation.analyses.evidence import evidence_of
from gradcomp.evaluation.analyses.recommend import recommend_by_iteration
from gradcomp.evaluation.analyses.whatif import sweep
from gradcomp.evaluation.benches import collective as bench_collective
from gradcomp.evaluation.benches import compress as bench_compress
from gradcomp.evaluation.benches import train as bench_train
from gradcomp.evaluation.benches.converge import CONVERGE, options_text
from gradcomp.evaluation.common.env import cpu_threads, environment
from gradcomp.evaluation.common.store import ResultTable
from gradcomp.evaluation.model.cluster import resolve_cluster
from gradcomp.evaluation.model.fit import fit_codec, fit_collectives, validate
from gradcomp.evaluation.model.network import Network
from gradcomp.evaluation.profiles.profiles import save_profile
from gradcomp.evaluation.report import converge_plots, plots
from gradcomp.evaluation.report.style import line_styles
from gradcomp.evaluation.model.cost_tables import cost_table
from gradcomp.evaluation.report.report import (COLLECTIVE, COMPRESS, TRAIN, TRAIN_PROFILE,
                                               write_report)
from gradcomp.evaluation.run import run

METHODS = ("none", "fp16", "topk")
ALPHA_S, BANDWIDTH = 50e-6, 10e9


def make_results(folder: Path, methods=METHODS) -> Path:
    """A small results folder: a real compress bench, collective rows from an exact
    alpha-beta network, the tiny model's measured profile and made-up training rows."""
    bench_compress.bench_compress(list(methods), [1024, 4096, 16384], repeats=1,
                                  out=folder / COMPRESS)
    env = environment("gloo", 2)
    net = Network(2, BANDWIDTH, ALPHA_S)
    table = ResultTable(folder / COLLECTIVE)
    for collective in ("allreduce", "allgather"):
        for nbytes in (1024, 65536, 2**20):
            table.append({"collective": collective, "nbytes": nbytes,
                          "time_s": net.cost(collective, nbytes), **env})
    save_profile(bench_train.model_profile("tiny", 8, repeats=2, warmup=1),
                 folder / TRAIN_PROFILE)
    table = ResultTable(folder / TRAIN)
    for i, method in enumerate(("ddp", *methods)):
        table.append({"method": method, "model": "tiny", "params": 7000, "batch_size": 8,
                      "bucket_cap_mb": 25.0, "warmup": 3, "iterations": 2,
                      "t_iter_s": 0.002 * (i + 1), **env})
    return folder


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """`make_results` and its report on the question most tests ask (resnet50, 8 workers, 10
    Gbit/s), written once: (the folder, the `Report`). Tests write into a copy (`copy_of`)."""
    folder = make_results(tmp_path_factory.mktemp("results"))
    return folder, write_report(folder, "resnet50", 8, "10gbit")


def copy_of(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / folder.name))


def png_size(path) -> tuple[int, int]:
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    return struct.unpack(">II", data[16:24])


def test_plots_write_pngs_of_the_expected_size(tmp_path):
    curves = sweep("resnet50", [1e9, 10e9, 100e9], 8, ["none", "fp16", "topk"])
    heat = sweep("resnet50", [1e9, 10e9, 100e9], [2, 8], ["none", "fp16"])
    compress = pd.DataFrame({"method": ["none", "none", "fp16", "fp16"],
                             "numel": [1024, 65536] * 2, "encode_s": [1e-5, 1e-5, 2e-5, 1e-4],
                             "decode_s": [1e-5, 1e-5, 3e-5, 2e-4], "device_name": "cpu"})
    net = Network(2, BANDWIDTH, ALPHA_S)
    collective = pd.DataFrame([{"collective": c, "nbytes": n, "world_size": 2,
                                "backend": "gloo", "time_s": net.cost(c, n)}
                               for c in ("allreduce", "allgather") for n in (64, 4096, 2**20)])
    check = validate([0.11, 0.2], [0.1, 0.25]).table.assign(method=["none", "fp16"])
    drawn = {
        "speedup.png": (plots.speedup_vs_bandwidth(curves.assign(costs="a"), tmp_path /
                                                   "speedup.png"), (12, 5.5)),
        "codec.png": (plots.codec_costs(compress, tmp_path / "codec.png",
                                        fit_codec(compress)), (14, 6.5)),
        "coll.png": (plots.collective_times(collective, tmp_path / "coll.png",
                                            fit_collectives(collective)), (8, 5)),
        "heat.png": (plots.scaling_heatmap(heat, tmp_path / "heat.png"), (13, 5)),
        "train.png": (plots.predicted_vs_measured(check, tmp_path / "train.png", (6, 4)),
                      (6, 4)),
    }
    for name, (path, (w, h)) in drawn.items():
        assert path == tmp_path / name
        assert png_size(path) == (round(w * plots.DPI), round(h * plots.DPI))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(drawn)  # no temporary files


def test_the_heatmap_is_rendered_once_when_saved_at_fixed_margins(tmp_path, monkeypatch):
    # seaborn's heatmap draws the figure to see whether tick labels overlap (here the many
    # worker counts do: they are turned horizontal); that draw does not render it, and the
    # figure sits at fixed margins: no constrained layout (the costly part) at any draw.
    layouts = []
    execute = ConstrainedLayoutEngine.execute
    monkeypatch.setattr(ConstrainedLayoutEngine, "execute",
                        lambda engine, fig: layouts.append(fig) or execute(engine, fig))
    heat = pd.DataFrame([{"method": m, "workers": w, "bandwidth_bps": b, "sf": 8 / w,
                          "profile": "p", "bucketing": "ddp"}
                         for m in ("none", "fp16") for w in range(100, 124) for b in (1e9, 1e10)])
    fig = plots.scaling_heatmap(heat, None, size=(8, 3))
    assert not layouts and not np.asarray(fig.canvas.buffer_rgba())[..., 3].any()
    assert fig.get_layout_engine() is None  # nothing to lay out at the save either
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 2
    for ax in panels:
        assert {t.get_rotation() for t in ax.get_yticklabels()} == {0.0}
        assert len(ax.texts) == 24 * 2  # every cell annotated
    path = plots.scaling_heatmap(heat, tmp_path / "heat.png", size=(8, 3))
    assert not layouts and png_size(path) == (8 * plots.DPI, 3 * plots.DPI)


def no_marker(line) -> bool:
    return line.get_marker() in (None, "", "None", "none")


def test_speedup_plot_marks_the_scenario_and_emphasises_baselines_and_the_pick():
    curves = sweep("resnet50", [1e9, 10e9, 100e9, 400e9], 8,
                   ["none", "bf16", "fp16", "topk", "qsgd", "signsgd", "randomk"])
    fig = plots.speedup_vs_bandwidth(curves.assign(costs="a"), None, scenario_bps=10e9,
                                     recommended="topk")
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    muted = [lines[m] for m in ("qsgd", "signsgd", "randomk")]
    for method in ("topk", "none", "bf16", "fp16"):  # the pick and the two baselines
        assert lines[method].get_alpha() == 1.0
        assert lines[method].get_linewidth() > max(m.get_linewidth() for m in muted)
        assert lines[method].get_zorder() > max(m.get_zorder() for m in muted)
    assert all(m.get_alpha() < 0.5 for m in muted)
    assert all(no_marker(lines[m]) for m in curves["method"].unique())  # a model: lines
    scenario = lines[plots.SCENARIO]
    assert list(scenario.get_xdata()) == [10, 10]  # a vertical line at 10 Gbit/s
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[:4] == ["none (fp32 DDP)", "bf16 all-reduce", "fp16 all-reduce",
                          "topk (recommended)"]


@pytest.mark.parametrize("gbps", [0.1, 1, 10, 400, 800])
def test_speedup_plot_keeps_the_scenarios_label_inside_its_axes(gbps):
    # The report's sweep spans 1-400 Gbit/s; a testbed's 100 Mbit/s or a 800 Gbit/s NIC lie
    # outside it: the axis reaches them, and the label says the curves end before.
    curves = sweep("resnet50", [1e9, 10e9, 100e9, 400e9], 8, ["none", "fp16"])
    fig = plots.speedup_vs_bandwidth(curves.assign(costs="a"), None, scenario_bps=gbps * 1e9)
    fig.canvas.draw()
    ax, renderer = fig.axes[0], fig.canvas.get_renderer()
    [label] = [t for t in ax.texts if t.get_text().startswith("scenario:")]
    box, frame = label.get_window_extent(renderer), ax.get_window_extent(renderer)
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1, (gbps, box, frame)
    assert frame.y0 <= box.y0 and box.y1 <= frame.y1, (gbps, box, frame)
    inside = 1 <= gbps <= 400
    low, high = ax.get_xlim()
    assert ((low, high) == (1, 400)) if inside else (low < gbps < high)
    scenario = {line.get_label(): line for line in ax.get_lines()}[plots.SCENARIO]
    assert list(scenario.get_xdata()) == [gbps, gbps]
    assert ("outside the sweep" in label.get_text()) != inside


def band_of(ax, method):
    """The (x, y) vertices of the interval band labelled for `method`, or None."""
    bands = [c for c in ax.collections if c.get_label() == f"{method}: interval"]
    assert len(bands) <= 1
    return None if not bands else bands[0].get_paths()[0].vertices


def test_speedup_plot_draws_the_intervals_of_the_baselines_and_the_pick():
    # The sweep the report writes: each point with the interval the ranking gives it there.
    v100 = cost_table("v100")
    net = dict(workers=8, bandwidth="10gbit", latency_s=0.0, efficiency=1.0, tiers={})
    methods = ["none", "fp16", "topk", "qsgd", "signsgd"]
    curves = weighed.sweep("resnet50", net, v100, evidence_of(v100), methods,
                           bandwidths=[1e9, 10e9, 100e9])
    assert len(curves) == 15 and set(weighed.INTERVALS) <= set(curves)
    at = curves[curves["bandwidth_bps"] == 1e9].set_index("method")
    ranked = weighed.ranking("resnet50", {**net, "bandwidth": 1e9}, v100, evidence_of(v100),
                             methods).set_index("method")
    for column in ("speedup", "speedup_low", "speedup_high", "vs_16bit_low"):
        assert np.allclose(at[column], ranked.loc[at.index, column]), column
    assert (curves["speedup_low"] <= curves["speedup"] * (1 + 1e-12)).all()
    assert (curves["speedup"] <= curves["speedup_high"] * (1 + 1e-12)).all()
    assert (at.loc[["fp16", "topk"], "speedup_low"] < at.loc[["fp16", "topk"],
                                                              "speedup_high"]).all()
    ax = plots.speedup_vs_bandwidth(curves.assign(costs="v100"), None, scenario_bps=10e9,
                                    recommended="topk").axes[0]
    for method in ("fp16", "topk"):  # a band from its low to its high at every bandwidth
        rows = curves[curves["method"] == method]
        vertices = {(round(x, 6), round(y, 9)) for x, y in band_of(ax, method)}
        for x, lo, hi in zip(rows["bandwidth_bps"] / 1e9, rows["speedup_low"],
                             rows["speedup_high"]):
            assert {(round(x, 6), round(lo, 9)), (round(x, 6), round(hi, 9))} <= vertices
    assert all(band_of(ax, m) is None for m in ("qsgd", "signsgd"))  # muted: no band


def test_scaling_heatmap_outlines_the_scenarios_cell():
    heat = sweep("resnet50", [1e9, 10e9, 100e9], [2, 8], ["none", "fp16"])
    fig = plots.scaling_heatmap(heat, None, scenario=(8, 10e9))
    panels = [ax for ax in fig.axes if ax.get_xlabel()]  # not the colour bars
    assert len(panels) == 2 and "red outline: the scenario" in fig.get_suptitle()
    for ax in panels:  # rows: 2, 8 workers; columns: 1, 10, 100 Gbit/s
        [cell] = [p for p in ax.patches if p.get_label() == plots.SCENARIO]
        assert (cell.get_x(), cell.get_y(), cell.get_width(), cell.get_height()) == (1, 1, 1, 1)
        assert [t.get_text() for t in ax.get_xticklabels()][1] == "10"
    elsewhere = plots.scaling_heatmap(heat, None, scenario=(16, 10e9))  # not on the grid
    assert not any(p.get_label() == plots.SCENARIO for ax in elsewhere.axes for p in ax.patches)
    assert "outline" not in elsewhere.get_suptitle()


def test_iterations_to_target_names_the_baselines_and_the_pick_in_bold():
    tta = pd.DataFrame([
        {"method": m, "options": "{}", "error_feedback": ef, "iterations_to_target": 30.0,
         "iterations_min": 20.0, "iterations_max": 40.0, "max_iters": 100, "task": "cnn",
         "metric": "accuracy", "target": 0.9}
        for m in ("none", "fp16", "topk", "qsgd") for ef in (False, True)])
    ax = converge_plots.iterations_to_target(tta, None, recommended="topk +EF").axes[0]
    weights = {t.get_text(): t.get_fontweight() for t in ax.get_yticklabels()}
    assert weights == {"fp16": "bold", "none": "bold", "qsgd": "normal",
                       "topk (recommended with +EF)": "bold"}


def test_collective_plot_draws_every_fit_it_promises():
    # Broadcast times that do not grow over these payloads: a fit of latency alone (slope
    # 0, bandwidth infinite), still a fit to draw.
    net = Network(2, BANDWIDTH, ALPHA_S)
    collective = pd.DataFrame(
        [{"collective": c, "nbytes": n, "world_size": 2, "backend": "gloo",
          "time_s": net.cost(c, n)} for c in ("allreduce", "allgather") for n in (64, 4096, 2**20)]
        + [{"collective": "broadcast", "nbytes": n, "world_size": 2, "backend": "gloo",
            "time_s": 3e-5} for n in (64, 4096, 2**20)])
    fits = fit_collectives(collective)
    assert fits["broadcast"].params["bandwidth_bps"] == np.inf
    ax = plots.collective_times(collective, None, fits).axes[0]
    drawn = {line.get_label(): line for line in ax.get_lines()}
    for collective_name in ("all-reduce", "all-gather", "broadcast"):
        fit_line = drawn[f"{collective_name}, 2 workers: fit"]
        assert no_marker(fit_line) and len(fit_line.get_xdata()) > 10
        assert not no_marker(drawn[f"{collective_name}, 2 workers"])  # measured: markers
    assert np.allclose(drawn["broadcast, 2 workers: fit"].get_ydata(), 3e-5, rtol=0.01)


def test_convergence_curves_are_drawn_against_the_tasks_own_iterations():
    curve = pd.DataFrame([
        {"method": m, "options": "{}", "error_feedback": ef, "iteration": i, "task": "teacher",
         "metric": "loss", "target": 0.1, "test_loss": 1 / (i + 1), "test_accuracy": 0.5,
         "seed": 0} for m in ("none", "topk") for ef in (False, True) for i in range(0, 50, 10)])
    fig = converge_plots.convergence_curves(curve, None)
    bottom = [ax for ax in fig.axes if ax.get_xlabel()]
    assert [ax.get_xlabel() for ax in bottom] == ["iterations of task 'teacher'"] * 2
    assert "wall time" not in fig.get_suptitle()
    for ax in fig.axes:  # the x data are the iterations themselves
        for line in ax.get_lines():
            if line.get_label() in ("none", "topk"):
                assert list(line.get_xdata()) == [0, 10, 20, 30, 40]


def test_convergence_curves_emphasise_the_baselines_and_the_pick():
    curve = pd.DataFrame([
        {"method": m, "options": "{}", "error_feedback": ef, "iteration": i, "task": "cnn",
         "metric": "accuracy", "target": 0.9, "test_loss": k / (i + 1), "test_accuracy": 0.5,
         "seed": 0} for k, m in enumerate(("none", "fp16", "topk", "qsgd"), 1)
        for ef in (False, True) for i in range(0, 50, 10)])
    fig = converge_plots.convergence_curves(curve, None, recommended="topk +EF")
    for ax, loud in ((fig.axes[0], {"none", "fp16"}), (fig.axes[1], {"none", "fp16", "topk"})):
        lines = {line.get_label(): line for line in ax.get_lines()}
        quiet = [lines[m] for m in lines if m not in loud]
        assert quiet and all(q.get_alpha() < 0.5 for q in quiet)  # qsgd; topk without EF
        for method in loud & set(lines):
            assert lines[method].get_alpha() in (None, 1.0)
            assert lines[method].get_linewidth() > max(q.get_linewidth() for q in quiet)
            assert lines[method].get_zorder() > max(q.get_zorder() for q in quiet)


def test_convergence_figures_label_auto_as_itself():
    # Options as `bench converge --methods auto,...` records them: auto's settings, defaults
    # filled in (auto is no compressor: it runs without error feedback only).
    auto, tuned = options_text("auto", {}, False), options_text("auto", {"explore_iters": 7},
                                                                  False)
    runs = [("none", "{}", False), ("auto", auto, False), ("auto", tuned, False),
            ("topk", "{}", False), ("topk", "{}", True)]
    curve = pd.DataFrame([
        {"method": m, "options": o, "error_feedback": ef, "iteration": i, "task": "teacher",
         "metric": "loss", "target": 0.1, "test_loss": 1 / (i + 1), "test_accuracy": 0.5,
         "seed": 0} for m, o, ef in runs for i in range(0, 50, 10)])
    fig = converge_plots.convergence_curves(curve, None, recommended="auto")
    drawn = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert {"none", "auto", "auto(explore_iters=7)", "topk"} <= set(drawn)
    assert drawn["auto"].get_alpha() in (None, 1.0)  # the recommendation, emphasised
    tta = pd.DataFrame([
        {"method": m, "options": o, "error_feedback": ef, "iterations_to_target": 30.0,
         "iterations_min": 20.0, "iterations_max": 40.0, "max_iters": 100, "task": "teacher",
         "metric": "loss", "target": 0.1} for m, o, ef in runs])
    ax = converge_plots.iterations_to_target(tta, None, recommended="auto").axes[0]
    assert {t.get_text() for t in ax.get_yticklabels()} == {
        "none", "auto (recommended)", "auto(explore_iters=7)", "topk"}


def test_report_holds_the_verdict_fits_validation_and_figures(reported, tmp_path):
    source, report = reported
    assert report.folder == source and report.path == source / "report.md"
    folder = copy_of(source, tmp_path)  # the measured-costs report below is written here
    path = folder / "report.md"
    text = path.read_text()
    # One recommendation: no convergence runs, so among fp32/fp16/bf16 only, priced with
    # the table of the (V100) profile's GPU, scaled from the H200's, which is said first.
    v100 = cost_table("v100")
    net, evidence = dict(workers=8, bandwidth="10gbit"), evidence_of(v100)
    ranking = weighed.ranking("resnet50", net, v100, evidence, list(METHODS))
    expected = recommend_by_iteration(ranking, v100, "NVIDIA V100",
                                      "`resnet50` on 8 workers at 10 Gbit/s (one GPU per node, "
                                      "one NIC each); network efficiency 1.00 (assumed), "
                                      "compute slowdown 1.00 (assumed); ddp bucketing",
                                      evidence, weighed.ranking_flips("resnet50", net, v100))
    assert report.verdicts == (expected,)
    assert expected.startswith("- **Recommendation** (NVIDIA V100 compute with NVIDIA V100 "
                               "codec costs scaled from NVIDIA H200 by memory bandwidth, not "
                               "measured)")
    assert "**fp16 all-reduce**" in expected and "No convergence runs" in expected
    assert expected in text.splitlines()
    # the ranking states each speedup's interval and the evidence behind it
    assert re.search(r"speedup vs fp32 \(interval\)\s*\|\s*vs fp16 \(interval\)", text)
    assert "Intervals from: codec costs of table `v100`" in text
    measured = write_report(folder, "resnet50", 8, "10gbit", costs="measured").verdicts
    assert len(measured) == 1 and "NVIDIA V100 compute with cpu codec costs" in measured[0]
    ranked = pd.read_csv(folder / "advise.csv")
    fits = pd.read_csv(folder / "codec_fits.csv")
    excluded = set(fits[fits["status"] == "excluded"]["method"])
    # the V100 profile's baselines: none and fp16 (no bf16 there), an excluded one left out
    assert set(ranked["method"]) == (set(METHODS) | {"none", "fp16"}) - excluded - {"bf16"}
    assert set(ranked["cost_table"]) == {"measured"}
    for method in excluded:  # never priced silently: named with the reason
        assert re.search(rf"Not priced \(codec fit excluded.*{method} \((en|de)code: R\^2",
                         (folder / "report.md").read_text())
    text = path.read_text()
    for heading in ("## Verdict", "### Supporting ranking", "## Encode/decode costs",
                    "## Collectives",
                    "## Training: measured vs predicted", "## Environment"):
        assert heading in text
    for method in ranked["method"]:
        assert re.search(rf"^\| *\d+ \| {method} ", text, re.M)  # in the ranking
    fits = pd.read_csv(folder / "collective_fits.csv").set_index("collective")
    assert fits.loc["allreduce", "alpha_s"] == pytest.approx(ALPHA_S, rel=1e-6)
    assert fits.loc["allgather", "bandwidth_bps"] == pytest.approx(BANDWIDTH, rel=1e-6)
    assert re.search(r"^\| allreduce +\| +50 \| +10 \| +1\.000 \|", text, re.M)
    codec = pd.read_csv(folder / "codec_fits.csv")
    assert set(codec["method"]) == set(METHODS) and set(codec["phase"]) == {"encode", "decode"}
    check = pd.read_csv(folder / "train_validation.csv")
    assert list(check["method"]) == ["ddp", *METHODS]
    assert np.allclose(check["measured"], [0.002, 0.004, 0.006, 0.008])
    assert np.allclose(check["rel_error"], check["predicted"] / check["measured"] - 1)
    assert f"max |e| {check['rel_error'].abs().max():.1%}" in text
    curves = pd.read_csv(folder / "speedup_sweep.csv")  # each point with its interval
    assert curves[["speedup_low", "speedup_high"]].notna().all().all()
    assert (curves["speedup_low"] <= curves["speedup"] * (1 + 1e-9)).all()
    assert (curves["speedup"] <= curves["speedup_high"] * (1 + 1e-9)).all()
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", text)
    assert len(links) == 5
    for link in links:
        assert png_size(folder / link)[0] > 0
    assert environment()["torch_version"] in text


def test_report_without_codec_measurements_uses_a_named_table(tmp_path):
    with pytest.raises(ValueError, match="results=.* no such folder"):
        write_report(tmp_path / "typo", "resnet50", 8, "100gbit")
    assert not (tmp_path / "typo").exists()
    with pytest.raises(ValueError, match="results=.* holds none of compress.csv"):
        write_report(tmp_path, "resnet50", 8, "100gbit")  # no numbers "from its tables"
    assert not (tmp_path / "report.md").exists()
    net, env = Network(2, BANDWIDTH, ALPHA_S), environment("gloo", 2)
    for nbytes in (1024, 2**20):
        ResultTable(tmp_path / COLLECTIVE).append({"collective": "allreduce", "nbytes": nbytes,
                                                   "time_s": net.cost("allreduce", nbytes),
                                                   **env})
    report = write_report(tmp_path, "resnet50", 8, "100gbit")
    text = report.path.read_text()
    assert len(report.verdicts) == 1 and "codec costs from table `v100`" in report.verdicts[0]
    assert "scaled from NVIDIA H200" in report.verdicts[0]
    assert "Not measured on this machine" in text and "Not available" in text
    assumed = write_report(tmp_path, "resnet50", 8, "100gbit", costs="assumed").verdicts[0]
    assert "NVIDIA V100 compute with assumed codec costs" in assumed
    with pytest.raises(ValueError, match="costs='measured' is not allowed here: nothing was"):
        write_report(tmp_path, "resnet50", 8, "100gbit", costs="measured")


def test_a_cluster_report_prices_codecs_and_the_16_bit_baseline_on_the_clusters_gpu(tmp_path):
    # resnet50's profile is a V100's; on p4d.24xlarge (A100s) the codec table and the 16-bit
    # baseline (bf16: the V100 has none) are the A100's, the compute the V100's as measured.
    net, env = Network(2, BANDWIDTH, ALPHA_S), environment("gloo", 2)
    for nbytes in (1024, 2**20):
        ResultTable(tmp_path / COLLECTIVE).append({"collective": "allreduce", "nbytes": nbytes,
                                                   "time_s": net.cost("allreduce", nbytes),
                                                   **env})
    report = write_report(tmp_path, "resnet50", cluster=resolve_cluster("p4d.24xlarge", nodes=4))
    verdict, text = report.verdicts[0], report.path.read_text()
    assert verdict.startswith(
        "- **Recommendation** (NVIDIA V100 compute as measured (the profile's), codecs and the "
        "16-bit baseline on the cluster's NVIDIA A100 40GB, with NVIDIA A100 40GB codec costs "
        "scaled from NVIDIA H200 by memory bandwidth, not measured) for `resnet50` "
        "(compute as measured on NVIDIA V100) on 4 x p4d.24xlarge")
    assert "codec costs from table `a100-40gb`" in verdict and "bf16 all-reduce" in verdict
    assert "bf16 is not an option" not in verdict
    assert ("(device: NVIDIA V100; codecs and the 16-bit baseline on the cluster's NVIDIA A100 "
            "40GB)") in text
    ranking = pd.read_csv(tmp_path / "advise.csv")
    assert "bf16" in set(ranking["method"]) and set(ranking["cost_table"]) == {"a100-40gb"}
    assert "bf16" in set(pd.read_csv(tmp_path / "speedup_sweep.csv")["method"])
    # without a cluster GPU: the profile's V100, fp16 its baseline
    flat = write_report(tmp_path, "resnet50", 32, "100gbit").verdicts[0]
    assert "codec costs from table `v100`" in flat and "bf16 is not an option" in flat


def test_report_prices_the_question_with_its_latency_and_bucketing(reported, tmp_path):
    source, plain = reported
    folder = copy_of(source, tmp_path)
    ranking = pd.read_csv(folder / "advise.csv")
    slow = write_report(folder, "resnet50", 8, "10gbit", bucketing="horovod", latency_s=1e-3)
    assert "latency 1000 us per hop; network efficiency" in slow.path.read_text()
    assert "; horovod bucketing" in slow.path.read_text()
    later = pd.read_csv(folder / "advise.csv")
    assert set(later["bucketing"]) == {"horovod"} and plain.verdicts
    none = [t[t["method"] == "none"]["t_iter_s"].iloc[0] for t in (ranking, later)]
    assert none[1] > none[0]
    with pytest.raises(ValueError, match="bucketing='fifo'"):
        run(tmp_path / "r", bucketing="fifo")
    with pytest.raises(ValueError, match="latency_s"):
        run(tmp_path / "r", latency_s=-1)
    assert not (tmp_path / "r").exists()


def test_run_rejects_bad_input_before_measuring(tmp_path):
    with pytest.raises(ValueError, match="profile"):
        run(tmp_path / "r", profile="no-such-model")
    with pytest.raises(ValueError, match="bandwidth"):
        run(tmp_path / "r", bandwidth="fast")
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_run_quick_end_to_end_resumes_after_an_interruption(tmp_path, monkeypatch):
    # Small throughout; the convergence runs on the MLP task rather than the profile's
    # proxy (resnet50's: the cnn, a ResNet, many times the CPU; `proxy_task` is tested in
    # test_cli_edges).
    small = dict(methods=["none", "fp16"], model="tiny", sizes=[1024, 4096],
                 collective_sizes=[1024, 2**20], iterations=2, converge_iters=20,
                 task="teacher", progress=False)
    real, calls = bench_compress.measure_cases, []

    def measure(cases, *args, **kwargs):
        if calls:
            raise KeyboardInterrupt  # the run is interrupted after its first block
        calls.extend(cases)
        return real(cases, *args, **kwargs)

    monkeypatch.setattr(bench_compress, "BLOCK", 2)  # methods measured together
    monkeypatch.setattr(bench_compress, "measure_cases", measure)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "r", **small)
    before = ResultTable(tmp_path / "r" / COMPRESS).frame()
    assert len(before) == 4 and (before["threads"] == cpu_threads(2)).all()  # a worker's

    calls.clear()
    monkeypatch.setattr(bench_compress, "measure_cases", lambda cases, *a, **k:
                        calls.extend(cases) or real(cases, *a, **k))
    report = run(tmp_path / "r", **small)
    out = report.folder
    assert out == tmp_path / "r" and len(calls) == 2  # only the missing rows
    after = ResultTable(out / COMPRESS).frame()
    assert len(after) == 6  # none, fp16 and the bf16 baseline at two sizes
    pd.testing.assert_frame_equal(after.iloc[:4], before)
    assert len(ResultTable(out / COLLECTIVE).frame()) == 3 * 2
    assert list(ResultTable(out / TRAIN).frame()["method"]) == ["ddp", "none", "fp16", "bf16"]
    assert set(ResultTable(out / CONVERGE).frame()["seed"]) == {0, 1, 2}  # a seed spread
    text = (out / "report.md").read_text()
    assert report.path == out / "report.md"
    assert len(report.verdicts) == 1 and report.verdicts[0] in text.splitlines()
    assert report.verdicts[0].startswith("- **Recommendation** (NVIDIA V100 compute with "
                                         "NVIDIA V100 codec costs scaled from")
    assert "## Verdict" in text and "## Training: measured vs predicted" in text
    for link in re.findall(r"!\[[^]]*\]\(([^)]+)\)", text):
        assert png_size(out / link)[0] > 0

    def no_spawn(*args):
        raise AssertionError("a finished run measured again")

    monkeypatch.setattr(bench_collective, "launch", no_spawn)
    monkeypatch.setattr(bench_train, "launch", no_spawn)
    calls.clear()
    run(out, **small)
    assert not calls
    pd.testing.assert_frame_equal(ResultTable(out / COMPRESS).frame(), after)


def test_the_report_recommends_a_diloco_variant_and_draws_it(tmp_path):
    # `run --methods ...,diloco:H=10,method=int8`: the committed GPT convergence runs
    # (DiLoCo variants beside DDP) with this machine's tables; at 100 Mbit/s a DiLoCo variant
    # is the fastest to the target, and its what-if curves are drawn with its options.
    import shutil

    folder = make_results(tmp_path, methods=("none", "fp16", "int8"))
    source = Path(__file__).parent.parent / "benchmarks/results/converge-diloco-gpt-2026-11-28"
    for name in (CONVERGE, "converge_curve.csv"):
        shutil.copy(source / name, folder / name)
    report = write_report(folder, "gpt2", 8, "100mbit",
                          methods=["none", "fp16", "int8", "diloco:H=10,method=int8"])
    assert "**diloco(H=50, method=none)**" in report.verdicts[0]
    assert "| diloco(H=10, method=int8) |" in (folder / "report.md").read_text()
    heat = pd.read_csv(folder / "scaling_sweep.csv")
    assert set(heat["method"]) == {"none", "diloco(H=50, method=none)"}


def test_codec_plot_draws_the_baselines_and_the_pick_wide_and_the_rest_faint():
    sizes = [1024, 8192, 65536, 524288]
    compress = pd.DataFrame([{"method": m, "numel": n, "encode_s": k * (1e-5 + 1e-9 * n),
                              "decode_s": k * (2e-5 + 1e-9 * n), "device_name": "cpu"}
                             for k, m in ((1, "none"), (2, "fp16"), (3, "topk"), (4, "int8"))
                             for n in sizes])
    fig = plots.codec_costs(compress, None, fit_codec(compress),
                            emphasised=["none", "fp16", "topk"])
    colour = {style["color"]: m for m, style in line_styles(list(compress["method"].unique()))
              .items()}
    for ax in fig.axes[:2]:
        drawn = {}
        for line in ax.get_lines():
            drawn.setdefault(colour[line.get_color()], []).append(line)
        assert sorted(drawn) == ["fp16", "int8", "none", "topk"]
        for method, lines in drawn.items():
            wide = method != "int8"
            assert all((line.get_alpha() == 1.0) == wide for line in lines), method
            assert all((line.get_linewidth() > 2) == wide for line in lines), method
    legend = fig.legends[0]
    assert "wide: baselines" in legend.get_title().get_text()
    faint = {t.get_text(): h.get_alpha() for t, h in zip(legend.get_texts(),
                                                          legend.legend_handles)}
    assert faint == {"none": 1.0, "fp16": 1.0, "topk": 1.0, "int8": plots.MUTED_ALPHA}
