"""Method-specific tests of the sparsifiers `topk`, `randomk` and `threshold` against plain
float64 references."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gradcomp
from gradcomp.compressors.base import work_dtype
from gradcomp.compressors.memory import finite_or_zero
from gradcomp.compressors.sparsify import _count, _scatter_mean
from gradcomp.kernels.sparse.reference import (TOPK_SAMPLE, index_dtype, sample_stride,
                                               topk_positions)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOL = {torch.float64: 1e-12, torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 1e-2}


def _gradient(n, seed, dtype=torch.float32, device="cpu", ties=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g, dtype=torch.float64)
    if ties:  # few distinct magnitudes, both signs: many ties
        x = torch.round(x * 2) / 2
    return x.to(dtype).to(device)


# -- counts ----------------------------------------------------------------------------------
def test_count_is_the_ceiling_without_float_noise():
    assert _count(0.01, 0) == 0
    assert _count(1e-9, 5) == 1  # at least one element
    assert _count(0.07, 100) == 7  # 0.07 * 100 == 7.000000000000001 in floats
    assert _count(0.015, 100) == 2
    assert _count(1.0, 13) == 13
    assert _count(0.01, 25_600_000) == 256_000
    for n in range(1, 300):
        for k in (1, n // 3 + 1, n):
            assert _count(k / n, n) == k


def test_index_dtype_and_wire_nbytes():
    assert index_dtype(2**31 - 1) == torch.int32 and index_dtype(2**31) == torch.int64
    n = 25_600_000
    assert gradcomp.compressor("topk").wire_nbytes(n) == 256_000 * 8
    assert gradcomp.compressor("topk").wire_nbytes(n, torch.float16) == 256_000 * 6
    assert gradcomp.compressor("randomk").wire_nbytes(n) == 256_000 * 4
    assert gradcomp.compressor("threshold").wire_nbytes(n) == 256_000 * 8
    assert gradcomp.compressor("topk").wire_nbytes(2**31) == math.ceil(0.01 * 2**31) * 12
    x = torch.randn(1000)
    p = gradcomp.compressor("topk", ratio=0.05).compress(x)
    assert p.tensors[0].dtype == x.dtype and p.tensors[1].dtype == torch.int32
    assert p.nbytes == 50 * 8


# -- topk ------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 400), frac=st.floats(0.001, 1.0), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**16), ties=st.booleans())
def test_topk_keeps_exactly_the_k_largest_magnitudes(device, n, frac, dtype, seed, ties):
    k = max(1, round(frac * n))
    c = gradcomp.compressor("topk", ratio=k / n)
    x = _gradient(n, seed, dtype, device, ties)
    values, indices = c.compress(x).tensors
    assert values.numel() == k and indices.numel() == k and indices.dtype == torch.int32
    idx = indices.long().cpu()
    assert idx.unique().numel() == k, "indices must be distinct"
    xd = x.cpu().double()
    assert torch.equal(values.cpu().double(), xd[idx]), "values must be the inputs at indices"
    # Reference: the k largest magnitudes from a float64 sort; with ties any choice among the
    # equal magnitudes is right, so compare the multisets of kept magnitudes.
    ref = xd.abs().sort(descending=True).values[:k]
    kept = xd[idx].abs().sort(descending=True).values
    assert torch.equal(kept, ref)
    dropped = torch.ones(n, dtype=torch.bool)
    dropped[idx] = False
    if dropped.any():
        assert xd[dropped].abs().max() <= kept.min()


def test_the_cpu_samples_stride_is_prime_so_it_sees_every_column_of_a_weight_gradient():
    assert [sample_stride(n) for n in (1, TOPK_SAMPLE, 2 * TOPK_SAMPLE - 1)] == [1, 1, 1]
    strides = {n: sample_stride(n) for n in (2 * TOPK_SAMPLE, 4 * TOPK_SAMPLE, 4_200_000)}
    assert strides == {2 * TOPK_SAMPLE: 2, 4 * TOPK_SAMPLE: 5, 4_200_000: 67}
    # a 1024-wide layer: every column is sampled (a stride of 64 would see 16 of them)
    columns = (torch.arange(0, 4_200_000, strides[4_200_000]) % 1024).unique().numel()
    assert columns == 1024


@pytest.mark.parametrize("seed", [0, 1])
def test_cpu_topk_is_exact_on_column_scaled_gradients(seed):
    """A weight gradient's magnitudes scale with its column (its input's size): the sampled
    threshold must still leave exactly the k largest."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.rand(1024, generator=g, dtype=torch.float64) ** 4
    x = (torch.randn(256, 1024, generator=g, dtype=torch.float64) * scale).float().flatten()
    k = _count(0.01, x.numel())
    ours = topk_positions(x, k)
    assert torch.equal(ours, torch.topk(x.abs(), k).indices.sort().values)


