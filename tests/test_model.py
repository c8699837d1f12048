"""The performance model: collective costs, methods, bucketing, the timeline (cases computed
by hand), the fits, and rate parsing."""
import math

import numpy as np
import pandas as pd
import pytest

from gradcomp.evaluation.common.units import format_rate, parse_rate
from gradcomp.evaluation.model.bucketing import DDP, Horovod, bucketing_policy
from gradcomp.evaluation.model.fit import (codec_costs, fit_codec, fit_collectives, fit_runs,
                                           network_from_fit, summary, validate)
from gradcomp.evaluation.model.methods import MethodCost, resolve
from gradcomp.evaluation.model.network import Network
from gradcomp.evaluation.model.timeline import predict
from gradcomp.evaluation.profiles.profiles import Profile, load_profile

MIB = 2**20


# -- collectives -----------------------------------------------------------------------------
def test_ring_allreduce_allgather_broadcast_by_hand():
    net = Network(4, 1e9, latency_s=1e-5)  # B = 1.25e8 bytes/s
    assert net.cost("allreduce", 1e6) == pytest.approx(6e-5 + 2 * 3 / 4 * 1e6 / 1.25e8)
    assert net.cost("allgather", 1e6) == pytest.approx(3e-5 + 3 * 1e6 / 1.25e8)
    assert net.cost("broadcast", 1e6) == pytest.approx(3e-5 + 1e6 / 1.25e8)
    added = Network(4, 1e9, 1e-5, reduce_bytes_per_s=1e9)
    assert added.cost("allreduce", 1e6) == pytest.approx(0.01206 + 3 / 4 * 1e6 / 1e9)


def test_one_worker_and_empty_payloads_cost_nothing():
    net = Network(1, "10gbit", latency_s=1e-3)
    assert all(net.cost(c, 1e9) == 0 for c in ("allreduce", "allgather", "broadcast"))
    assert Network(8, 1e9, 1e-3).cost("allreduce", 0) == 0


def test_efficiency_per_collective():
    net = Network(2, 8e9, efficiency={"allgather": 0.5})
    assert net.cost("allgather", 1e9) == pytest.approx(2 * net.cost("broadcast", 1e9))


def test_allreduce_matches_the_netai_formula():
    """reduce-scatter 8S(N-1)/N/B + (N-1) vec_add(S/N), then all-gather 8S(N-1)/N/B."""
    p = load_profile("resnet50")
    S, N, B = 64 * MIB, 8, 10e9
    table = np.array(p.vec_add).T
    expected = 2 * 8 * S * (N - 1) / N / B + (N - 1) * np.interp(S / N, *table)
    assert Network(N, B).cost("allreduce", S, p.add_time) == pytest.approx(expected)


@pytest.mark.parametrize("kwargs,match", [
    ({"workers": 0}, "workers"), ({"bandwidth_bps": "fast"}, "bandwidth"),
    ({"latency_s": -1.0}, "latency_s"), ({"efficiency": 0.0}, "efficiency"),
    ({"efficiency": {"scatter": 0.5}}, "efficiency key")])
def test_network_refuses_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Network(**{"workers": 2, "bandwidth_bps": 1e9, **kwargs})
    with pytest.raises(ValueError, match="collective"):
        Network(2, 1e9).cost("reduce", 10)


# -- methods ---------------------------------------------------------------------------------
def test_methods_from_compressors():
    none, fp16 = MethodCost.from_compressor("none"), MethodCost.from_compressor("bf16")
    assert none.wire([(10, 10), (5,)], 4) == (420,)
    assert fp16.wire([(10, 10), (5,)], 4) == (210,) and fp16.aggregation == "allreduce"
    per = MethodCost.from_compressor("fp16", per_parameter=True, encode=(1.0, 0.5))
    assert per.encode_s([(2,), (3,)]) == 2 * 1.0 + 0.5 * 5
    assert MethodCost.from_compressor("fp16", encode=(1.0, 0.5)).encode_s([(2,), (3,)]) == 3.5


