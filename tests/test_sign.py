"""signsgd, efsignsgd, onebit against plain float64 references."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gradcomp
from gradcomp.compressors import option_names

METHODS = ["signsgd", "efsignsgd", "onebit"]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
NAN = float("nan")

# Values with many zeros, negative zeros and ties in magnitude.
VALUES = st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, -2.0]),
                   st.floats(-1e3, 1e3, allow_nan=False, width=32))
VECTORS = st.lists(VALUES, min_size=0, max_size=70)


def ref_bits(x):
    """1 where x >= 0 (so 0.0 and -0.0 both give 1), as Python ints."""
    return [1 if v >= 0 else 0 for v in x.double().tolist()]


def ref_pack(bits):
    """Independent MSB-first packing: bit i goes to byte i // 8, bit 7 - i % 8."""
    out = [0] * math.ceil(len(bits) / 8)
    for i, b in enumerate(bits):
        out[i // 8] |= b << (7 - i % 8)
    return out


def ref_blocks(n, block_size):
    size = n if block_size == 0 else block_size
    if n == 0:
        return [(0, 0)] if block_size == 0 else []
    return [(s, min(s + size, n)) for s in range(0, n, size)]


# -- sign bits and packing ------------------------------------------------------------------
@pytest.mark.parametrize("name", METHODS)
@settings(max_examples=25, deadline=None)
@given(values=VECTORS, dtype=st.sampled_from([torch.float32, torch.float64, torch.float16]))
def test_sign_bits_are_exact_and_packed_one_bit_per_value(name, values, dtype):
    x = torch.tensor(values, dtype=dtype)
    payload = gradcomp.compressor(name).compress(x)
    packed = payload.tensors[0]
    assert packed.dtype == torch.uint8
    assert packed.tolist() == ref_pack(ref_bits(x))
    assert all(t.dtype == torch.float32 for t in payload.tensors[1:])


def test_zero_and_negative_zero_are_sent_as_plus_one():
    x = torch.tensor([0.0, -0.0, -1e-30, 1e-30, -3.0, 2.0])
    out = gradcomp.compressor("signsgd").decompress(gradcomp.compressor("signsgd").compress(x))
    assert out.tolist() == [1.0, 1.0, -1.0, 1.0, -1.0, 1.0]
    ef = gradcomp.compressor("efsignsgd")
    assert (ef.decompress(ef.compress(x))[:2] > 0).all()  # -0.0 decodes to +scale
    ob = gradcomp.compressor("onebit")
    out = ob.decompress(ob.compress(x)).double()
    assert out[1] == out[0] == out[3] == pytest.approx((1e-30 + 2.0) / 4, rel=1e-6)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1000, 4097])
@pytest.mark.parametrize("block_size", [0, 1, 3, 64])
def test_bytes_on_wire(n, block_size):
    x = torch.randn(n)
    bits = math.ceil(n / 8)
    scales = len(ref_blocks(n, block_size))
    expected = {"signsgd": bits + 4, "efsignsgd": bits + 4 * scales, "onebit": bits + 8 * scales}
    for name in METHODS:
        c = gradcomp.compressor(name) if name == "signsgd" else \
            gradcomp.compressor(name, block_size=block_size)
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            assert c.compress(x.to(dtype)).nbytes == expected[name], (name, dtype)
            assert c.wire_nbytes(n, dtype) == expected[name]


def test_bytes_on_wire_of_a_resnet50_sized_gradient():
    n = 25_600_000
    assert gradcomp.compressor("signsgd").wire_nbytes(n) == 3_200_004
    assert gradcomp.compressor("efsignsgd").wire_nbytes(n) == 3_200_004
    assert gradcomp.compressor("onebit").wire_nbytes(n) == 3_200_008
    assert gradcomp.compressor("efsignsgd", block_size=1024).wire_nbytes(n) == 3_200_000 + 4 * 25_000


@pytest.mark.parametrize("name", ["efsignsgd", "onebit"])
@pytest.mark.parametrize("bad", [-1, 1.5, True, "4", None])
def test_block_size_is_validated(name, bad):
    with pytest.raises(ValueError, match="block_size"):
        gradcomp.compressor(name, block_size=bad)


def test_options():
    assert gradcomp.compressor("signsgd").options() == {}
    assert gradcomp.compressor("efsignsgd", block_size=8).options() == {"block_size": 8}
    assert option_names("onebit") == ["block_size"]
    assert option_names("signsgd") == []


# -- signsgd and the majority vote ----------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_signsgd_decodes_plus_minus_one_and_flags_non_finite(device):
    c = gradcomp.compressor("signsgd")
    x = torch.tensor([3.0, -2.0, 0.0, -0.5], device=device)
    p = c.compress(x)
    assert p.tensors[1].tolist() == [1.0]
    assert c.decompress(p).tolist() == [1.0, -1.0, 1.0, -1.0]
    for bad in (NAN, float("inf"), float("-inf")):
        y = x.clone()
        y[1] = bad
        p = c.compress(y)
        assert math.isnan(p.tensors[1].item())
        assert c.decompress(p).isnan().all()