def test_cpu_topk_keeps_its_selection_buffers_per_key_and_selects_the_same():
    """The CPU selection's magnitudes and comparison live in buffers kept per key between
    calls (no 8 MB tensor made per call for the MLP's shard); they never change the result,
    are made again for another size or dtype, and are not pickled or copied."""
    import copy
    import pickle

    c = gradcomp.compressor("topk", ratio=0.01)
    x = _gradient(30_000, 0)
    x[7] = math.nan
    k = _count(0.01, x.numel())
    c.compress(x, "b")
    kept = c._scratch["b"][((30_000,), torch.float32)]  # the magnitudes' buffer
    for step in range(3):
        y = _gradient(30_000, step + 1)
        assert torch.equal(c.compress(y, "b").tensors[1].long(), topk_positions(y, k))
        assert c._scratch["b"][((30_000,), torch.float32)] is kept  # the same, not a new one
    assert 7 in c.compress(x, "b").tensors[1].tolist()  # NaN still counts as the largest
    z = _gradient(20_000, 9, torch.float64)
    assert torch.equal(topk_positions(z, 200, c._scratch["b"]),
                       torch.topk(z.abs(), 200).indices.sort().values)
    assert ((20_000,), torch.float64) in c._scratch["b"]  # made for float64
    for twin in (pickle.loads(pickle.dumps(c)), copy.deepcopy(c)):
        assert not hasattr(twin, "_scratch")
        assert torch.equal(twin.compress(x, "b").tensors[1], c.compress(x, "b").tensors[1])


