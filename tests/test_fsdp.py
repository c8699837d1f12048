"""gradcomp.fsdp on real gloo processes (2 and 4 ranks): the compressed reduce-scatter equals
FSDP's own where lossless, stays within each quantizer's error bound, combines with mixed
precision, resumes exactly, and trains the convergence task to its target with int8."""
import pytest
import torch

import gradcomp
import gradcomp.fsdp
from ddp_workers import spawn
from fsdp_workers import (CHUNK, DIRECT, MODEL_METHODS, POLICIES, four_rank_cases,
                          two_rank_cases)

pytestmark = pytest.mark.slow

#: Unit roundoff of each wire or output dtype (round to nearest).
UNIT = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


@pytest.fixture(scope="module")
def two():
    return spawn(two_rank_cases, 2)


@pytest.fixture(scope="module")
def four():
    return spawn(four_rank_cases, 4)


def block_absmax(chunk: torch.Tensor, block_size: int) -> torch.Tensor:
    """max |x| of each value's block (blocks of `block_size` from the chunk's start)."""
    n = chunk.numel()
    pad = -n % block_size
    blocks = torch.cat([chunk.abs(), chunk.new_zeros(pad)]).view(-1, block_size)
    return blocks.amax(1, keepdim=True).expand_as(blocks).reshape(-1)[:n]


def error_bound(method: str, options: dict, chunks, out_dtype) -> torch.Tensor:
    """Per element, the most the compressed sum of `chunks` (one per rank, float64) may differ
    from their exact sum: each rank's quantization error as the method states it (casts:
    half an ulp, |x| * unit roundoff; absmax quantizers: half a step, block max / (2 qmax)),
    plus float32 accumulation and the rounding of the result to `out_dtype`."""
    magnitude = sum(c.abs() for c in chunks)
    if method == "none":
        per_rank = torch.zeros_like(magnitude)
    elif method in ("bf16", "fp16"):
        wire = torch.bfloat16 if method == "bf16" else torch.float16
        per_rank = UNIT[wire] * magnitude + (2.0**-25 if wire == torch.float16 else 0)
    else:
        qmax = 127 if method == "int8" else 7
        block = options.get("block_size", 256)
        per_rank = sum(block_absmax(c, block) for c in chunks) / (2 * qmax) * (1 + 1e-6)
    accumulate = len(chunks) * 2.0**-23 * (magnitude + per_rank)
    return per_rank + accumulate + UNIT[out_dtype] * (magnitude + per_rank)


def check_reduce_scatter(inputs, outputs, method, options, lossy: bool):
    """Each owner's output against the exact sum of its chunk over the ranks' inputs; the
    largest error relative to its bound."""
    world = len(inputs)
    worst = 0.0
    for owner, out in enumerate(outputs):
        chunks = [x.double().view(world, -1)[owner] for x in inputs]
        exact = sum(chunks)
        err = (out.double() - exact).abs()
        bound = error_bound(method, options, chunks, out.dtype)
        assert (err <= bound).all(), f"{method}: error {err.max()} over bound at owner {owner}"
        worst = max(worst, err.max().item())
    if lossy is None:
        return
    if lossy:
        assert worst > 0, f"{method}: no error at all, so nothing was compressed"
    else:
        assert worst == 0


def sparse_reference(method, options, inputs, owner):
    """What the owner must get from top-k / random-k: the sum of every rank's decoded chunk, the
    compressors built and called as each rank does (all chunks, in order)."""
    world, total = len(inputs), 0
    for rank, x in enumerate(inputs):
        comp = gradcomp.compressor(method, **options)
        comp.set_rank(rank)
        decoded = [comp.decompress(comp.compress(c)) for c in x.view(world, -1)]
        total = total + decoded[owner].double()
    return total


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("case", sorted(DIRECT))
def test_direct_reduce_scatter_within_the_methods_bound(two, four, world, case):
    runs = two if world == 2 else four
    method, options, dtype = DIRECT[case]
    results = [r["direct"][case] for r in runs]
    inputs, outputs = [r["input"] for r in results], [r["output"] for r in results]
    assert all(o.dtype == dtype and o.numel() == CHUNK for o in outputs)
    if method in ("topk", "randomk"):
        for owner, out in enumerate(outputs):
            ref = sparse_reference(method, options, inputs, owner)
            torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=1e-6)
    else:
        check_reduce_scatter(inputs, outputs, method, options, lossy=method != "none")
    wire = gradcomp.compressor(method, **options).wire_nbytes(CHUNK, dtype)
    assert results[0]["sent"] == (world - 1) * (wire + -wire % 8)  # slices padded to 8 bytes


