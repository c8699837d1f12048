"""The cluster of a question: presets from published specifications, the JSON form, the
command-line parts, and the flat network the old options mean."""
import json

import pytest

from gradcomp.evaluation.model.cluster import (PRESETS, Cluster, load_cluster, resolve_cluster)
from gradcomp.evaluation.model.network import Network
from test_cli import run_here


def test_presets_hold_the_published_node_figures():
    p3 = PRESETS["p3.16xlarge"]
    assert (p3.gpu, p3.gpus_per_node, p3.bandwidth_bps, p3.rails) == ("V100", 8, 25e9, 1)
    assert p3.intra_bandwidth_bps == 150e9 * 8  # NVLink 300 GB/s both ways, one way
    p4d = PRESETS["p4d.24xlarge"]
    assert (p4d.gpu, p4d.rails, p4d.rails * p4d.bandwidth_bps) == ("A100 40GB", 4, 400e9)
    h100 = PRESETS["h100-8x400ib"]
    assert (h100.rails, h100.bandwidth_bps, h100.intra_bandwidth_bps) == (8, 400e9, 450e9 * 8)
    assert {"p3.8xlarge", "p3dn.24xlarge"} <= set(PRESETS)
    assert all(c.source for c in PRESETS.values())  # each cites its specification


def test_a_preset_by_nodes_or_workers():
    cluster, nodes = resolve_cluster("p3.16xlarge", nodes=8)
    assert nodes == 8 and cluster.question(nodes)["workers"] == 64
    assert resolve_cluster("p3.16xlarge", workers=64)[1] == 8
    with pytest.raises(ValueError, match="multiple of 8"):
        resolve_cluster("p3.16xlarge", workers=12)
    with pytest.raises(ValueError, match="give one of --workers, --nodes"):
        resolve_cluster("p3.16xlarge", workers=16, nodes=8)


def test_no_cluster_is_the_flat_network_of_the_old_options():
    cluster, nodes = resolve_cluster(None, workers=8, bandwidth_bps="10gbit", latency_s=1e-5)
    asked = cluster.question(nodes)
    assert asked == dict(workers=8, bandwidth=10e9, latency_s=1e-5, efficiency=1.0, tiers={})
    assert Network(asked["workers"], asked["bandwidth"], asked["latency_s"]) == \
        Network(8, "10gbit", 1e-5)
    assert cluster.describe(nodes).startswith("8 workers at 10 Gbit/s (one GPU per node")


def test_overrides_rename_a_preset_and_the_description_says_where_numbers_came_from():
    cluster, nodes = resolve_cluster("p4d.24xlarge", nodes=4, efficiency=0.8)
    assert cluster.name == "p4d.24xlarge+" and cluster.efficiency == 0.8
    text = cluster.describe(nodes)
    assert "32 A100 40GB GPUs, 8 per node" in text and "4 x 100 Gbit/s NICs" in text
    assert "network efficiency 0.80 (given)" in text
    assert "compute slowdown 1.00 (assumed)" in text
    fitted = Cluster("here", "CPU", 1, "1gbit", efficiency=0.9, measured=("efficiency",))
    assert "network efficiency 0.90 (fitted)" in fitted.describe(2)


def test_bad_cluster_parts_name_the_option():
    with pytest.raises(ValueError, match="intra_bandwidth_bps=None is not allowed with "
                                         "gpus_per_node=4"):
        Cluster("x", "", 4, "10gbit")
    with pytest.raises(ValueError, match="efficiency"):
        Cluster("x", "", 1, "10gbit", efficiency=0)
    with pytest.raises(ValueError, match="compute_slowdown"):
        Cluster("x", "", 1, "10gbit", compute_slowdown=0.9)
    with pytest.raises(ValueError, match="choose a preset .*p3.16xlarge"):
        load_cluster("p3.16xl")


def test_a_cluster_file(tmp_path):
    path = tmp_path / "a100x4.json"
    path.write_text(json.dumps({"gpu": "A100", "gpus_per_node": 8, "intra_bandwidth": "300GB",
                                "bandwidth": "100gbit", "rails": 4, "efficiency": 0.7}))
    cluster = load_cluster(str(path))
    assert (cluster.name, cluster.gpus_per_node, cluster.rails) == ("a100x4", 8, 4)
    assert cluster.intra_bandwidth_bps == 2.4e12 and cluster.efficiency == 0.7
    path.write_text(json.dumps({"bandwidth": "1gbit", "nics": 2}))
    with pytest.raises(ValueError, match="unknown key.*nics; allowed: name, gpu"):
        load_cluster(str(path))
    path.write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        load_cluster(str(path))


def test_the_command_asks_about_a_preset_cluster_in_one_line():
    out = run_here("whatif", "--cluster", "p3.16xlarge", "--nodes", "8", "--profile",
                   "resnet50", "--method", "powersgd")
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert "8 x p3.16xlarge: 64 V100 GPUs, 8 per node at 150 GB/s inside" in first
    assert "two-tier collectives: modelled, not yet validated by measurement" in first
    assert "network efficiency 1.00 (assumed), compute slowdown 1.00 (assumed)" in first
    out = run_here("advise", "--cluster", "p3.16xlarge", "--workers", "12")
    assert out.returncode == 2 and "multiple of 8" in out.stderr
    out = run_here("whatif", "--topology", "two-racks", "--nodes", "2")
    assert out.returncode == 2 and "--nodes is not allowed with --topology" in out.stderr


def test_a_cluster_of_a100s_has_the_bf16_baseline_and_their_codec_table():
    # GPT-2's profile was measured at V100 rates (no bf16 there); the cluster's GPUs have it
    out = run_here("advise", "--cluster", "p4d.24xlarge", "--nodes", "4", "--profile", "gpt2",
                   "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    # bf16 is the 16-bit baseline there (on a V100 it is "not an option"); the H200 table's
    # fp16 and bf16 casts cost the same within 10 us a bucket, fp16 the less, so fp16 is
    # recommended, compared with the bf16 all-reduce
    assert data["costs"] == "a100-40gb" and "**fp16 all-reduce**" in data["verdict"]
    assert "than the bf16 all-reduce" in data["verdict"]
    assert "bf16 is not an option" not in data["verdict"]
    assert "`gpt2` (compute as measured on NVIDIA V100) on 4 x p4d.24xlarge" in data["verdict"]
    assert data["verdict"].startswith("- **Recommendation** (NVIDIA V100 compute as measured "
                                      "(the profile's), codecs and the 16-bit baseline on the "
                                      "cluster's NVIDIA A100 40GB, with NVIDIA A100 40GB codec "
                                      "costs scaled from")
    assert "bf16" in {r["method"] for r in data["ranking"]}


def test_a_cluster_built_from_options_reads_as_nodes_of_gpus():
    cluster, nodes = resolve_cluster(None, nodes=4, gpus_per_node=8, intra_bandwidth_bps="300GB",
                                     bandwidth_bps="100gbit", rails=4)
    assert cluster.describe(nodes).startswith("4 nodes: 32 GPUs, 8 per node at 300 GB/s inside, "
                                              "4 x 100 Gbit/s NICs per node")
