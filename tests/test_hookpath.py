"""The hook-path bench prices what the hook computes per bucket, and the model takes it:
encode, PowerSGD's middle step, decode of every rank's payload; DDP's own copies in the
profile (`measure_ddp_profile`, `finalize_s`)."""
import math
import os
import threading
from collections import Counter

import pandas as pd
import pytest
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

import gradcomp.comm as gc
from gradcomp.comm import wire
from gradcomp.comm.communicators import Bucket
from gradcomp.comm.hooks import average
from gradcomp.comm.ranks import Ranks
from gradcomp.evaluation.benches.hookpath import (EVICT_FACTOR, EVICT_MIN_BYTES,
                                                  BucketGradient, bench_hook_path, evict,
                                                  hook_communicator, hook_sizes, matrix_shape,
                                                  run_phases, workload_gradient)
from gradcomp.evaluation.common.env import end_process_group
from gradcomp.evaluation.model.fit import hook_costs
from gradcomp.evaluation.model.methods import MethodCost, resolve
from gradcomp.evaluation.model.network import Network
from gradcomp.evaluation.model.timeline import codec_seconds, predict
from gradcomp.evaluation.profiles.profiles import Profile, from_dict, to_dict
from gradcomp.evaluation.testbed.validate import DEFAULT_METHODS

SHAPES = [torch.Size(s) for s in [(10,), (10, 32), (32,), (32, 32), (32,), (32, 32)]]


class Ops(TorchDispatchMode):
    """Counts the aten ops run on this thread while `on`; c10d's collectives are the
    exchange, not the hook's computation."""

    def __init__(self):
        super().__init__()
        self.on, self.thread, self.ops = False, threading.get_ident(), Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if self.on and not name.startswith("c10d."):
            assert threading.get_ident() == self.thread, "an op ran on another thread"
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


def _hook_ops(method: str, monkeypatch) -> Counter:
    """The ops of the hook's second call on one bucket in a 1-rank gloo group, the exchange's
    own data movement (wire's all-reduce and all-gather) left out; the exchange's futures are
    complete when they are handed back, so the hook's decode runs here, not on gloo's
    thread."""
    state = gc.build_state(method)
    ops = Ops()

    def paused(fn):
        def call(*args, **kwargs):
            was, ops.on = ops.on, False
            try:
                fut = fn(*args, **kwargs)
                fut.wait()
                return fut
            finally:
                ops.on = was
        return call

    monkeypatch.setattr(wire, "all_reduce_sum", paused(wire.all_reduce_sum))
    monkeypatch.setattr(wire, "all_gather_bytes", paused(wire.all_gather_bytes))
    gen = torch.Generator().manual_seed(0)
    for i in range(2):
        buf = torch.randn(sum(s.numel() for s in SHAPES), generator=gen)
        with ops:
            ops.on = i == 1
            average(state, Bucket(buf, 0, lambda: SHAPES), 1 + i).wait()
    monkeypatch.undo()
    return ops.ops


def _bench_ops(method: str) -> Counter:
    """The ops inside the hook-path bench's timed phases, second call, same bucket."""
    gen = torch.Generator().manual_seed(0)
    buf = torch.empty(sum(s.numel() for s in SHAPES))
    bucket = Bucket(buf, 0, lambda: SHAPES)
    comp, communicator = hook_communicator(method, {}, bucket, world_size=1)
    ops = Ops()

    def timed(fn, *args):
        ops.on = record
        try:
            return 0.0, fn(*args)
        finally:
            ops.on = False

    with ops:
        for record in (False, True):
            buf.copy_(torch.randn(buf.numel(), generator=gen))
            run_phases(comp, communicator, bucket, 1, timed)
    return ops.ops


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    yield
    end_process_group()  # the tests' hooked DDPs freed first


def test_the_bench_times_the_ops_the_hook_runs(one_rank, monkeypatch):
    # If the hook's per-bucket work changes (a copy added, a phase moved out of the
    # communicator), the bench that prices it for the model must change with it.
    for method in [m for m in DEFAULT_METHODS if m != "ddp"]:
        hook, bench = _hook_ops(method, monkeypatch), _bench_ops(method)
        assert hook or method == "none", method  # one rank: nothing to divide
        assert hook == bench, (method, hook - bench, bench - hook)


