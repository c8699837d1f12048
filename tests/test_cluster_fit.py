"""The cluster measured, not assumed: latency and efficiency per tier from a collective table,
the compute slowdown from training runs, and the report applying them to the verdict's
cluster only for a profile measured on this machine."""
import json
import math
from dataclasses import replace

import pandas as pd
import pytest

from gradcomp.evaluation.analyses.cluster_fit import (apply_fitted, fit_runs_slowdown,
                                                      fit_tiers, fitted_fields)
from gradcomp.evaluation.analyses.measured import predict_runs
from gradcomp.evaluation.common.env import environment
from gradcomp.evaluation.common.store import ResultTable
from gradcomp.evaluation.model.cluster import PRESETS, resolve_cluster
from gradcomp.evaluation.model.fit import fit_collectives, network_from_fit
from gradcomp.evaluation.model.network import Network
from gradcomp.evaluation.profiles.profiles import Profile, load_profile, save_profile
from gradcomp.evaluation.report.cluster_report import CLUSTER_FIT
from gradcomp.evaluation.report.report import COLLECTIVE, TRAIN, TRAIN_PROFILE, write_report
from test_cli import run_here

SIZES = (4096, 65536, 2**20, 2**24)
LAMBDA = 1.08
# A CPU profile of two 1M-element gradients (ready mid-backward and at its end).
CPU_PROFILE = Profile("cpu-mlp", (2**20, 2**20), (0.004, 0.008), forward_s=0.006,
                      backward_s=0.008, optimizer_s=0.002, device="cpu", finalize_s=0.001)


def collective_rows(p: int, busbw_bps: float, alpha_s: float, **columns) -> list[dict]:
    """All-reduce rows timed exactly by the alpha-beta model."""
    net = Network(p, busbw_bps, alpha_s)
    return [{"collective": "allreduce", "world_size": p, "nbytes": n,
             "time_s": net.cost("allreduce", n), **columns} for n in SIZES]


def test_each_tier_gets_its_latency_and_busbw_over_its_line_rate():
    table = pd.DataFrame(
        collective_rows(4, 8e9, 20e-6, bandwidth_bps=10e9, tier="inter")
        + collective_rows(4, 1.2e12, 3e-6, bandwidth_bps=1.2e12 / 0.75, tier="intra"))
    tiers = fit_tiers(table).set_index("tier")
    assert tiers.loc["inter", "efficiency"] == pytest.approx(0.8, rel=1e-6)
    assert tiers.loc["intra", "efficiency"] == pytest.approx(0.75, rel=1e-6)
    fields = fitted_fields(fit_tiers(table), None)
    assert fields == pytest.approx({"latency_s": 20e-6, "efficiency": 0.8,
                                    "intra_latency_s": 3e-6, "intra_efficiency": 0.75},
                                   rel=1e-6)
    # No tier column: every row across nodes; above the line rate (tbf bursts): 1, said so.
    fast = fit_tiers(pd.DataFrame(collective_rows(2, 1.1e9, 1e-4, bandwidth_bps=1e9)))
    assert list(fast["tier"]) == ["inter"] and fast["efficiency"].iloc[0] == 1.0
    assert "1.1x the line rate" in fast["note"].iloc[0]
    with pytest.raises(ValueError, match="tier='rack' is not allowed: choose one of inter, "
                                         "intra"):
        fit_tiers(table.assign(tier="rack"))
    with pytest.raises(ValueError, match="bandwidth_bps: the inter-node rows were measured "
                                         "at several line rates"):
        fit_tiers(table.assign(tier="inter"))


def test_loopback_fits_no_efficiency_and_says_so():
    loopback = pd.DataFrame(collective_rows(2, 3e9, 1e-3))  # no bandwidth_bps column
    tiers = fit_tiers(loopback)
    assert math.isnan(tiers["efficiency"].iloc[0])
    assert tiers["note"].iloc[0].startswith("no line rate")
    assert tiers["latency_s"].iloc[0] == pytest.approx(1e-3, rel=1e-6)
    assert fitted_fields(tiers, None) == {}  # loopback's alpha is not a network's latency
    rated = fit_tiers(loopback, line_rate_bps="5gbit")  # e.g. the testbed's rate
    assert rated["efficiency"].iloc[0] == pytest.approx(0.6, rel=1e-6)


def test_gradcomp_fit_tiers_prints_latency_and_efficiency_per_tier(tmp_path):
    path, codec = tmp_path / "coll.csv", tmp_path / "codec.csv"
    pd.DataFrame(collective_rows(4, 8e9, 20e-6, tier="inter") + collective_rows(
        4, 1.2e12, 3e-6, bandwidth_bps=1.6e12, tier="intra")).to_csv(path, index=False)
    done = run_here("fit", str(path), "--tiers", "--bandwidth", "10gbit", "--json")
    assert done.returncode == 0, done.stderr
    tiers = {row["tier"]: row for row in json.loads(done.stdout)}
    assert tiers["inter"]["efficiency"] == pytest.approx(0.8, rel=1e-6)  # at --bandwidth
    assert tiers["intra"]["efficiency"] == pytest.approx(0.75, rel=1e-6)  # at its column's
    assert tiers["inter"]["latency_s"] == pytest.approx(20e-6, rel=1e-6)
    codec.write_text("method,numel,encode_s,decode_s\nfp16,1024,1e-6,1e-6\n")
    bad = run_here("fit", str(codec), "--tiers")
    assert bad.returncode == 2 and "--tiers and --bandwidth are not allowed with a compress " \
        "table" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def training_runs(profile: Profile, slowdown: float, network_of) -> pd.DataFrame:
    """Uncompressed runs at 2 and 4 workers timed by the model with `slowdown`, beside a
    top-k run that the slowdown fit must leave out."""
    runs = pd.DataFrame({"method": ["ddp", "none", "topk"], "world_size": [2, 4, 2],
                         "bucket_cap_mb": [4.0, 25.0, 25.0], "t_iter_s": 1.0})
    times = predict_runs(runs, profile, lambda p: replace(network_of(p),
                                                          compute_slowdown=slowdown),
                         {})["predicted"]
    return runs.assign(t_iter_s=list(times[:2]) + [1.0])


