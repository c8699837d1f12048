"""Two-tier validation: the layouts' runs, the model built from a tier sweep, and the table's
columns and regret, on the tables of a real run (tests/data/two-tier-1gbit: `gradcomp
validate --nodes 2 --gpus-per-node 2 --layouts flat --rates 1gbit --methods
ddp,none,topk,auto --model tiny --iterations 5`, 2 nodes x 2 ranks on the testbed)."""
import shutil
from pathlib import Path

import pandas as pd
import pytest

from gradcomp.evaluation.model.fit import fit_collectives
from gradcomp.evaluation.testbed.validate_tiers import (layout_cases,
                                                        predict_rate, summarize_layouts,
                                                        tier_network, two_tier_markdown)
from gradcomp.evaluation.testbed.regret import auto_warmup, steady_state_jobs, write_regret

MEASURED = Path(__file__).parent / "data" / "two-tier-1gbit"
SPEC = {"model": "tiny", "batch_size": 64, "bucket_cap_mb": 25.0}


def test_the_layouts_runs():
    assert layout_cases(["ddp", "topk", "auto"], "flat", 2) == [
        ("ddp", {}), ("topk", {}), ("auto", {})]
    # DDP's own all-reduce has no hierarchical form; every hooked method gets the layout.
    assert layout_cases(["ddp", "topk", "auto"], "hierarchical", 4) == [
        ("topk", {"hierarchical": True, "gpus_per_node": 4}),
        ("auto", {"hierarchical": True, "gpus_per_node": 4})]
    # auto trains alone, its untimed iterations covering its exploration of 4 candidates.
    assert auto_warmup(5) == 5 + 1 + 4 * 3 + 2
    assert steady_state_jobs(["ddp", "auto", "topk"], 5) == [(["ddp", "topk"], 5),
                                                             (["auto"], 20)]


def test_the_two_tier_network_is_fitted_per_tier():
    tiers = pd.read_csv(MEASURED / "tiers-1gbit.csv")
    net = tier_network(tiers, 2, 2, 1e9)
    inter = fit_collectives(tiers[tiers["tier"] == "inter"])
    intra = fit_collectives(tiers[tiers["tier"] == "intra"])["allreduce"].params
    assert (net.workers, net.gpus_per_node, net.algorithm) == (4, 2, "ring")
    # the 2 local ranks' rings across the nodes ran at once: the node's link carried both
    assert net.efficiency_of("allreduce") * 1e9 == pytest.approx(
        2 * inter["allreduce"].params["bandwidth_bps"])
    assert net.alpha("allgather") == pytest.approx(max(inter["allgather"].params["alpha_s"], 0))
    assert net.intra_bandwidth_bps == pytest.approx(intra["bandwidth_bps"])
    # the hierarchical layout's ring across nodes gets back one ring's share
    assert net.node_tiers()[1].bytes_per_s("allreduce") * 8 == pytest.approx(
        inter["allreduce"].params["bandwidth_bps"])


def test_rows_carry_the_layout_and_the_report_its_contention_and_regret(tmp_path):
    for f in MEASURED.iterdir():
        shutil.copy(f, tmp_path)
    planned = {"tiers": None, "train-flat": None, "hook-flat": None}
    table = predict_rate(tmp_path, 1e9, planned, SPEC, 2, 2, ["flat"])
    assert list(table["method"]) == ["ddp", "none", "topk", "auto"]
    assert set(table["layout"]) == {"flat"} and set(table["nodes"]) == {2}
    assert set(table["gpus_per_node"]) == {2}
    fixed = table[table["method"] != "auto"]
    assert fixed["predicted"].notna().all() and table["predicted"].isna().sum() == 1
    assert (fixed["rel_error"] == (fixed["predicted"] - fixed["measured"])
            / fixed["measured"]).all()
    summary = summarize_layouts(table)
    assert list(summary["layout"]) == ["flat"] * 4
    assert list(summary["method"]) == ["ddp", "none", "topk", "all"]
    text = two_tier_markdown(table, 2, 2)
    assert "## Layout: flat" in text and "measured on all 4 ranks at once" in text
    assert "Advice regret" in text and "`auto`'s regret" in text
    written = write_regret(tmp_path, table)
    regret = pd.read_csv(tmp_path / "regret.csv")
    assert list(regret["layout"]) == ["flat"] and regret["regret"].iloc[0] >= 0
    assert regret["pick"].iloc[0] == fixed.loc[fixed["predicted"].idxmin(), "method"]
    assert len(written["auto_regret"]) == 1 and (tmp_path / "auto-regret.csv").exists()
