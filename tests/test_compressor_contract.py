"""The contract every registered compressor keeps, checked for all of them with defaults."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gradcomp
from gradcomp.compressors import option_names

METHODS = gradcomp.names()
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SHAPES = [(0,), (1,), (7,), (3, 5), (4, 3, 2), (2, 3, 2, 3), (1000,)]


def test_all_methods_of_the_issue_are_registered():
    wanted = {"none", "fp16", "bf16", "topk", "randomk", "threshold", "powersgd", "qsgd", "int8",
              "int4", "terngrad", "signsgd", "efsignsgd", "onebit", "natural"}
    assert wanted <= set(METHODS)


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("error_feedback", [False, True])
@settings(max_examples=12, deadline=None)
@given(shape=st.sampled_from(SHAPES), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16),
       transpose=st.booleans())
def test_roundtrip_keeps_shape_dtype_device(name, error_feedback, shape, dtype, seed, transpose):
    c = gradcomp.compressor(name, error_feedback=error_feedback)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g).to(dtype)
    if transpose and x.dim() >= 2:
        x = x.transpose(0, 1)  # non-contiguous
    before = x.clone()
    payload = c.compress(x, key="k")
    out = c.decompress(payload)
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    assert torch.equal(x, before), "compress must not modify its input"
    assert payload.nbytes == sum(t.numel() * t.element_size() for t in payload.tensors)
    if x.numel() and x.abs().max() > 0:
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", METHODS)
def test_nbytes_formula_matches_payload(name):
    c = gradcomp.compressor(name)
    for n in (1, 9, 1000, 4097):
        for dtype in DTYPES:
            x = torch.randn(n).to(dtype)
            got = c.compress(x, key=("n", n)).nbytes
            expected = c.wire_nbytes(n, dtype)
            assert got == expected, (n, dtype)


@pytest.mark.parametrize("name", [m for m in METHODS if m != "none"])
def test_compresses_a_large_gradient(name):
    c = gradcomp.compressor(name)
    n = 1 << 16
    assert c.wire_nbytes(n) < 4 * n
    if name != "powersgd":  # needs a matrix shape to compress
        assert c.compress(torch.randn(n)).nbytes < 4 * n


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_input_is_never_hidden(name, bad):
    c = gradcomp.compressor(name)
    x = torch.randn(64, 32)
    x[5, 7] = bad
    out = c.decompress(c.compress(x))
    assert not torch.isfinite(out).all(), f"{name} turned {bad} into finite numbers"


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.complex64, torch.bool])
def test_rejects_non_float_tensors(name, dtype):
    c = gradcomp.compressor(name)
    with pytest.raises(TypeError, match="dtype"):
        c.compress(torch.zeros(8, dtype=dtype))


def test_unknown_method_lists_valid_names():
    with pytest.raises(ValueError, match="topk.*powersgd|powersgd.*topk"):
        gradcomp.compressor("top-k")


def test_unknown_option_names_the_valid_ones():
    with pytest.raises(TypeError, match="'levels' is not accepted by 'topk'.*ratio"):
        gradcomp.compressor("topk", levels=3)


@pytest.mark.parametrize("name", [m for m in METHODS if "ratio" in option_names(m)])
@pytest.mark.parametrize("ratio", [0, -0.1, 1.5, float("nan"), "0.1"])
def test_ratio_outside_unit_interval_is_rejected(name, ratio):
    with pytest.raises(ValueError, match="ratio"):
        gradcomp.compressor(name, ratio=ratio)


@pytest.mark.parametrize("name", METHODS)
def test_state_dict_round_trip_reproduces_next_output(name):
    """A fresh compressor loaded with another's state continues exactly as the original."""
    a = gradcomp.compressor(name, error_feedback=True)
    x = torch.randn(40, 30)
    for _ in range(3):
        a.decompress(a.compress(x, key=0))
    b = gradcomp.compressor(name, error_feedback=True)
    b.load_state_dict(a.state_dict())
    out_a = a.decompress(a.compress(x, key=0))
    out_b = b.decompress(b.compress(x, key=0))
    assert torch.equal(out_a, out_b)


@pytest.mark.parametrize("name", METHODS)
def test_error_feedback_residual_plus_output_is_input(name):
    c = gradcomp.compressor(name, error_feedback=True)
    x = torch.randn(30, 20, dtype=torch.float64)
    out = c.decompress(c.compress(x, key="w"))
    torch.testing.assert_close(c.residuals["w"].reshape(x.shape) + out, x, rtol=0, atol=1e-12)
    # The next call compresses gradient plus residual.
    y = torch.randn(30, 20, dtype=torch.float64)
    corrected = y + c.residuals["w"].reshape(y.shape)
    out2 = c.decompress(c.compress(y, key="w"))
    torch.testing.assert_close(c.residuals["w"].reshape(y.shape) + out2, corrected, rtol=0,
                               atol=1e-12)


@pytest.mark.parametrize("name", METHODS)
def test_aggregation_is_declared_and_consistent(name):
    c = gradcomp.compressor(name)
    assert c.aggregation in ("allreduce", "allgather")
    xs = [torch.randn(16, 8, dtype=torch.float64) for _ in range(3)]
    if c.aggregation == "allgather":
        payloads = [c.compress(x, key=i) for i, x in enumerate(xs)]
        agg = c.aggregate(payloads)
        assert agg.shape == xs[0].shape and agg.dtype == xs[0].dtype
    elif name != "powersgd":  # summed payloads decode to the summed decompressions
        states = []
        for x in xs:
            fresh = gradcomp.compressor(name)
            p = fresh.compress(x)
            states.append((fresh, p))
        summed = states[0][1].with_tensors(
            [sum(p.tensors[i] for _, p in states) for i in range(len(states[0][1].tensors))])
        total = sum(f.decompress(p) for f, p in states)
        # Sums are rounded in the wire dtype (fp16/bf16): allow a few ulps of bf16.
        torch.testing.assert_close(states[0][0].decompress(summed), total, rtol=2e-2, atol=2e-2)


def test_wire_nbytes_of_resnet50_sized_gradient_is_exact_for_casts():
    n = 25_600_000
    assert gradcomp.compressor("none").wire_nbytes(n) == 4 * n
    assert gradcomp.compressor("fp16").wire_nbytes(n) == 2 * n
    assert gradcomp.compressor("bf16").wire_nbytes(n) == 2 * n
    assert gradcomp.compressor("signsgd").wire_nbytes(n) == n // 8 + 4  # bits + finite flag