@pytest.mark.parametrize("world", [2, 4])
def test_average_divides_the_sum_by_the_group_size(two, four, world):
    runs = two if world == 2 else four
    for r in runs:
        assert torch.equal(r["direct"]["average"], r["direct"]["none"]["output"] / world)


def test_error_feedback_keeps_the_residual_of_the_whole_local_gradient(two):
    world = 2
    for rank, run in enumerate(two):
        ef = run["direct"]["error_feedback"]
        ref = gradcomp.compressor("int4", error_feedback=True)
        ref.set_rank(rank)
        for _ in range(2):
            for j, chunk in enumerate(ef["input"].view(world, -1)):
                ref.compress(chunk, key=j)
        for j in range(world):  # one residual per chunk: the full local gradient, not a shard
            assert torch.equal(ef["residuals"][j], ref.residuals[j])
        assert sum(r.abs().sum() for r in ef["residuals"].values()) > 0
    # The owners' second outputs carry what the first dropped: two steps sum closer to 2x.
    exact = sum(r["direct"]["error_feedback"]["input"].view(world, -1) for r in two)
    for owner, run in enumerate(two):
        outs = run["direct"]["error_feedback"]["outputs"]
        two_steps = (outs[0] + outs[1] - 2 * exact[owner]).abs().max()
        one_step = (2 * outs[0] - 2 * exact[owner]).abs().max()
        assert two_steps < one_step


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_none_equals_fsdps_own_reduce_scatter_bit_for_bit(two, policy):
    for run in two:
        ours, theirs = run["model"][policy]["none"]["grads"], run["model"][policy]["fsdp"]
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs))


def test_none_on_4_ranks_equals_fsdp_up_to_summation_order(four):
    for run in four:
        ours, theirs = run["model"]["fp32"]["none"]["grads"], run["model"]["fp32"]["fsdp"]
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("method", [m for m in MODEL_METHODS if m != "none"])
def test_fsdp_model_reduce_scatters_within_bound_under_mixed_precision(two, policy, method):
    logs = [run["model"][policy][method]["log"] for run in two]
    assert len(logs[0]) == 3  # one reduce-scatter per Linear (the root holds no parameters)
    reduce_dtype = torch.bfloat16 if policy.endswith("bf16") else torch.float32
    lossy = True
    if policy != "fp32" and method in ("bf16", "fp16"):
        # bf16 gradients travel exactly as bf16 (and summed exactly in fp32 by 2 ranks);
        # as fp16 they may or may not, as their exponents fall.
        lossy = False if (method, reduce_dtype) == ("bf16", torch.float32) else None
    for calls in zip(*logs):
        assert all(c["input"].dtype == reduce_dtype for c in calls)
        check_reduce_scatter([c["input"] for c in calls], [c["output"] for c in calls], method,
                             {}, lossy)
    # FSDP divides the sums by the world size and keeps fp32 gradients, near its own.
    near = {"bf16": 0.02, "fp16": 0.02, "int8": 0.05, "int4": 0.6}[method]
    for run in two:
        for a, b in zip(run["model"][policy][method]["grads"], run["model"][policy]["fsdp"]):
            assert a.dtype == torch.float32
            assert (a - b).abs().max() <= near * b.abs().max() + 1e-6


@pytest.mark.parametrize("method", ["int8", "int4"])
def test_fsdp_model_on_4_ranks_within_bound(four, method):
    logs = [run["model"]["fp32"][method]["log"] for run in four]
    for calls in zip(*logs):
        check_reduce_scatter([c["input"] for c in calls], [c["output"] for c in calls], method,
                             {}, lossy=True)


def test_telemetry_counts_bytes_like_the_ddp_hook(two):
    rows = two[0]["model"]["fp32"]["int8"]["rows"]
    assert len(rows) == 3 and {r["method"] for r in rows} == {"int8"}
    for r in rows:
        assert r["bytes_sent"] < 0.3 * r["bytes_original"]
        assert r["bytes_original"] == r["numel"] // 2 * 4  # the chunk for the other rank, fp32
        assert min(r["encode_s"], r["comm_s"], r["decode_s"]) >= 0
    none = two[0]["model"]["fp32"]["none"]["rows"]
    assert all(r["bytes_sent"] == r["bytes_original"] for r in none)


def test_checkpoint_resume_is_exact_and_needs_the_residuals(two):
    for run in two:
        res = run["resume"]
        assert all(torch.equal(a, b) for a, b in zip(res["straight"], res["resumed"]))
        assert not all(torch.equal(a, b) for a, b in zip(res["straight"], res["model_only"]))
        assert res["state"]["calls"] and res["state"]["compressor"]["residuals"]