def test_fixed_ratio_method():
    m = MethodCost.fixed_ratio(4, "allgather")
    assert m.wire([(100,)], 4) == (100.0,) and m.name == "ratio 4x"
    with pytest.raises(ValueError, match="ratio"):
        MethodCost.fixed_ratio(0.5)
    with pytest.raises(ValueError, match="aggregation"):
        MethodCost.fixed_ratio(2, "alltoall")


def test_powersgd_sends_p_then_q_per_matrix():
    m = MethodCost.from_compressor("powersgd")
    assert m.aggregation == "powersgd" and not m.per_parameter
    # one batched application per shape group; the bias is only copied
    assert m.applications([(64, 32), (64,), (64, 32), (32, 16)]) == (2, 2 * 2048 + 512, 64)
    # a 64 x 32 matrix at rank 1: P = 64 floats, Q = 32 floats; the bias travels plain
    assert m.wire([(64, 32), (64,)], 4) == (64 * 4 + 64 * 4, 32 * 4)


def test_resolve_names_ratios_and_costs():
    assert resolve(3).wire([(30,)], 4) == (40.0,)
    fitted = resolve("fp16", {"fp16": ((1.0, 2.0), (3.0, 4.0))})
    assert fitted.encode == (1.0, 2.0) and fitted.decode == (3.0, 4.0)
    assumed = resolve("fp16")
    assert assumed.encode[0] > 0 and assumed.encode[1] > 0
    assert resolve("none").encode == (0.0, 0.0)
    with pytest.raises(ValueError, match="unknown compressor"):
        resolve("zip")


