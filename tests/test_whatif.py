"""What-if analyses and advice, including the qualitative result of NetAI 2020 (Zhang et al.,
"Is Network the Bottleneck of Distributed Training?"): with Horovod-style fusion, 100 Gbps
needs no compression and 10 Gbps only a modest ratio (2-5x in the paper). We use 8 workers."""
import math

import numpy as np
import pandas as pd
import pytest

from gradcomp.evaluation.analyses.advise import advise, verdict
from gradcomp.evaluation.analyses.whatif import (break_even_bandwidth, default_bandwidths,
                                                 required_compression, scenario, sweep)
from gradcomp.evaluation.model.methods import MethodCost

WORKERS = 8


def test_resnet50_needs_no_compression_at_100_gbps():
    pred = scenario("resnet50", WORKERS, "100gbit", bucketing="horovod")
    assert pred.sf >= 0.9
    req = required_compression("resnet50", WORKERS, "100gbit", bucketing="horovod")
    assert req.ratio == 1.0 and "already" in req.reason


def test_resnet50_needs_a_modest_ratio_at_10_gbps_and_vgg16_more():
    r50 = required_compression("resnet50", WORKERS, "10gbit", bucketing="horovod")
    vgg = required_compression("vgg16", WORKERS, "10gbit", bucketing="horovod")
    assert r50.sf_uncompressed < 0.9
    assert 1.5 <= r50.ratio <= 5
    assert vgg.ratio > r50.ratio


def test_required_ratio_is_the_smallest_reaching_the_target():
    req = required_compression("resnet101", WORKERS, "10gbit", target_sf=0.95, rtol=1e-4)
    assert req.sf_at_ratio >= 0.95
    below = scenario("resnet101", WORKERS, "10gbit", ratio=req.ratio * (1 - 2e-4))
    assert below.sf < 0.95


def test_unreachable_targets_say_why():
    over = required_compression("resnet50", WORKERS, "10gbit", target_sf=1.01)
    assert over.ratio == math.inf and "cannot exceed 1" in over.reason
    slow = required_compression("resnet50", WORKERS, "10gbit", latency_s=0.05)
    assert slow.ratio == math.inf and "not bandwidth" in slow.reason


def test_sweep_is_tidy():
    table = sweep("resnet50", workers=[4, 8], methods=["none", "fp16"], ratios=[10])
    assert len(table) == 2 * 25 * 3
    assert {"profile", "workers", "bandwidth_bps", "method", "ratio", "sf", "speedup",
            "t_iter_s", "exposed_comm_s", "compression"} <= set(table.columns)
    assert table["bandwidth_bps"].min() == pytest.approx(1e9)
    assert table["bandwidth_bps"].max() == pytest.approx(400e9)
    assert (table.loc[table["method"] == "none", "speedup"] == 1).all()
    tenfold = table[table["ratio"] == 10]
    assert np.allclose(tenfold["compression"], 10) and (tenfold["speedup"] >= 1).all()


def test_default_bandwidths_are_log_spaced():
    bw = default_bandwidths(5)
    assert np.allclose(np.diff(np.log(bw)), np.log(bw[1] / bw[0]))


def test_break_even_bandwidth():
    costly = MethodCost.fixed_ratio(4, encode=(2e-3, 0), decode=(2e-3, 0), name="costly")
    bw = break_even_bandwidth("resnet50", WORKERS, costly)
    assert 1e9 < bw < 100e9
    assert scenario("resnet50", WORKERS, bw * 0.9, costly).speedup > 1
    assert scenario("resnet50", WORKERS, bw * 1.1, costly).speedup <= 1
    useless = MethodCost.fixed_ratio(1, encode=(1e-3, 0))
    assert break_even_bandwidth("resnet50", WORKERS, useless) == 0.0


def test_advise_ranks_and_verdict_says_no_when_the_network_is_fast():
    table = advise("resnet50", WORKERS, "100gbit", methods=["fp16", "bf16"],
                   bucketing="horovod", device="NVIDIA H100 80GB HBM3")  # a GPU with bf16
    assert table["method"].tolist()[0] == "none" or table["speedup"].iloc[0] < 1.05
    assert table["t_iter_s"].is_monotonic_increasing and table["rank"].tolist() == [1, 2, 3]
    assert table.loc[table["method"] == "none", "speedup"].item() == 1.0
    assert verdict(table).startswith("No: ")


def test_verdict_says_yes_with_the_speedup_when_the_network_is_slow():
    table = advise("vgg16", WORKERS, "10gbit", methods=["fp16", MethodCost.fixed_ratio(10)])
    assert table["method"].iloc[0] == "ratio 10x"
    text = verdict(table)
    assert text.startswith("Yes: ratio 10x is ") and "x faster than uncompressed DDP" in text


def test_advise_uses_a_measured_cost_table():
    costs = pd.DataFrame({"method": ["fp16"] * 4, "numel": [1e3, 1e5, 1e6, 1e7],
                          "encode_s": [1e-4, 2e-4, 1.1e-3, 1e-2],
                          "decode_s": [1e-4, 2e-4, 1.1e-3, 1e-2]})
    table = advise("resnet50", WORKERS, "10gbit", methods=["fp16", "bf16"], costs=costs,
                   device="NVIDIA H100 80GB HBM3")  # a GPU with bf16
    origin = dict(zip(table["method"], table["costs"]))
    assert origin == {"fp16": "fitted", "bf16": "assumed", "none": "none"}
    slow = table.set_index("method")
    assert slow.loc["fp16", "codec_s"] > slow.loc["bf16", "codec_s"]


def test_advise_all_registered_methods_by_default():
    import gradcomp

    table = advise("resnet50", WORKERS, "25gbit")
    assert set(table["method"]) == set(gradcomp.names()) - {"bf16"}  # a V100 has no bf16