def test_int8_trains_the_convergence_task_to_its_target_with_a_compression_ratio_over_3(two):
    for run in two:
        int8 = run["converge"]
        assert int8["accuracy"] >= int8["target"], int8["accuracy"]
        assert int8["rows"] > 0 and int8["ratio"] >= 3.3
    assert all(torch.equal(a, b) for a, b in zip(two[0]["converge"]["params"],
                                                 two[1]["converge"]["params"]))


def test_fsdp_training_bench_appends_a_row_per_method(two):
    bench = two[0]["bench"]
    frame = bench["frame"].set_index("method")
    assert sorted(frame.index) == ["fsdp", "int8"] and bench["left"] == set()
    assert (frame["t_iter_s"] > 0).all() and (frame["parallelism"] == "fsdp").all()
    assert frame.loc["fsdp", "ratio"] == 1.0
    assert 3.5 < frame.loc["int8", "ratio"] < 4.0  # 1 byte + a 4-byte scale per 256 values
    assert frame.loc["int8", "encode_s"] > 0 and frame.loc["int8", "world_size"] == 2


# -- HSDP on 4 ranks, a 2 x 2 mesh: ranks 0, 1 and 2, 3 shard; 0, 2 and 1, 3 are replicas -----
def test_hsdp_none_equals_native_hsdp_bit_for_bit(four):
    for run in four:
        assert all(torch.equal(a, b) for a, b in zip(run["hsdp"]["none"]["grads"],
                                                     run["hsdp"]["native"]))


@pytest.mark.parametrize("method", ["bf16", "int8"])
def test_hsdp_replica_all_reduce_within_bound_and_replicas_agree(four, method):
    for shard in (0, 1):
        replicas = [four[shard]["hsdp"][method]["log"], four[shard + 2]["hsdp"][method]["log"]]
        assert len(replicas[0]) == 3
        for calls in zip(*replicas):
            assert torch.equal(calls[0]["output"], calls[1]["output"])  # replicas agree
            inputs = [c["input"].double() for c in calls]
            err = (calls[0]["output"].double() * 2 - sum(inputs)).abs()
            # The DDP bf16 communicator sums the bf16 payloads in bf16: one more rounding.
            summed = torch.bfloat16 if method == "bf16" else torch.float32
            bound = error_bound(method, {}, inputs, summed)
            assert (err <= bound).all() and err.max() > 0
    rows = four[0]["hsdp"][method]["rows"]
    assert rows and all(r["bytes_sent"] < r["bytes_original"] for r in rows)