# -- bucketing -------------------------------------------------------------------------------
def _profile(mib, ready_ms, backward_ms=None, **kw):
    sizes = [int(m * MIB) // 4 for m in mib]
    ready = [t / 1e3 for t in ready_ms]
    return Profile("synthetic", sizes, ready, kw.pop("forward_s", 0.0),
                   (backward_ms or ready_ms[-1]) / 1e3, kw.pop("optimizer_s", 0.0), **kw)


def test_ddp_small_first_bucket_then_cap():
    p = _profile([0.5, 0.75, 10, 20, 30, 1], [1, 2, 3, 4, 5, 6])
    buckets = DDP().assign(p)
    assert [b.params for b in buckets] == [(0, 1), (2, 3), (4,), (5,)]
    assert [b.ready_s for b in buckets] == [0.002, 0.004, 0.005, 0.006]
    assert [b.params for b in DDP(bucket_cap_mb=50).assign(p)] == [(0, 1), (2, 3, 4), (5,)]


def test_horovod_cycle_and_fusion_buffer():
    p = _profile([1, 1, 1, 1, 1], [1, 2, 6, 7, 20])
    assert [b.params for b in Horovod().assign(p)] == [(0, 1, 2), (3, 4)]
    q = _profile([40, 30, 1], [1, 2, 3])
    assert [b.params for b in Horovod().assign(q)] == [(0, 1), (2,)]
    assert [b.params for b in Horovod(cycle_ms=1).assign(q)] == [(0,), (1,), (2,)]
    with pytest.raises(ValueError, match="bucketing"):
        bucketing_policy("nccl")


# -- the timeline ----------------------------------------------------------------------------
def _two_buckets():
    """Two 4 MB gradients ready at 10 and 20 ms (Horovod: one bucket each); p = 2 at a
    bandwidth where each all-reduce takes 15 ms; encode 1 ms, decode 2 ms."""
    p = _profile([4e6 / MIB, 4e6 / MIB], [10, 20], forward_s=0.01, optimizer_s=0.005)
    net = Network(2, 8 * 4e6 / 0.015)
    method = MethodCost.fixed_ratio(1, encode=(1e-3, 0), decode=(2e-3, 0), name="slow")
    return p, net, method


def test_two_bucket_timeline_by_hand():
    p, net, method = _two_buckets()
    pred = predict(p, net, method, "horovod")
    t = pred.buckets
    assert t["encode_start_s"].tolist() == pytest.approx([0.010, 0.020])
    assert t["comm_start_s"].tolist() == pytest.approx([0.011, 0.026])  # waits for bucket 0
    assert t["comm_end_s"].tolist() == pytest.approx([0.026, 0.041])
    assert t["decode_end_s"].tolist() == pytest.approx([0.028, 0.043])
    assert pred.backward_end_s == pytest.approx(0.020)
    assert pred.exposed_comm_s == pytest.approx(0.023)
    assert pred.t_iter_s == pytest.approx(0.010 + 0.043 + 0.005)
    assert pred.sf == pytest.approx(0.035 / 0.058)
    none = predict(p, net, "none", "horovod")
    assert none.t_iter_s == pytest.approx(0.010 + 0.040 + 0.005)  # comm 10-25, 25-40 ms
    assert pred.speedup == pytest.approx(none.t_iter_s / pred.t_iter_s)


def test_contention_slows_overlapping_encode_and_backward():
    p, net, method = _two_buckets()
    pred = predict(p, net, method, "horovod", contention=2.0)
    t = pred.buckets
    # encode of bucket 0 overlaps backward: 2 ms instead of 1, backward loses 1 ms
    assert t["encode_end_s"].tolist() == pytest.approx([0.012, 0.022])
    assert t["ready_s"].tolist() == pytest.approx([0.010, 0.021])
    assert pred.backward_end_s == pytest.approx(0.021)
    assert t["decode_end_s"].tolist() == pytest.approx([0.029, 0.044])
    assert pred.t_iter_s == pytest.approx(0.010 + 0.044 + 0.005)


def test_allgather_decodes_every_payload():
    p, _, method = _two_buckets()
    gather = MethodCost.fixed_ratio(1, "allgather", decode=(2e-3, 0))
    pred = predict(p, Network(4, 1e12), gather, "horovod")
    t = pred.buckets
    assert (t["decode_end_s"] - t["decode_start_s"]).tolist() == pytest.approx([8e-3, 8e-3])


def test_powersgd_runs_two_rounds_with_the_middle_step_between():
    p = Profile("mat", [4096 * 1024], [0.01], 0.0, 0.01, 0.0, shapes=[(4096, 1024)])
    m = MethodCost.from_compressor("powersgd", encode=(2e-3, 0))
    net = Network(2, 1e9)
    pred = predict(p, net, m)
    t = pred.buckets.iloc[0]
    rounds = net.cost("allreduce", 4096 * 4) + net.cost("allreduce", 1024 * 4)
    assert t["encode_end_s"] - t["encode_start_s"] == pytest.approx(1e-3)
    assert t["comm_end_s"] - t["comm_start_s"] == pytest.approx(rounds + 1e-3)
    assert pred.compression == pytest.approx(4096 * 1024 / (4096 + 1024))


def test_one_worker_and_uncompressed_keep_sf_one():
    p = load_profile("resnet50")
    pred = predict(p, Network(1, 1e9), "none")
    assert pred.sf == 1.0 and pred.exposed_comm_s == 0 and pred.speedup == 1.0


def test_more_bandwidth_never_hurts():
    p = load_profile("resnet50")
    sfs = [predict(p, Network(8, bw), "none", "ddp").sf for bw in (1e9, 1e10, 1e11)]
    assert sfs == sorted(sfs) and sfs[-1] > 0.95 and sfs[0] < 0.5


def test_profiles_without_shapes_use_square_views():
    p = Profile("flat", [1 << 20], [0.01], 0.0, 0.01, 0.0)
    pred = predict(p, Network(2, 1e9), MethodCost.from_compressor("powersgd"))
    assert pred.wire_bytes == 2 * 1024 * 4


# -- fits ------------------------------------------------------------------------------------
def test_fit_codec_recovers_costs_from_noisy_data():
    rng = np.random.default_rng(0)
    numel = np.repeat(np.logspace(3, 7, 12).astype(int), 3)
    rows = []
    for method, (a, b) in {"fp16": (3e-5, 2e-11), "topk": (1e-4, 5e-10)}.items():
        noise = 1 + 0.02 * rng.standard_normal((2, numel.size))
        rows.append(pd.DataFrame({"method": method, "numel": numel,
                                  "encode_s": (a + b * numel) * noise[0],
                                  "decode_s": (a / 2 + b / 2 * numel) * noise[1]}))
    fits = fit_codec(pd.concat(rows))
    assert fits["topk", "encode"].params["b"] == pytest.approx(5e-10, rel=0.03)
    assert fits["topk", "decode"].params["a"] == pytest.approx(5e-5, rel=0.1)
    assert fits["fp16", "encode"].params["b"] == pytest.approx(2e-11, rel=0.03)
    assert all(f.r2 > 0.99 and f.n == numel.size for f in fits.values())
    assert fits["fp16", "encode"].residuals.shape == (numel.size,)
    costs = codec_costs(fits)
    assert set(costs) == {"fp16", "topk"} and len(costs["topk"]) == 2
    table = summary(fits)
    assert {"method", "phase", "a", "b", "r2", "n", "rmse"} <= set(table.columns)


def test_fit_collectives_recovers_alpha_and_bandwidth():
    rng = np.random.default_rng(1)
    truth = Network(2, 10e9, latency_s=2e-5)
    rows = []
    for collective in ("allreduce", "allgather", "broadcast"):
        for p in (2, 4, 8):
            net = Network(p, truth.bandwidth_bps, 2e-5)
            for nbytes in np.logspace(3, 8, 11).round():  # whole bytes, as measured
                t = net.cost(collective, nbytes) * (1 + 0.01 * rng.standard_normal())
                rows.append({"collective": collective, "world_size": p, "nbytes": nbytes,
                             "time_s": t})
    fits = fit_collectives(pd.DataFrame(rows))
    for fit in fits.values():
        assert fit.params["bandwidth_bps"] == pytest.approx(10e9, rel=0.02)
        assert fit.params["alpha_s"] == pytest.approx(2e-5, rel=0.2)
        assert fit.r2 > 0.99
    net = network_from_fit(fits, 8, "10gbit")
    assert net.bytes_per_s("allgather") == pytest.approx(10e9 / 8, rel=0.02)
    assert net.alpha("allreduce") == pytest.approx(2e-5, rel=0.2)


def test_fit_collectives_keeps_the_latency_under_the_largest_payloads_noise():
    # The testbed at 100 Mbit/s: 1.7 ms per step, the 16 MiB all-reduce 2% off. Unweighted,
    # that 28 ms of noise outweighs the 16 KiB call's 3.4 ms: alpha fits to 0.9 ms.
    net = Network(2, 100e6, latency_s=1.7e-3)
    sizes = [2**k for k in range(14, 25, 2)]
    times = [net.cost("allreduce", n) for n in sizes]
    times[-1] *= 1.02
    fit = fit_collectives(pd.DataFrame({"collective": "allreduce", "world_size": 2,
                                        "nbytes": sizes, "time_s": times}))["allreduce"]
    assert fit.params["alpha_s"] == pytest.approx(1.7e-3, rel=0.1)
    assert fit.params["bandwidth_bps"] == pytest.approx(100e6 / 1.02, rel=0.01)


def test_network_from_fit_takes_the_nominal_rate_where_the_sweep_resolved_none():
    # Payloads too small to leave the latency: times fall with size, the slope fits to 0.
    rows = pd.DataFrame({"collective": "allreduce", "world_size": 2,
                         "nbytes": [1e3, 1e4, 1e5], "time_s": [3e-4, 2.9e-4, 2.8e-4]})
    fits = fit_collectives(rows)
    assert fits["allreduce"].params["bandwidth_bps"] == math.inf
    net = network_from_fit(fits, 2, "1gbit")
    assert net.bytes_per_s("allreduce") == pytest.approx(1e9 / 8)
    assert net.alpha("allreduce") > 0


def test_fit_runs_recovers_contention_and_efficiency():
    profile = load_profile("resnet50")
    method = MethodCost.fixed_ratio(4, encode=(2e-3, 2e-10), decode=(1e-3, 1e-10), name="c4")
    methods = {"none": resolve("none"), "c4": method}
    rows = []
    for name in methods:
        for p in (4, 8):
            for bw in (5e9, 10e9, 25e9):
                net = Network(p, bw, efficiency=0.7)
                t = predict(profile, net, methods[name], contention=1.5).t_iter_s
                rows.append({"method": name, "workers": p, "bandwidth_bps": bw, "t_iter_s": t})
    fit = fit_runs(pd.DataFrame(rows), profile, methods)
    assert fit.params["efficiency"] == pytest.approx(0.7, rel=0.02)
    assert fit.params["contention"] == pytest.approx(1.5, rel=0.05)
    assert fit.r2 > 0.999
    fixed = fit_runs(pd.DataFrame(rows), profile, methods, contention=1.5, levels=3)
    assert fixed.params["contention"] == 1.5
    assert fixed.params["efficiency"] == pytest.approx(0.7, rel=0.02)


def test_fit_needs_enough_varied_measurements():
    table = pd.DataFrame({"method": ["fp16"], "numel": [10], "encode_s": [1.0],
                          "decode_s": [1.0]})
    with pytest.raises(ValueError, match="at least 2"):
        fit_codec(table)
    with pytest.raises(ValueError, match="lacks column"):
        fit_codec(table.drop(columns="decode_s"))


def test_validate_reports_relative_errors():
    v = validate([1.1, 1.8, math.nan], [1.0, 2.0, 1.0])
    assert v.table["rel_error"].tolist()[:2] == pytest.approx([0.1, -0.1])
    assert math.isnan(v.mean_abs_rel_error)  # NaN stays NaN
    ok = validate([1.1, 1.8], [1.0, 2.0])
    assert ok.mean_abs_rel_error == pytest.approx(0.1)
    assert ok.max_abs_rel_error == pytest.approx(0.1)


# -- units -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text,bps", [
    ("10gbit", 10e9), ("100mbit", 100e6), ("25G", 25e9), ("1.5Gbps", 1.5e9),
    ("400gbit", 400e9), ("25GB", 200e9), ("25Gb", 25e9), ("10 Gbit/s", 10e9),
    ("1GiB/s", 8 * 2**30), ("3e9", 3e9), (5e9, 5e9), (np.float64(2e9), 2e9)])