@pytest.mark.parametrize("workers", [3, 4])
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(0, 50),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]))
def test_majority_vote_matches_reference(workers, device, seed, n, dtype):
    g = torch.Generator().manual_seed(seed)
    # Small integers: many zeros (sent as +1) and, with 4 workers, many tied votes.
    xs = [torch.randint(-2, 3, (n,), generator=g).to(dtype) for _ in range(workers)]
    c = gradcomp.compressor("signsgd")
    out = c.aggregate([c.compress(x.to(device), key=i) for i, x in enumerate(xs)])
    votes = [sum(1 if x[i].item() >= 0 else -1 for x in xs) for i in range(n)]
    expected = [float((v > 0) - (v < 0)) for v in votes]
    assert out.dtype == dtype and out.shape == (n,) and out.device.type == device
    assert out.double().cpu().tolist() == expected
    if workers == 4 and n >= 30:
        assert 0.0 in expected  # ties happen and give 0


def test_majority_vote_keeps_the_shape():
    c = gradcomp.compressor("signsgd")
    xs = [torch.randn(3, 4, 5) for _ in range(3)]
    out = c.aggregate([c.compress(x) for x in xs])
    ref = torch.sign(sum(torch.where(x >= 0, 1.0, -1.0) for x in xs))
    assert torch.equal(out, ref)


# -- efsignsgd ------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=25, deadline=None)
@given(values=VECTORS, block_size=st.sampled_from([0, 1, 4, 7, 32]),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.float16]))
def test_efsignsgd_scale_is_mean_abs_per_block(device, values, block_size, dtype):
    x = torch.tensor(values, dtype=dtype)
    c = gradcomp.compressor("efsignsgd", block_size=block_size)
    p = c.compress(x.to(device))
    ref = x.double().tolist()
    blocks = ref_blocks(len(ref), block_size)
    scales = [sum(abs(v) for v in ref[s:e]) / max(e - s, 1) for s, e in blocks]
    got = p.tensors[1].double().cpu()
    torch.testing.assert_close(got, torch.tensor(scales, dtype=torch.float64),
                               rtol=1e-6, atol=0)
    out = c.decompress(p).double().cpu()
    expected = [0.0] * len(ref)
    for (s, e), scale in zip(blocks, got.tolist()):
        for i in range(s, e):
            expected[i] = scale if ref[i] >= 0 else -scale
    assert out.tolist() == torch.tensor(expected).to(dtype).double().tolist()


# -- onebit ---------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=25, deadline=None)
@given(values=VECTORS, block_size=st.sampled_from([0, 1, 4, 7, 32]),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]))
def test_onebit_means_per_block(device, values, block_size, dtype):
    x = torch.tensor(values, dtype=dtype)
    c = gradcomp.compressor("onebit", block_size=block_size)
    p = c.compress(x.to(device))
    ref = x.double().tolist()
    means = []
    for s, e in ref_blocks(len(ref), block_size):
        pos = [v for v in ref[s:e] if v >= 0]
        neg = [v for v in ref[s:e] if v < 0]
        means += [sum(pos) / len(pos) if pos else 0.0, sum(neg) / len(neg) if neg else 0.0]
    got = p.tensors[1].double().cpu()
    torch.testing.assert_close(got, torch.tensor(means, dtype=torch.float64),
                               rtol=1e-6, atol=1e-30)
    out = c.decompress(p).double().cpu().tolist()
    for (b, (s, e)) in enumerate(ref_blocks(len(ref), block_size)):
        for i in range(s, e):
            want = got[2 * b] if ref[i] >= 0 else got[2 * b + 1]
            assert out[i] == torch.tensor(want.item()).to(dtype).item()


def test_onebit_block_with_one_sign_only_sends_zero_for_the_empty_group():
    c = gradcomp.compressor("onebit", block_size=3)
    p = c.compress(torch.tensor([1.0, 2.0, 3.0, -1.0, -5.0, -6.0, 0.0], dtype=torch.float64))
    assert p.tensors[1].tolist() == [2.0, 0.0, 0.0, -4.0, 0.0, 0.0]


# -- non-finite input -----------------------------------------------------------------------
@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("bad", [NAN, float("inf"), float("-inf")])
@pytest.mark.parametrize("block_size", [0, 5])
def test_non_finite_input_stays_non_finite(name, bad, block_size):
    opts = {} if name == "signsgd" else {"block_size": block_size}
    c = gradcomp.compressor(name, **opts)
    xs = [torch.randn(23, dtype=torch.float64) for _ in range(3)]
    xs[1][12] = bad
    decoded = c.decompress(c.compress(xs[1]))
    assert not torch.isfinite(decoded[12])  # at the same position
    if block_size == 5 and name != "signsgd":
        assert torch.isfinite(decoded[:10]).all()  # other blocks are unaffected
    out = c.aggregate([c.compress(x, key=i) for i, x in enumerate(xs)])
    assert not torch.isfinite(out[12])
    if name == "signsgd":
        assert out.isnan().all()


# -- error feedback -------------------------------------------------------------------------
@pytest.mark.parametrize("block_size", [0, 6])
def test_efsignsgd_error_feedback_keeps_what_was_dropped(block_size):
    c = gradcomp.compressor("efsignsgd", error_feedback=True, block_size=block_size)
    g = torch.Generator().manual_seed(0)
    corrected = torch.zeros(41, dtype=torch.float64)
    for step in range(3):
        x = torch.randn(41, generator=g, dtype=torch.float64)
        corrected = corrected + x
        out = c.decompress(c.compress(x, key="w"))
        assert out.dtype == torch.float64
        torch.testing.assert_close(c.residuals["w"] + out, corrected, rtol=0, atol=1e-12)
        corrected = c.residuals["w"].clone()
        assert corrected.abs().sum() > 0  # the compression really dropped something