@pytest.mark.parametrize("name", ["topk", "randomk", "threshold"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_decompress_places_values_at_indices_and_zeros_elsewhere(name, device, dtype):
    c = gradcomp.compressor(name, ratio=0.1)
    x = _gradient(777, 3, dtype, device).reshape(7, 111)
    p = c.compress(x)
    out = c.decompress(p)
    assert out.shape == x.shape and out.dtype == dtype and out.device == x.device
    idx = (p.meta["indices"] if name == "randomk" else p.tensors[1]).long().cpu()
    if name == "threshold":  # drop the zero-valued padding slots at index 0
        idx = idx[p.tensors[0].cpu() != 0]
    mask = torch.zeros(x.numel(), dtype=torch.bool)
    mask[idx] = True
    expected = torch.where(mask, x.reshape(-1).cpu(), torch.zeros((), dtype=dtype))
    assert torch.equal(out.reshape(-1).cpu(), expected)
    assert int(mask.sum()) == idx.numel()


# -- aggregation of the all-gathered methods --------------------------------------------------
def _ranks(name, world, n, dtype, device, **opts):
    """Compressors and payloads of `world` simulated ranks with different data and seeds."""
    comps, payloads = [], []
    for rank in range(world):
        c = gradcomp.compressor(name, **opts)
        c.set_rank(rank)
        comps.append(c)
        payloads.append(c.compress(_gradient(n, 100 + rank, dtype, device).reshape(-1, 1)))
    return comps, payloads


@pytest.mark.parametrize("name", ["topk", "threshold"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("world", [1, 2, 5])
def test_aggregate_is_the_mean_of_the_decompressions(name, device, dtype, world):
    opts = {"ratio": 0.2} if name == "topk" else {"ratio": 0.2, "sample_ratio": 0.3, "seed": 7}
    comps, payloads = _ranks(name, world, 301, dtype, device, **opts)
    # Every rank decodes every payload (with its own compressor: meta is rank-independent).
    ref = sum(comps[0].decompress(p).double() for p in payloads) / world
    for c in comps:
        agg = c.aggregate(payloads)
        assert agg.shape == (301, 1) and agg.dtype == dtype and agg.device.type == device
        torch.testing.assert_close(agg.double(), ref, rtol=TOL[dtype], atol=TOL[dtype])
    # Both accumulation orders give the same mean.
    a = _scatter_mean(payloads, ordered=False)
    b = _scatter_mean(payloads, ordered=True)
    torch.testing.assert_close(a.double(), ref, rtol=TOL[dtype], atol=TOL[dtype])
    torch.testing.assert_close(b.double(), ref, rtol=TOL[dtype], atol=TOL[dtype])
    if world <= 2 or device == "cpu":
        assert torch.equal(comps[0].aggregate(payloads), a)
    else:
        assert torch.equal(comps[0].aggregate(payloads), b)


@pytest.mark.parametrize("name", ["topk", "threshold", "qsgd"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("world", [1, 3])
def test_aggregate_into_a_used_bucket_equals_aggregate(name, device, dtype, world):
    """What the all-gather hook writes into the bucket (the sparsifiers sum straight into it;
    others copy `aggregate`) is `aggregate`'s result bit for bit, whatever the bucket held."""
    comps, payloads = _ranks(name, world, 301, dtype, device,
                             **({} if name == "qsgd" else {"ratio": 0.2}))
    bucket = _gradient(301, 5, dtype, device)
    into = comps[0].aggregate_into(payloads, bucket)
    assert into.data_ptr() == bucket.data_ptr()
    assert torch.equal(into, comps[0].aggregate(payloads).reshape(-1))


def test_aggregate_uses_one_index_add_on_cpu_and_one_per_payload_when_ordered(monkeypatch):
    calls = []
    original = torch.Tensor.index_add_

    def spy(self, *args, **kwargs):
        calls.append(args[1].numel())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "index_add_", spy)
    c = gradcomp.compressor("topk", ratio=0.1)
    payloads = [c.compress(torch.randn(100)) for _ in range(5)]
    c.aggregate(payloads)
    assert calls == [50]
    calls.clear()
    _scatter_mean(payloads, ordered=True)
    assert calls == [10] * 5


def test_infinity_outranks_the_largest_finite_value():
    for dtype in (torch.float32, torch.float64):
        big = torch.finfo(dtype).max
        x = torch.tensor([big, 1.0, -math.inf, 2.0], dtype=dtype)
        out = gradcomp.compressor("topk", ratio=0.25).decompress(
            gradcomp.compressor("topk", ratio=0.25).compress(x))
        assert torch.equal(out, torch.tensor([0, 0, -math.inf, 0], dtype=dtype))
        p = gradcomp.compressor("threshold", ratio=0.25, sample_ratio=1.0).compress(x)
        assert p.tensors[1].tolist() == [2]


def test_aggregate_sums_overlapping_indices():
    c = gradcomp.compressor("topk", ratio=0.5)
    x = torch.tensor([4.0, -3.0, 0.0, 1.0], dtype=torch.float64)
    y = torch.tensor([2.0, 0.0, 5.0, 0.5], dtype=torch.float64)
    agg = c.aggregate([c.compress(x), c.compress(y)])
    assert torch.equal(agg, torch.tensor([3.0, -1.5, 2.5, 0.0], dtype=torch.float64))


def test_aggregate_of_empty_tensors_and_no_payloads():
    c = gradcomp.compressor("topk")
    ps = [c.compress(torch.empty(0, 3)) for _ in range(3)]
    assert c.aggregate(ps).shape == (0, 3)
    with pytest.raises(ValueError, match="payload"):
        c.aggregate([])


# -- randomk ---------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_randomk_same_seed_same_indices_over_calls(device):
    from gradcomp.kernels.randomk import reference as permutation

    stream = torch.Generator().manual_seed(11)  # the shared CPU stream of seed 11
    a = gradcomp.compressor("randomk", ratio=0.05, seed=11)
    b = gradcomp.compressor("randomk", ratio=0.05, seed=11)
    b.set_rank(3)  # shared randomness ignores the rank
    other = gradcomp.compressor("randomk", ratio=0.05, seed=12)
    seen = []
    for step, n in enumerate([1000, 1000, 37, 5000]):
        pa = a.compress(_gradient(n, step, device=device))
        pb = b.compress(_gradient(n, 1000 + step, device=device))  # other data, same indices
        po = other.compress(_gradient(n, step, device=device))
        ia, ib = pa.meta["indices"], pb.meta["indices"]
        k = _count(0.05, n)
        assert ia.numel() == k and ia.unique().numel() == k and 0 <= ia.min() and ia.max() < n
        assert ia.dtype == torch.int64 and ia.device.type == device
        # pi(0), ..., pi(k - 1) for this call's 4 keys, in that order, on every device.
        expected = permutation.positions(n, k, permutation.draw_keys(stream))
        assert torch.equal(ia.cpu(), expected), "positions follow the keyed permutation"
        assert torch.equal(ia, ib)
        if n > 100:
            assert not torch.equal(ia, po.meta["indices"])
        assert len(pa.tensors) == 1 and pa.nbytes == k * 4  # only values on the wire
        seen.append(ia.cpu())
    assert not torch.equal(seen[0], seen[1]), "successive calls must draw new indices"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_randomk_sum_of_payloads_decodes_to_sum_of_decompressions(device, dtype):
    world, n = 4, 513
    comps = [gradcomp.compressor("randomk", ratio=0.1, seed=5) for _ in range(world)]
    for c in comps:  # advance every rank's stream once, identically
        c.compress(torch.zeros(10, device=device))
    payloads = [c.compress(_gradient(n, r, dtype, device)) for r, c in enumerate(comps)]
    summed = payloads[0].with_tensors([sum(p.tensors[0].double() for p in payloads).to(dtype)])
    total = sum(c.decompress(p).double() for c, p in zip(comps, payloads))
    for c, p in zip(comps, payloads):  # every rank decodes the sum with its own meta
        out = c.decompress(p.with_tensors(summed.tensors))
        torch.testing.assert_close(out.double(), total, rtol=TOL[dtype] * 4, atol=TOL[dtype] * 4)


@pytest.mark.parametrize("device", DEVICES)
def test_randomk_state_dict_reproduces_next_indices(device):
    a = gradcomp.compressor("randomk", ratio=0.02, seed=3)
    for n in (400, 900, 50):
        a.compress(torch.randn(n, device=device))
    b = gradcomp.compressor("randomk", ratio=0.02, seed=3)
    b.load_state_dict(a.state_dict())
    fresh = gradcomp.compressor("randomk", ratio=0.02, seed=3)
    for n in (1000, 1000, 7):
        ia = a.compress(torch.randn(n, device=device)).meta["indices"]
        ib = b.compress(torch.randn(n, device=device)).meta["indices"]
        assert torch.equal(ia, ib)
    assert not torch.equal(fresh.compress(torch.randn(1000, device=device)).meta["indices"],
                           a.compress(torch.randn(1000, device=device)).meta["indices"])


def test_randomk_shared_state_follows_the_shared_stream():
    a, b = (gradcomp.compressor("randomk", seed=1) for _ in range(2))
    assert a.shared_state() == b.shared_state()
    a.compress(torch.randn(100))
    assert a.shared_state() != b.shared_state()
    b.compress(torch.randn(100))
    assert a.shared_state() == b.shared_state()


def test_randomk_rejects_bad_seed():
    for bad in (-1, 1.5, "0", True):
        with pytest.raises(ValueError, match="seed"):
            gradcomp.compressor("randomk", seed=bad)


# -- threshold -------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_threshold_keeps_about_ratio_n_and_everything_above_the_threshold(device, seed):
    n = 1_000_000
    x = _gradient(n, 50 + seed, device=device)
    c = gradcomp.compressor("threshold", ratio=0.01, seed=seed)  # sample_ratio 0.01: 10000
    twin = gradcomp.compressor("threshold", ratio=0.01, seed=seed)
    twin.load_state_dict(c.state_dict())
    thr = twin.estimate_threshold(x).item()
    values, indices = c.compress(x).tensors
    assert indices.numel() == values.numel() == 10_000  # fixed capacity ceil(ratio * n)
    assert indices.dtype == torch.int32
    xd = x.cpu().double()
    passing = torch.nonzero(xd.abs() >= thr).squeeze(1)
    assert 0.5 * 10_000 <= passing.numel() <= 2 * 10_000, passing.numel()  # within 2x
    kept = min(passing.numel(), 10_000)
    idx = indices.long().cpu()
    assert torch.equal(idx[:kept], passing[:kept]), "the elements >= threshold, in index order"
    assert torch.equal(values.cpu().double()[:kept], xd[passing[:kept]])
    assert (values[kept:] == 0).all() and (idx[kept:] == 0).all(), "padding: zeros at index 0"


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 300), frac=st.floats(0.001, 1.0), seed=st.integers(0, 2**16),
       dtype=st.sampled_from(DTYPES))
def test_threshold_with_the_whole_tensor_as_sample_is_topk_with_ties(n, frac, seed, dtype):
    """sample_ratio=1: the threshold is the exact k-th largest magnitude."""
    k = max(1, round(frac * n))
    x = _gradient(n, seed, dtype, ties=True)
    values, indices = gradcomp.compressor("threshold", ratio=k / n, sample_ratio=1.0,
                                          seed=seed).compress(x).tensors
    mags = x.double().abs()
    kth = mags.sort(descending=True).values[k - 1]
    passing = torch.nonzero(mags >= kth).squeeze(1)  # at least k (ties may add more)
    assert indices.numel() == k
    assert torch.equal(indices.long(), passing[:k])


def test_threshold_randomness_is_local_and_seeded():
    x = torch.randn(20_000)
    a0 = gradcomp.compressor("threshold", seed=4)
    b0 = gradcomp.compressor("threshold", seed=4)
    a1 = gradcomp.compressor("threshold", seed=4)
    a1.set_rank(1)
    ia = a0.compress(x).tensors[1]
    assert torch.equal(ia, b0.compress(x).tensors[1])
    assert not torch.equal(ia, a1.compress(x).tensors[1])  # another rank, another sample


def test_threshold_validates_sample_ratio():
    for bad in (0, 1.5, -1, "0.1"):
        with pytest.raises(ValueError, match="sample_ratio"):
            gradcomp.compressor("threshold", sample_ratio=bad)


# -- non-finite input ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["topk", "threshold"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gathered_methods_always_send_non_finite_values_in_place(name, bad, device, dtype):
    c = gradcomp.compressor(name, ratio=0.01)
    x = _gradient(5000, 1, dtype, device) * 100
    x[1234] = bad
    p = c.compress(x)
    out = c.decompress(p)
    finite = torch.isfinite(out)
    assert not finite[1234] and finite.sum() == out.numel() - 1
    assert torch.equal(out[1234].isnan(), torch.tensor(math.isnan(bad), device=device))
    agg = c.aggregate([p, c.compress(_gradient(5000, 2, dtype, device))])
    assert not torch.isfinite(agg[1234])


def test_topk_with_more_non_finite_values_than_k_sends_k_of_them():
    x = torch.randn(100)
    x[[3, 50, 77]] = torch.tensor([math.nan, math.inf, -math.inf])
    out = gradcomp.compressor("topk", ratio=0.02).decompress(
        gradcomp.compressor("topk", ratio=0.02).compress(x))
    assert (~torch.isfinite(out)).sum() == 2
    assert torch.isfinite(out[[i for i in range(100) if i not in (3, 50, 77)]]).all()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_randomk_turns_all_values_nan_on_non_finite_input(bad, device, dtype):
    x = _gradient(5000, 1, dtype, device)
    x[4321] = bad
    p = gradcomp.compressor("randomk", ratio=0.01).compress(x)
    assert p.tensors[0].isnan().all()
    out = gradcomp.compressor("randomk", ratio=0.01).decompress(p)
    assert out.isnan().sum() == _count(0.01, 5000)
    clean = gradcomp.compressor("randomk", ratio=0.01).compress(_gradient(5000, 1, dtype, device))
    assert torch.isfinite(clean.tensors[0]).all()


# -- error feedback --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["topk", "randomk", "threshold"])
def test_error_feedback_residual_plus_output_is_input(name):
    c = gradcomp.compressor(name, ratio=0.1, error_feedback=True)
    x = _gradient(1000, 9, torch.float64).reshape(10, 100)
    out = c.decompress(c.compress(x, key="w"))
    assert torch.equal(c.residuals["w"] + out, x)
    assert (out != 0).sum() >= 100 if name != "randomk" else (out != 0).sum() == 100
    y = _gradient(1000, 10, torch.float64).reshape(10, 100)
    corrected = y + c.residuals["w"]
    out2 = c.decompress(c.compress(y, key="w"))
    torch.testing.assert_close(c.residuals["w"] + out2, corrected, rtol=0, atol=1e-15)


def _awkward(n, seed, dtype, device):
    """A gradient with -0.0, +-0.0 ties, NaN and +-Inf among normal values."""
    x = _gradient(n, seed, torch.float64)
    x[::7] = -0.0
    x[3::11] = 0.0
    x[5], x[9], x[13] = math.nan, math.inf, -math.inf
    return x.to(dtype).to(device)


@pytest.mark.parametrize("name", ["topk", "randomk"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ratio", [0.05, 0.5, 1.0])
def test_sparse_left_over_equals_corrected_minus_decoded_bit_for_bit(name, device, dtype,
                                                                      ratio):
    """Error feedback's residual of top-k and random-k is `corrected` with the sent positions
    subtracted in its own buffer: the same bits as the dense subtraction, signed zeros
    included, over steps that carry the residual."""
    c = gradcomp.compressor(name, ratio=ratio, error_feedback=True)
    for step in range(3):
        x = _awkward(997, step, dtype, device)
        before = c.residuals.get("w")
        corrected = (x.to(work_dtype(dtype)) if before is None else before.clone() + x)
        payload = c.compress(x, key="w")
        expected = finite_or_zero(corrected - c.inner.decompress(payload))
        got = c.residuals["w"]
        assert got.dtype == expected.dtype and torch.equal(got, expected), step
        assert torch.equal(torch.signbit(got), torch.signbit(expected)), step


def test_a_received_buffer_shorter_than_declared_is_refused():
    from gradcomp.comm import wire
    like = [torch.zeros(4), torch.zeros(4, dtype=torch.int64)]
    with pytest.raises(RuntimeError, match="holds 40 bytes where 48 were declared"):
        wire.unpack_bytes(torch.zeros(40, dtype=torch.uint8), like)