def test_hsdp_powersgd_compresses_the_shard_matrices_and_replicas_agree(four):
    rows = four[0]["hsdp"]["powersgd"]["rows"]
    middle = [r for r in rows if r["numel"] == 64 * 64 // 2 + 64 // 2]  # the 64x64 layer's shard
    assert middle and middle[0]["method"] == "powersgd" and middle[0]["uncompressed"] == ""
    assert middle[0]["bytes_sent"] < 0.25 * middle[0]["bytes_original"]
    for shard in (0, 1):
        for a, b in zip(four[shard]["hsdp"]["powersgd"]["grads"],
                        four[shard + 2]["hsdp"]["powersgd"]["grads"]):
            assert torch.equal(a, b) and torch.isfinite(a).all()


def test_hsdp_powersgd_resumes_bit_for_bit(four):
    for run in four:
        res = run["hsdp"]["resume"]
        assert all(torch.equal(a, b) for a, b in zip(res["straight"], res["resumed"]))
        assert "replica state of global rank" in res["refused"]


def test_hsdp_int8_inside_the_shard_group_int4_across_replicas(four):
    run = four[0]["hsdp"]["int8_int4"]
    assert {r["method"] for r in run["inside"]} == {"int8"}
    assert {r["method"] for r in run["across"]} == {"int4"}
    inside = sum(r["bytes_sent"] for r in run["inside"]) / sum(r["bytes_original"]
                                                                for r in run["inside"])
    across = sum(r["bytes_sent"] for r in run["across"]) / sum(r["bytes_original"]
                                                                for r in run["across"])
    assert inside < 0.3 and across < 0.16
    for a, b in zip(run["grads"], four[0]["hsdp"]["native"]):
        assert (a - b).abs().max() <= 0.6 * b.abs().max()
    for a, b in zip(run["grads"], four[2]["hsdp"]["int8_int4"]["grads"]):
        assert torch.equal(a, b)


def test_ranks_with_different_methods_all_raise_before_exchanging(two):
    for run in two:
        assert run["mismatch"] is not None
        assert "method" in run["mismatch"] and "'int8'" in run["mismatch"]
        assert "'int4'" in run["mismatch"]


def test_register_twice_is_refused_like_ddp(two):
    for run in two:
        assert run["twice"] is not None and "already called on this model" in run["twice"]


def test_bad_method_and_options_name_what_is_allowed():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="method='qsgd' is not allowed.*'int8'"):
        gradcomp.fsdp.register(model, "qsgd")
    with pytest.raises(ValueError, match="no FSDP module.*fully_shard"):
        gradcomp.fsdp.register(model, "int8")
    with pytest.raises(ValueError, match="block_size=0 is not allowed"):
        gradcomp.fsdp.register(model, "int8", block_size=0)
    with pytest.raises(TypeError, match="option 'ratio' is not accepted by 'int8'"):
        gradcomp.fsdp.register(model, "int8", ratio=0.1)
    with pytest.raises(ValueError, match="telemetry_limit=-1 is not allowed"):
        gradcomp.fsdp.register(model, "int8", telemetry_limit=-1)
    with pytest.raises(ValueError, match="across and across_options need mesh="):
        gradcomp.fsdp.register(model, "int8", across="int4")
    with pytest.raises(ValueError, match="mesh='x' is not allowed: give a 2-D DeviceMesh"):
        gradcomp.fsdp.register(model, "int8", mesh="x")
    with pytest.raises(ValueError, match="across='qsgd' is not allowed.*'int4'"):
        gradcomp.fsdp.register(model, "int8", mesh="x", across="qsgd")
    from gradcomp.evaluation.benches import train_fsdp
    with pytest.raises(ValueError, match=r"model='huge' is not allowed: .*built-in \(mlp"):
        train_fsdp.make_spec("huge")
    with pytest.raises(ValueError, match="method='qsgd' is not allowed: choose one of 'fsdp'"):
        train_fsdp.bench_train_fsdp(["qsgd"], model="tiny")
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        gradcomp.fsdp.register(object(), "int8")



# -- the 2-level reduce-scatter on 4 ranks: 2 nodes (ranks 0, 1 and 2, 3) of 2 ranks ---------
def test_two_level_none_equals_fsdp_up_to_summation_order(four):
    for run in four:
        for a, b in zip(run["levels"]["none"]["grads"], run["model"]["fp32"]["fsdp"]):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_two_level_int8_inside_int4_across_within_bound(four):
    logs = [run["levels"]["int8_int4"]["log"] for run in four]
    assert len(logs[0]) == 3
    worst = 0.0
    for calls in zip(*logs):
        inputs = [c["input"].double() for c in calls]
        top = [x.abs().max() for x in inputs]  # bounds every block's max of that rank
        # Step 1: each rank's int8 error; step 2: int4 of each node's partial sum, whose
        # values are at most the sum of the node's ranks' maxima.
        bound = sum(top) / 254 + (top[0] + top[1]) / 14 + (top[2] + top[3]) / 14
        bound = bound * (1 + 1e-5) + 1e-6
        for owner, call in enumerate(calls):
            exact = sum(x.view(4, -1)[owner] for x in inputs)
            err = (call["output"].double() - exact).abs().max()
            assert err <= bound
            worst = max(worst, err.item())
    assert worst > 0
    rows = four[0]["levels"]["int8_int4"]["rows"]
    assert {r["method"] for r in rows} == {"int8 (inside)", "int4 (across)"}
    flat = {r["numel"] for r in rows if r["method"] == "int8 (inside)"}
    # The two steps' uncompressed bytes add up to the flat reduce-scatter's (W - 1) C values.
    original = sum(r["bytes_original"] for r in rows)
    assert original == sum(n // 4 * 3 * 4 for n in flat)
    assert sum(r["bytes_sent"] for r in rows) < 0.3 * original


def test_an_fsdp_checkpoint_of_another_method_or_options_is_refused():
    saved = gradcomp.fsdp.FSDPState(gradcomp.compressor("int8")).state_dict()
    for other in (gradcomp.compressor("int4"), gradcomp.compressor("int8", error_feedback=True)):
        with pytest.raises(ValueError, match=r"saved by method 'int8' with options .*; this "
                           r"model runs 'int\d' with .*: register the same method and options"):
            gradcomp.fsdp.FSDPState(other).load_state_dict(saved)
    gradcomp.fsdp.FSDPState(gradcomp.compressor("int8")).load_state_dict(saved)