def test_the_slowdown_fit_recovers_lambda_from_the_models_iterations():
    allreduce = fit_collectives(pd.DataFrame(collective_rows(2, 2e9, 5e-4)))["allreduce"]

    def network_of(p):
        return network_from_fit({"allreduce": allreduce}, p, 2e9)

    for slowdown in (1.0, LAMBDA, 1.3):
        fit = fit_runs_slowdown(training_runs(CPU_PROFILE, slowdown, network_of),
                                CPU_PROFILE, allreduce)
        assert fit.params["compute_slowdown"] == pytest.approx(slowdown, abs=2e-3)
        assert fit.n == 2
    with pytest.raises(ValueError, match="no uncompressed training run"):
        fit_runs_slowdown(pd.DataFrame({"method": ["topk"], "world_size": [2],
                                        "bucket_cap_mb": [25.0], "t_iter_s": [1.0]}),
                          CPU_PROFILE, allreduce)


def test_fits_apply_only_to_a_profile_measured_here_and_never_over_given_values():
    fields = {"latency_s": 1e-5, "efficiency": 0.7, "intra_efficiency": 0.9,
              "compute_slowdown": LAMBDA}
    flat, _ = resolve_cluster(None, 8)
    applied, said = apply_fitted(flat, fields, CPU_PROFILE, "cpu")
    assert (applied.efficiency, applied.compute_slowdown, applied.latency_s) == (
        0.7, LAMBDA, 1e-5)
    assert applied.intra_efficiency == 1.0  # one GPU per node: no intra tier to take it
    assert set(applied.measured) == {"latency_s", "efficiency", "compute_slowdown"}
    assert "efficiency 0.70 (fitted), compute slowdown 1.08 (fitted)" in applied.describe(8)
    assert said.startswith("Applied to the verdict's cluster")
    v100, _ = apply_fitted(flat, fields, load_profile("resnet50"), "cpu")
    assert v100 == flat
    given, said = apply_fitted(resolve_cluster(None, 8, efficiency=0.5)[0], fields,
                               CPU_PROFILE, "cpu")
    assert (given.efficiency, given.compute_slowdown) == (0.5, LAMBDA)
    assert "Kept the question's own efficiency" in said
    node, _ = apply_fitted(PRESETS["p3.16xlarge"], fields, CPU_PROFILE, "cpu")
    assert node.intra_efficiency == 0.9 and "intra_efficiency" in node.measured


def make_folder(folder, slowdown: float):
    """A results folder: loopback all-reduce rows (alpha-beta exact), the CPU profile as the
    runs' profile, and uncompressed runs the model times with `slowdown`."""
    env = environment("gloo", 2)
    table = ResultTable(folder / COLLECTIVE)
    for row in collective_rows(2, 2e9, 5e-4):
        table.append({**row, **env})
    save_profile(CPU_PROFILE, folder / TRAIN_PROFILE)
    allreduce = fit_collectives(table.frame())["allreduce"]
    runs = training_runs(CPU_PROFILE, slowdown, lambda p: network_from_fit(
        {"allreduce": allreduce}, p, allreduce.params["bandwidth_bps"]))
    table = ResultTable(folder / TRAIN)
    for row in runs.to_dict("records"):
        table.append({**env, **row, "model": "cpu-mlp", "params": 2**21, "batch_size": 8,
                      "warmup": 3, "iterations": 5, "t_iter_single_s": 0.015})
    return folder


def test_report_states_the_fits_and_applies_them_only_to_a_profile_measured_here(tmp_path):
    folder = make_folder(tmp_path, LAMBDA)
    here = write_report(folder, folder / TRAIN_PROFILE, 8, "10gbit", costs="assumed")
    assert ("network efficiency 1.00 (assumed), compute slowdown 1.08 (fitted)"
            in here.verdicts[0])
    record = json.loads((folder / CLUSTER_FIT).read_text())
    assert record["compute_slowdown"]["value"] == pytest.approx(LAMBDA, abs=2e-3)
    assert record["compute_slowdown"]["profile_over_single"] == pytest.approx(0.017 / 0.015)
    assert record["tiers"][0]["efficiency"] is None  # loopback: no line rate
    assert set(record["fields"]) == {"compute_slowdown"}
    text = here.path.read_text()
    assert "## Cluster fitted on this machine" in text
    assert "Compute slowdown 1.080: the factor on the profile's forward" in text
    assert "1.13x the single process's here" in text
    assert "Applied to the verdict's cluster" in text and "no line rate" in text
    gpu = write_report(folder, "resnet50", 8, "10gbit")  # a V100 profile: not this machine
    assert "network efficiency 1.00 (assumed), compute slowdown 1.00 (assumed)" \
        in gpu.verdicts[0]
    text = gpu.path.read_text()
    assert "Compute slowdown 1.080" in text and "Not applied to the verdict" in text