class Writes(TorchDispatchMode):
    """The allocations ("empty") and the numel of each fill_ run under it."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name.startswith("aten.empty"):
            self.calls.append("empty")
        elif name.startswith("aten.fill_"):
            self.calls.append(args[0].numel())
        return func(*args, **(kwargs or {}))


def test_eviction_writes_one_buffer_kept_between_calls_and_grown_when_too_small():
    least = EVICT_MIN_BYTES // 4  # float32 values
    larger = EVICT_MIN_BYTES // EVICT_FACTOR + 1024  # a bucket whose eviction exceeds the least
    evict(1, "cpu")  # the process's buffer exists from here on
    with Writes() as writes:
        evict(1, "cpu")
        evict(1000, "cpu")
        evict(larger, "cpu")
        evict(larger, "cpu")
        evict(1, "cpu")
    assert writes.calls == [least, least, "empty", EVICT_FACTOR * larger // 4,
                            EVICT_FACTOR * larger // 4, least]


def test_bench_rows_phases_and_resume(tmp_path):
    out = tmp_path / "hook.csv"
    rows = bench_hook_path(["none", "topk", "powersgd"], sizes=[4096, 16384], world_size=2,
                           repeats=1, warmup=0, out=out)
    rows = rows.set_index(["method", "numel"])
    assert dict(rows["communicator"].groupby("method").first()) == {
        "none": "DenseAllReduce", "topk": "AllGather", "powersgd": "TwoRounds"}
    assert dict(rows["aggregation"].groupby("method").first()) == {
        "none": "allreduce", "topk": "allgather", "powersgd": "powersgd"}
    assert (rows[["encode_s", "decode_s"]] > 0).all().all()
    middle = rows["middle_s"]
    assert (middle.loc["powersgd"] > 0).all()
    assert middle.drop("powersgd", level="method").isna().all()
    assert (rows["data"] == "randn").all() and (rows["tensors"] == 1).all()
    again = bench_hook_path(["none", "topk", "powersgd"], sizes=[4096, 16384], world_size=2,
                            repeats=1, warmup=0, out=out)
    assert len(pd.read_csv(out)) == 6 and len(again) == 6  # resumed: nothing measured again


def test_a_gradient_prefix_keeps_whole_tensors_and_cuts_the_next():
    values = torch.arange(10 + 320 + 32 + 1024, dtype=torch.float32)
    grad = BucketGradient(values, tuple(SHAPES[:4]), "x")
    assert grad.prefix(10)[1] == [torch.Size([10])]
    cut_values, cut = grad.prefix(10 + 320 + 32 + 24)
    assert cut == [*SHAPES[:3], torch.Size([4, 6])] and torch.equal(cut_values, values[:386])
    assert grad.prefix(values.numel())[1] == list(SHAPES[:4])
    with pytest.raises(ValueError, match="numel"):
        grad.prefix(values.numel() + 1)


def test_workload_gradient_is_the_largest_bucket_of_one_backward_pass():
    from gradcomp.evaluation.workloads.load import load_workload

    grad = workload_gradient("tiny", 8, 25.0, rank=1)
    params = [p for p in load_workload("tiny", batch_size=8).model.parameters()][::-1]
    assert grad.shapes == tuple(p.shape for p in params)  # one bucket: every parameter
    assert grad.values.numel() == max(hook_sizes("tiny", 8, 25.0))
    assert grad.values.abs().sum() > 0
    assert grad.source == "tiny gradient, batch 8, 25 MB buckets"
    assert not torch.equal(grad.values, workload_gradient("tiny", 8, 25.0, rank=0).values)
    own = workload_gradient("mlp", None, 25.0)  # the workload's own batch size
    assert own.source == "mlp gradient, batch 64, 25 MB buckets"
    rows = bench_hook_path(["powersgd"], sizes=[100, grad.values.numel()], world_size=2,
                           repeats=1, warmup=0, gradient=grad)
    assert list(rows["data"]) == [grad.source] * 2
    assert list(rows["tensors"]) == [2, len(params)]  # a cut bias + a matrix; all of them
    with pytest.raises(ValueError, match="sizes.*holds"):
        bench_hook_path(["none"], sizes=[grad.values.numel() + 1], gradient=grad)


def test_matrix_shape():
    assert [matrix_shape(n) for n in (4096, 8192, 12, 7, 1)] == [
        (64, 64), (64, 128), (3, 4), (1, 7), (1, 1)]
    with pytest.raises(ValueError, match="numel"):
        matrix_shape(0)


def test_ranks_without_a_group():
    ranks = Ranks(world_size=4)
    assert (ranks.world_size, ranks.backend) == (4, "none")
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match="world_size"):
            Ranks(world_size=bad)


def _hook_table(method, aggregation, encode, decode, middle=math.nan, world_size=2):
    sizes = [1000, 2000, 4000]
    return pd.DataFrame({"method": method, "aggregation": aggregation,
                         "world_size": world_size, "numel": sizes,
                         "encode_s": [encode * n for n in sizes],
                         "decode_s": [decode * n for n in sizes],
                         "middle_s": [middle * n for n in sizes]})


def test_hook_costs_per_payload_and_middle():
    table = pd.concat([_hook_table("topk", "allgather", 1e-9, 4e-9, world_size=4),
                       _hook_table("fp16", "allreduce", 1e-9, 3e-9),
                       _hook_table("powersgd", "powersgd", 2e-9, 5e-9, middle=1e-9)])
    costs = hook_costs(table)
    assert costs["topk"][1][1] == pytest.approx(1e-9)  # 4 payloads: per payload
    assert costs["fp16"][1][1] == pytest.approx(3e-9) and len(costs["fp16"]) == 2
    assert costs["powersgd"][2][1] == pytest.approx(1e-9)
    assert resolve("powersgd", costs).middle == pytest.approx((0.0, 1e-9), abs=1e-12)


def test_hook_path_costs_price_a_bucket_once():
    # The bench prices a whole bucket: PowerSGD's fixed cost is not multiplied by the bucket's
    # shape groups, as it is for a compress-bench fit (one application per batched group).
    table = _hook_table("powersgd", "powersgd", 2e-9, 5e-9, middle=1e-9)
    table = table.assign(encode_s=table["encode_s"] + 1e-3)  # 1 ms per bucket
    shapes = [(100, 100), (100,), (200, 100)]
    per_bucket = resolve("powersgd", hook_costs(table))
    assert not per_bucket.per_parameter
    assert per_bucket.encode_s(shapes) == pytest.approx(1e-3 + 2e-9 * 30100, rel=1e-6)
    per_group = resolve("powersgd", {"powersgd": tuple(hook_costs(table)["powersgd"])})
    assert per_group.encode_s(shapes) == pytest.approx(  # two shape groups, the bias copied
        2e-3 + 2e-9 * 30000 + per_group.plain[0] * 100, rel=1e-6)
    hook_csv = cost_table_of(table)
    assert hook_csv.per_bucket and not resolve("powersgd", hook_csv.costs).per_parameter


def test_hook_path_costs_price_a_bucket_where_the_bench_measured_it():
    # Codec costs bend upward once a bucket leaves the caches (int8 on the testbed): one line
    # through every size under-prices the largest bucket, a size the bench measured (the
    # workload's own); the model takes the measurement there, and between two sizes the
    # straight line through them.
    sizes = [4_000, 16_000, 64_000, 256_000, 1_024_000, 4_096_000]
    encode = [1e-4 + 5e-9 * n for n in sizes[:-1]] + [1e-4 + 10e-9 * sizes[-1]]
    table = pd.DataFrame({"method": "int8", "aggregation": "allgather", "world_size": 2,
                          "numel": sizes, "encode_s": encode,
                          "decode_s": [2 * t for t in encode], "middle_s": math.nan})
    for costs in (hook_costs(table), cost_table_of(table).costs):
        int8 = resolve("int8", costs)
        assert int8.encode_s([(sizes[-1],)]) == pytest.approx(encode[-1], rel=1e-9)
        assert int8.decode_s([(sizes[-1],)]) == pytest.approx(encode[-1], rel=1e-9)  # of 2
        between = (sizes[-2] + sizes[-1]) // 2
        assert int8.encode_s([(between,)]) == pytest.approx((encode[-2] + encode[-1]) / 2)
        assert int8.encode_s([(2 * sizes[-1],)]) == pytest.approx(  # the last segment on
            encode[-1] + (encode[-1] - encode[-2]) / (sizes[-1] - sizes[-2]) * sizes[-1])
        assert 0 <= int8.encode_s([(10,)]) <= encode[0]
    profile = Profile("one bucket", [sizes[-1]], [0.01], 0.01, 0.01, 0.0,
                      shapes=[(4_000, 1_024)])
    bucket = predict(profile, Network(2, 1e9), int8, "ddp").buckets.iloc[0]
    assert bucket["encode_end_s"] - bucket["encode_start_s"] == pytest.approx(encode[-1])
    assert costs["int8"][0][1] < 10e-9  # as a tuple: the line fitted through all sizes


def cost_table_of(table):
    from gradcomp.evaluation.model.cost_tables import measured_table

    return measured_table(table.assign(communicator="TwoRounds", device_name="cpu"))


def _profile(finalize_s=0.0):
    return Profile("one bucket", [1000, 2000], [0.001, 0.002], 0.001, 0.002, 0.003,
                   shapes=[(10, 100), (20, 100)], finalize_s=finalize_s)


def test_powersgd_middle_is_priced_between_its_rounds_and_finalize_after():
    net = Network(2, 1e9)
    base = resolve("powersgd").with_costs((0.0, 1e-6), (0.0, 0.0))
    halves = predict(_profile(), net, base, baseline_s=1.0)
    with_middle = predict(_profile(), net, base.with_costs(middle=(0.0, 2e-6)),
                          baseline_s=1.0)
    # Without a middle the encode's second half (1.5 ms) sits between the rounds; with one,
    # the whole encode (3 ms) comes first and the middle (6 ms) between the rounds.
    assert with_middle.t_iter_s - halves.t_iter_s == pytest.approx(6e-3)
    row = with_middle.buckets.iloc[0]
    assert row["encode_end_s"] - row["encode_start_s"] == pytest.approx(3e-3)
    # the codec per iteration: the encode, the middle (none: the encode's second half), the
    # decode (0 here)
    assert codec_seconds(with_middle) == pytest.approx(3e-3 + 6e-3)
    assert codec_seconds(halves) == pytest.approx(3e-3)
    finalized = predict(_profile(0.004), net, base, baseline_s=1.0)
    assert finalized.t_iter_s - halves.t_iter_s == pytest.approx(0.004)
    assert _profile(0.004).t_iter_single == pytest.approx(0.010)


def test_finalize_survives_save_and_old_profiles_load():
    assert from_dict(to_dict(_profile(0.004))).finalize_s == 0.004
    old = {k: v for k, v in to_dict(_profile()).items() if k != "finalize_s"}
    assert from_dict(old).finalize_s == 0.0
    with pytest.raises(ValueError, match="times"):
        _profile(-1.0)


def test_ddp_profile_splits_backward_at_the_last_bucket(one_rank):
    from gradcomp.evaluation.benches.train import model_profile

    profile = model_profile("tiny", 8, repeats=3, warmup=1, ddp_bucket_cap_mb=25.0)
    assert profile.finalize_s > 0 and "DistributedDataParallel" in profile.assumptions
    assert profile.ready_s[-1] <= profile.backward_s
    assert len(profile.shapes) == 6
    plain = model_profile("tiny", 8, repeats=3, warmup=1)
    assert plain.finalize_s == 0.0


def test_method_cost_checks_middle():
    with pytest.raises(ValueError, match="middle"):
        MethodCost("x", "powersgd", lambda s, b: (0.0, 0.0), middle=(math.nan, 0.0))


def _slowest_sweep(out):
    rank = dist.get_rank()
    for _ in range(2):  # the second call resumes: every rank skips what rank 0 has
        bench_hook_path(["topk", "powersgd"], sizes=[4096], world_size=2, repeats=2, warmup=0,
                        out=out if rank == 0 else None, slowest_rank=True)


def test_slowest_rank_sweep_on_two_ranks(two_ranks):
    rows = pd.read_csv(two_ranks / "hook.csv")
    assert list(rows["method"]) == ["topk", "powersgd"] and rows["slowest_rank"].all()
    assert (rows["world_size"] == 2).all() and (rows["encode_s"] > 0).all()
    assert rows["middle_s"].isna().tolist() == [True, False]


def _powersgd_exchange_calls(out):
    """How many all-reduces one PowerSGD exchange of a bucket with plain pieces issues."""
    from gradcomp.comm.communicators import TwoRounds
    from gradcomp.compressors import compressor

    comp = compressor("powersgd")
    comp.set_rank(dist.get_rank())
    communicator = TwoRounds(comp, Ranks())
    assert communicator.ranks.round_group(0, torch.device("cpu")) is not None  # chained
    calls, real = [], dist.all_reduce

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    buf = torch.randn(sum(s.numel() for s in SHAPES), generator=torch.Generator().manual_seed(0))
    bucket = Bucket(buf, 0, lambda: SHAPES)
    sent = communicator.encode(bucket)
    dist.all_reduce = counted
    try:
        received = communicator.exchange(sent).wait()
    finally:
        dist.all_reduce = real
    communicator.decode(sent, received)
    if dist.get_rank() == 0:
        torch.save(len(calls), out)


def _two_rank_cases(out):
    _powersgd_exchange_calls(os.path.join(out, "calls.pt"))
    _slowest_sweep(os.path.join(out, "hook.csv"))


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """The file's cases on 2 gloo ranks, in one spawn: the folder of their outputs."""
    from gradcomp.evaluation.common.env import spawn

    out = tmp_path_factory.mktemp("two_ranks")
    spawn(_two_rank_cases, 2, "gloo", str(out))
    return out