def test_parse_rate(text, bps):
    assert parse_rate(text) == pytest.approx(bps)


@pytest.mark.parametrize("bad", ["fast", "10gbyt", "-1G", 0, True, "nan", None])
def test_parse_rate_errors_name_the_option_and_forms(bad):
    with pytest.raises(ValueError, match=r"bandwidth=.*10gbit, 100mbit, 25G"):
        parse_rate(bad)


def test_format_rate():
    assert format_rate(10e9) == "10 Gbit/s"
    assert format_rate(1.5e9) == "1.5 Gbit/s"
    assert format_rate(100e6) == "100 Mbit/s"
    assert format_rate(400e9) == "400 Gbit/s"


def test_fitted_costs_are_never_negative():
    """Noise around a zero intercept must not give a negative encode cost."""
    import numpy as np
    import pandas as pd

    from gradcomp.evaluation.model.fit import fit_codec

    n = np.array([1e3, 1e4, 1e5, 1e6] * 3)
    noise = np.random.default_rng(0).normal(0, 0.05, len(n))  # relative: times stay > 0
    table = pd.DataFrame({"method": "x", "numel": n,
                          "encode_s": 1e-9 * n * (1 + n / 1e7) * (1 + noise),
                          "decode_s": 2e-5 + 1e-9 * n})
    fits = fit_codec(table)
    unconstrained = np.polyfit(n, table["encode_s"], 1)[1]
    assert unconstrained < 0  # the data would give a negative intercept
    assert fits[("x", "encode")].params["a"] == 0 and fits[("x", "encode")].params["b"] > 0
    assert abs(fits[("x", "decode")].params["a"] - 2e-5) < 1e-9