def test_powersgd_sends_its_plain_pieces_with_round_one(two_ranks):
    # Two all-reduces per bucket, not a third for the vectors (a concurrent all-reduce on
    # another group cost the MLP's exchange 2-3 ms on the testbed).
    assert torch.load(two_ranks / "calls.pt") == 2


def test_auto_prices_a_bucket_as_the_model_does():
    """The `auto` hook's per-bucket price and the evaluation model's come from one function
    (`collectives.costs.cost`): the same seconds for the same bucket, network and candidate,
    and a change to the shared formula changes both alike."""
    from gradcomp.collectives import costs
    from gradcomp.comm.auto.choice import Chooser, Transfer

    p, alpha, x = 4, 2e-5, 8 / 1e9  # seconds per byte of a 1 Gbit/s link
    net = Network(p, 1e9, alpha)
    profile = _profile()

    def model_and_auto():
        seen = []
        for method, transfer in (("fp16", Transfer("allreduce")), ("topk", Transfer("allgather"))):
            pred = predict(profile, net, method)
            chooser = Chooser([transfer], workers=p)
            chooser.alpha, chooser.x = alpha, x
            for b, row in pred.buckets.iterrows():
                chooser.codec[b, 0], chooser.nbytes[b, 0] = 0.0, row["wire_bytes"]
                model = row["comm_end_s"] - row["comm_start_s"]
                assert chooser.predict(b, 0) == pytest.approx(model, rel=1e-9)
                seen.append(model)
        # PowerSGD's two rounds: auto prices their bytes together, the model each round
        two = Transfer("allreduce", rounds=2).seconds(p, 3e5, alpha, x)
        assert two == pytest.approx(net.cost("allreduce", 1e5) + net.cost("allreduce", 2e5))
        return seen + [two]

    before = model_and_auto()
    assert len(before) >= 3  # a bucket per method, and PowerSGD's rounds
    with pytest.MonkeyPatch.context() as patch:
        step = costs.Tiers.ring_step
        patch.setattr(costs.Tiers, "ring_step", lambda self, n: 3 * step(self, n))
        after = model_and_auto()
    assert after == pytest.approx([3 * t for t in before])
