"""Quantizers (qsgd, int8, int4, terngrad, natural) against plain float64 references.

Every method is described by one float64 reference, `grid(...)`: per element an `offset`, a signed
`step` and a real coordinate `r` with ``offset + step * r == x`` (up to the float32 rounding of the
scales on the wire) and bounds [lo, hi] for the integer k the quantizer picks. Round-to-nearest
picks k = round(r); stochastic rounding picks floor(r) or floor(r) + 1, unbiased, with variance
``step**2 * f * (1 - f)``, f = frac(r).
"""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

import gradcomp
from gradcomp.kernels.packing import reference as bitpack

N_BIG = 25_600_000
F64 = torch.float64


def f32(t):
    """Rounded to float32, as a scale on the wire is, back in float64."""
    return t.to(torch.float32).to(F64)


def blocks64(x, bs, fill=0.0):
    x = x.to(F64).reshape(-1)
    nb = -(-x.numel() // bs)
    return torch.cat([x, x.new_full((nb * bs - x.numel(),), fill)]).view(nb, bs)


def per_element(v, bs, n):
    return v.repeat_interleave(bs)[:n]


def grid(name, x, **opt):
    """float64 reference of method `name`: (offset, step, r, lo, hi, mag) per element; `mag` is
    the magnitude the float32 rounding tolerance is relative to."""
    x = x.to(F64).reshape(-1)
    n = x.numel()
    zero = torch.zeros_like(x)
    if name == "natural":
        m, e = torch.frexp(x.abs())
        low = torch.ldexp(torch.ones_like(x), e - 1)  # 2**floor(log2|x|)
        sgn = torch.sign(x)
        r = torch.where(x != 0, x.abs() / low - 1, zero)
        return sgn * low, sgn * low, r, 0, 1, x.abs()
    if name == "terngrad":
        bs = opt.get("block_size", 0) or n
    elif name == "qsgd":
        bs = opt.get("block_size", 512)
    else:
        bs = opt.get("block_size", 256)
    X = blocks64(x, bs)
    amax = per_element(X.abs().amax(1), bs, n)
    if name == "qsgd":
        levels = opt.get("levels", 15)
        norm = per_element(f32(X.norm(dim=1)), bs, n)
        r = torch.where(norm > 0, x.abs() / norm * levels, zero)
        return zero, torch.sign(x) * norm / levels, r, 0, levels, amax
    if name == "terngrad":
        s = per_element(f32(X.abs().amax(1)), bs, n)
        r = torch.where(s > 0, x.abs() / s, zero)
        return zero, torch.sign(x) * s, r, 0, 1, amax
    bits = {"int8": 8, "int4": 4}[name]
    if opt.get("scheme", "absmax") == "absmax":
        qmax = 2 ** (bits - 1) - 1
        scale = per_element(f32(X.abs().amax(1) / qmax), bs, n)
        r = torch.where(scale > 0, x / scale, zero)
        return zero, scale, r, -qmax, qmax, amax
    top = 2**bits - 1
    lo = per_element(f32(blocks64(x, bs, math.inf).amin(1)), bs, n)  # the block's own values
    hi = per_element(f32(blocks64(x, bs, -math.inf).amax(1)), bs, n)
    step = (hi - lo) / top
    r = torch.where(step > 0, (x - lo) / step, zero)
    return lo, step, r, 0, top, amax


def roundtrip(c, x):
    return c.decompress(c.compress(x))


BLOCKED = [  # (name, options) with a small block so that small tensors span several blocks
    ("qsgd", {"block_size": 16}),
    ("qsgd", {"block_size": 16, "levels": 1}),
    ("qsgd", {"block_size": 16, "levels": 127}),
    ("int8", {"block_size": 16}),
    ("int8", {"block_size": 16, "scheme": "minmax"}),
    ("int4", {"block_size": 16}),
    ("int4", {"block_size": 16, "scheme": "minmax"}),
]
DETERMINISTIC = [(n, {**o, "stochastic": False}) for n, o in BLOCKED]
STOCHASTIC = [(n, {**o, "stochastic": True}) for n, o in BLOCKED] + [
    ("terngrad", {}), ("terngrad", {"block_size": 16}), ("natural", {})]


def cid(cfg):
    name, opt = cfg
    return name + "-" + "-".join(f"{k}={v}" for k, v in opt.items() if k != "block_size")


# -- unbiasedness -------------------------------------------------------------------------------
D = 2000  # draws


def bias_violations(name, opt, x, outs):
    """Elements whose mean over the draws `outs` (D, n) is further from x than 5 standard
    deviations of that mean (+ float32 rounding)."""
    offset, step, r, lo, hi, mag = grid(name, x, **opt)
    f = r - r.floor()
    sd = (step.abs() * (f * (1 - f)).sqrt()) / math.sqrt(outs.shape[0])
    err = (outs.to(F64).mean(0) - x.to(F64)).abs()
    return (err > 5 * sd + 2e-6 * mag).sum().item()


def sample(name, opt, x, stochastic=True):
    """D independent decompressions of x in one call: x tiled D times (x spans whole blocks, and
    tiling keeps the whole-tensor max of terngrad's block_size=0)."""
    c = gradcomp.compressor(name, **opt)
    return roundtrip(c, x.repeat(D)).view(D, -1)


@pytest.mark.parametrize("cfg", STOCHASTIC, ids=cid)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_stochastic_quantizers_are_unbiased(cfg, dtype):
    name, opt = cfg
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(32, generator=g) * torch.logspace(-2, 2, 32)).to(dtype)
    x[5] = 0.0
    outs = sample(name, opt, x)
    assert bias_violations(name, opt, x, outs) == 0
    # The mean really moved towards x: not every draw is the same value.
    assert (outs.std(0) > 0).sum() > 16
    # Positive control: the same criterion rejects a biased quantizer (round to nearest).
    offset, step, r, lo, hi, _ = grid(name, x, **opt)
    nearest = (offset + step * r.round().clamp(lo, hi)).expand(D, -1)
    assert bias_violations(name, opt, x, nearest) > 0


@pytest.mark.parametrize("cfg", DETERMINISTIC, ids=cid)
def test_round_to_nearest_is_biased_so_the_unbiasedness_test_can_fail(cfg):
    name, opt = cfg
    x = torch.randn(32, generator=torch.Generator().manual_seed(3))
    outs = sample(name, opt, x)
    assert torch.equal(outs[0], outs[-1])
    assert bias_violations(name, opt, x, outs) > 0


def test_natural_is_unbiased_below_the_normal_range():
    tiny = torch.tensor([1e-39, -3e-40, 1e-44, 2.0**-127, 1e-45] * 2, dtype=torch.float32)
    assert (tiny.abs() < 2.0**-126).all()
    outs = sample("natural", {}, tiny).to(F64)
    smallest = 2.0**-126
    assert ((outs == 0) | (outs.abs() == smallest)).all()
    p_up = tiny.to(F64).abs() / smallest
    sd = smallest * (p_up * (1 - p_up)).sqrt() / math.sqrt(D)
    assert ((outs.mean(0) - tiny.to(F64)).abs() <= 5 * sd).all()
    assert (outs[:, :2] != 0).any(0).all()  # the larger ones do round up sometimes


# -- round to nearest against the float64 formula -----------------------------------------------
@pytest.mark.parametrize("cfg", DETERMINISTIC + STOCHASTIC, ids=cid)
@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 200), bs=st.integers(1, 40), exp10=st.integers(-30, 30),
       zeros=st.booleans(), seed=st.integers(0, 2**16), dtype=st.sampled_from([torch.float32,
                                                                            torch.float64]))
def test_matches_float64_reference_and_error_bound(cfg, n, bs, exp10, zeros, seed, dtype):
    name, opt = cfg
    opt = {**opt, "block_size": bs} if "block_size" in opt else dict(opt)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g, dtype=F64) * 10.0**exp10
    if zeros:
        x[torch.rand(n, generator=g) < 0.3] = 0.0
    x = x.to(dtype)
    out = roundtrip(gradcomp.compressor(name, **opt), x).to(F64)
    offset, step, r, lo, hi, mag = grid(name, x, **opt)
    x = x.to(F64)
    tol = 2e-6 * mag + 1e-300
    if opt.get("stochastic", True):
        # One of the two neighbouring grid points.
        k = ((out - offset) / torch.where(step != 0, step, 1)).round()
        assert (((out - (offset + step * k)).abs() <= tol) | (step == 0)).all()
        assert ((k >= r.floor() - 1e-3) & (k <= r.ceil() + 1e-3) | (step == 0)).all()
        assert ((x - out).abs() <= step.abs() + tol).all()
    else:
        ref = offset + step * r.round().clamp(lo, hi)
        ok = (out - ref).abs() <= tol
        # float32 and float64 arithmetic may round differently only at a tie.
        tie = ((r - r.floor()) - 0.5).abs() < 1e-3
        assert (ok | tie).all()
        assert ((x - out).abs() <= step.abs() / 2 + tol).all()  # |x - q| <= step / 2
    if opt.get("scheme") != "minmax":
        assert (out[x == 0] == 0).all(), "zero stays zero"


def test_qsgd_norm_neither_overflows_nor_underflows_in_float32():
    c = gradcomp.compressor("qsgd", stochastic=False)
    for scale in (1e30, 1e-30, 1e-42):
        x = torch.tensor([3.0, -4.0, 0.0, 1.0]) * scale
        out = roundtrip(c, x).to(F64)
        offset, step, r, lo, hi, _ = grid("qsgd", x, stochastic=False)
        ref = step * r.round()
        assert torch.isfinite(out).all() and (out != 0).sum() >= 2
        if scale > 1e-40:  # a subnormal norm loses precision, but stays finite and non-zero
            torch.testing.assert_close(out, ref, rtol=1e-6, atol=0)


def test_minmax_and_absmax_differ_where_they_should():
    # A block of positive values: minmax spends its whole grid on [min, max], absmax on [-max, max].
    x = torch.linspace(10.0, 11.0, 64)
    for name, top, qmax in (("int8", 255, 127), ("int4", 15, 7)):
        mm = roundtrip(gradcomp.compressor(name, block_size=64, scheme="minmax"), x)
        am = roundtrip(gradcomp.compressor(name, block_size=64), x)
        assert (x - mm).abs().max() <= (1.0 / top) / 2 * (1 + 1e-4)
        assert (x - am).abs().max() <= (11.0 / qmax) / 2 * (1 + 1e-4)
        assert (x - mm).abs().max() < (x - am).abs().max() / 5
        assert mm.min() == 10.0 and mm.max() == pytest.approx(11.0, rel=1e-6)
    # A constant block decodes exactly with minmax, a symmetric block's max exactly with absmax.
    c = gradcomp.compressor("int4", block_size=4, scheme="minmax")
    torch.testing.assert_close(roundtrip(c, torch.full((8,), -3.25)), torch.full((8,), -3.25))
    y = torch.tensor([-2.0, 0.5, 2.0, 1.0])
    out = roundtrip(gradcomp.compressor("int4", block_size=4), y)
    torch.testing.assert_close(out[[0, 2]], y[[0, 2]], rtol=1e-6, atol=0)
    # A partial last block uses its own min and max (not the padding).
    z = torch.tensor([-5.0, 5.0, 10.3, 10.7])
    out = roundtrip(gradcomp.compressor("int8", block_size=3, scheme="minmax"), z)
    assert out[3] == 10.7 and abs(out[2] - 10.3) <= 0.4 / 255 / 2 * (1 + 1e-4)


# -- natural compression ------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), exp2=st.integers(-140, 120),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.float16]))
def test_natural_outputs_powers_of_two_with_the_input_sign(seed, exp2, dtype):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.float16:
        exp2 = max(-24, min(exp2, 13))  # float16 ends at 65504: 2**14 * randn overflows past 4 sigma
    x = (torch.randn(300, generator=g, dtype=F64) * 2.0**exp2).to(dtype)
    x[::7] = 0.0
    out = roundtrip(gradcomp.compressor("natural", seed=seed), x).to(F64)
    x = x.to(F64)
    nz = out != 0
    mant, _ = torch.frexp(out[nz].abs())
    assert (mant == 0.5).all(), "not a power of two"
    assert (torch.sign(out[nz]) == torch.sign(x[nz])).all()
    # One of the two neighbouring powers of two (or 0 / 2**-126 below the normal range).
    low = torch.where(x.abs() >= 2.0**-126, torch.ldexp(torch.ones_like(x), torch.frexp(x.abs())[1] - 1),
                      torch.zeros_like(x))
    up = torch.where(x.abs() >= 2.0**-126, 2 * low, torch.full_like(x, 2.0**-126))
    exact = low == x.abs()
    assert ((out.abs() == low) | ((out.abs() == up) & ~exact)).all()
    assert (out[x == 0] == 0).all()


def test_natural_special_values_and_capping():
    c = gradcomp.compressor("natural")
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([nan, inf, -inf, 0.0, -0.0, 4.0, -0.5, 3.0e38, -3.0e38])
    out = roundtrip(c, x)
    assert math.isnan(out[0]) and out[1] == inf and out[2] == -inf
    assert out[3:7].tolist() == [0.0, 0.0, 4.0, -0.5]  # exact powers of two are kept exactly
    assert out[7:].tolist() == [2.0**127, -(2.0**127)]  # capped: finite stays finite
    # float16: the largest binade [2**15, 65504] is capped at 2**15 rather than overflowing.
    h = roundtrip(c, torch.tensor([65504.0, -40000.0] * 50, dtype=torch.float16))
    assert torch.isfinite(h).all() and (h.abs() == 2.0**15).all()
    # float64 beyond float32's range cannot be sent: it becomes Inf, as a cast does.
    d = roundtrip(c, torch.tensor([1e39, -1e300, 1e-300], dtype=F64))
    assert d[0] == inf and d[1] == -inf and d[2] == 0


def test_natural_wire_format():
    x = torch.tensor([1.5, -0.75, 0.0, float("nan"), -float("inf"), 1e-40, -1.0])
    p = gradcomp.compressor("natural").compress(x)
    sign_packed, exp = p.tensors
    assert sign_packed.dtype == torch.uint8 and sign_packed.numel() == 1
    assert exp.dtype == torch.uint8 and exp.numel() == 7
    sign = bitpack.unpack(sign_packed, 7, 1)
    assert torch.equal(bitpack.pack(sign, 1), sign_packed)
    assert sign.tolist() == [0, 1, 0, 1, 1, 0, 1]
    assert exp[[2, 3]].tolist() == [0, 0] and exp[4] == 255 and exp[6] == 127
    assert exp[0] in (127, 128) and exp[1] in (125, 126) and exp[5] in (0, 1)
    # Independent decode of the documented format.
    def decode(s, e):
        if e == 0:
            return float("nan") if s else 0.0
        return (-1) ** s * (math.inf if e == 255 else 2.0 ** (e - 127))

    val = [decode(s, e) for s, e in zip(sign.tolist(), exp.tolist())]
    out = gradcomp.compressor("natural").decompress(p).tolist()
    for a, b in zip(val, out):
        assert (math.isnan(a) and math.isnan(b)) or a == b


# -- wire format and sizes ----------------------------------------------------------------------
EXPECTED_BYTES = [  # for 25,600,000 float32 values
    ("qsgd", {}, 25_600_000 * 5 // 8 + 4 * 50_000),  # 5-bit codes, one norm per 512
    ("qsgd", {"levels": 127}, 25_600_000 + 4 * 50_000),  # 8-bit codes
    ("qsgd", {"levels": 1}, 25_600_000 * 2 // 8 + 4 * 50_000),  # 2-bit codes
    ("qsgd", {"levels": 16, "block_size": 1000}, 25_600_000 * 6 // 8 + 4 * 25_600),
    ("int8", {}, 25_600_000 + 4 * 100_000),
    ("int8", {"scheme": "minmax"}, 25_600_000 + 8 * 100_000),
    ("int4", {}, 25_600_000 // 2 + 4 * 100_000),
    ("int4", {"scheme": "minmax", "block_size": 1024}, 25_600_000 // 2 + 8 * 25_000),
    ("terngrad", {}, 25_600_000 // 4 + 4),
    ("terngrad", {"block_size": 512}, 25_600_000 // 4 + 4 * 50_000),
    ("natural", {}, 25_600_000 + 25_600_000 // 8),
]


@pytest.mark.parametrize("name,opt,expected", EXPECTED_BYTES)
def test_wire_bytes_for_a_resnet50_sized_gradient(name, opt, expected):
    c = gradcomp.compressor(name, **opt)
    assert c.wire_nbytes(N_BIG) == expected
    for n in (0, 1, 511, 513, 10_007):  # and the formula is the payload's exact size
        x = torch.randn(n)
        assert c.compress(x).nbytes == c.wire_nbytes(n) == c.wire_nbytes(n, torch.float16)


@pytest.mark.parametrize("cfg", [c for c in DETERMINISTIC + STOCHASTIC if c[0] != "natural"],
                         ids=cid)
def test_codes_round_trip_through_the_packing(cfg):
    """Decode the wire tensors independently, as the docstrings describe them."""
    name, opt = cfg
    n = 101
    c = gradcomp.compressor(name, **opt)
    x = torch.randn(n, generator=torch.Generator().manual_seed(1))
    p = c.compress(x)
    out = c.decompress(p).to(F64)
    packed, scales = p.tensors
    assert packed.dtype == torch.uint8 and scales.dtype == torch.float32
    bits = {"qsgd": 1 + math.ceil(math.log2(c.levels + 1)) if name == "qsgd" else 0,
            "int8": 8, "int4": 4, "terngrad": 2}[name]
    assert packed.numel() == bitpack.packed_nbytes(n, bits)
    codes = bitpack.unpack(packed, n, bits)
    assert torch.equal(bitpack.pack(codes, bits), packed)
    bs = c.block_size or n
    nb = -(-n // bs)
    k = codes.to(F64)
    if name == "qsgd":
        assert scales.numel() == nb
        level = codes & ((1 << (bits - 1)) - 1)
        assert level.max() <= c.levels
        sign = 1 - 2 * (codes >> (bits - 1)).to(F64)
        assert (sign == torch.where(x < 0, -1.0, 1.0))[level > 0].all()
        ref = sign * level.to(F64) * per_element(scales.to(F64), bs, n) / c.levels
    elif name == "terngrad":
        assert scales.numel() == nb and codes.max() <= 2
        ref = (k - 1) * per_element(scales.to(F64), bs, n)
    elif c.scheme == "absmax":
        qmax = 2 ** (bits - 1) - 1
        assert scales.numel() == nb and codes.max() <= 2 * qmax
        ref = (k - qmax) * per_element(scales.to(F64), bs, n)
    else:
        assert scales.numel() == 2 * nb
        lo, hi = scales[:nb], scales[nb:]
        assert torch.equal(lo, blocks64(x, bs, math.inf).amin(1).float())
        assert torch.equal(hi, blocks64(x, bs, -math.inf).amax(1).float())
        lo, hi = per_element(lo.to(F64), bs, n), per_element(hi.to(F64), bs, n)
        ref = lo + k * (hi - lo) / (2**bits - 1)
    # float32 decode: within float32 rounding of the block's magnitude (|x| < 4 here)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=4 * 2e-7)


def test_int4_packs_two_codes_per_byte_offset_binary():
    c = gradcomp.compressor("int4", block_size=4)
    x = torch.tensor([-7.0, 0.0, 7.0, 1.0])  # scale 1: q = -7, 0, 7, 1 -> codes 0, 7, 14, 8
    packed, scale = c.compress(x).tensors
    assert scale.tolist() == [1.0]
    assert packed.tolist() == [0x07, 0xE8]



# -- bit packing ----------------------------------------------------------------------------------
def bit_stream(codes, bits):
    """Independent MSB-first stream: each code's `bits` bits in turn, zero-padded to whole
    bytes (numpy's unpackbits / packbits)."""
    each = np.unpackbits(codes.numpy().reshape(-1, 1), axis=1)[:, 8 - bits:]
    return torch.from_numpy(np.packbits(each.reshape(-1)))


@pytest.mark.parametrize("bits", range(1, 9))
@pytest.mark.parametrize("word_codes", ["default", 0], ids=["words", "columns"])
def test_packing_is_the_msb_first_bit_stream_on_both_paths(bits, word_codes, monkeypatch):
    """Small tensors pack through 64-bit words, large ones (beyond `WORD_CODES`; all of them
    with 0) through uint8 columns: the same stream either way, strided input included."""
    if word_codes != "default":
        monkeypatch.setattr(bitpack, "WORD_CODES", word_codes)
    gen = torch.Generator().manual_seed(bits)
    for n in (0, 1, 7, 8, 9, 63, 1001, 5501, bitpack.WORD_CODES + 9):
        codes = torch.randint(0, 2**bits, (2 * n,), dtype=torch.uint8, generator=gen)
        for c in (codes[:n], codes[::2]):
            packed = bitpack.pack(c, bits)
            assert torch.equal(packed, bit_stream(c, bits)), n
            assert torch.equal(bitpack.unpack(packed, n, bits), c)
            assert torch.equal(bitpack.unpack(packed, max(n - 1, 0), bits), c[: max(n - 1, 0)])


class CountCalls(TorchDispatchMode):
    """Counts the torch operations run inside it."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("bits", range(1, 8))
def test_small_tensors_pack_in_a_few_torch_operations(bits):
    """On a small CPU gradient the codecs' cost is the number of torch calls (~10 us each),
    not arithmetic: packing and unpacking 5.5k codes of any width takes a fixed handful of
    them (the uint8 column path: 23 to 114 to pack, up to 132 to unpack)."""
    codes = torch.randint(0, 2**bits, (5501,), dtype=torch.uint8)
    packed = bitpack.pack(codes, bits)  # and the shift tables are built
    with CountCalls() as pack_ops:
        bitpack.pack(codes, bits)
    with CountCalls() as unpack_ops:
        bitpack.unpack(packed, 5501, bits)
    assert pack_ops.calls <= 16 and unpack_ops.calls <= 16

# -- non-finite input ---------------------------------------------------------------------------
PER_BLOCK = [(n, o) for n, o in DETERMINISTIC + STOCHASTIC if o.get("block_size")]


@pytest.mark.parametrize("cfg", PER_BLOCK, ids=cid)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_value_spoils_only_its_block(cfg, bad):
    name, opt = cfg  # block_size 16
    x = torch.randn(70, generator=torch.Generator().manual_seed(5))
    y = x.clone()
    y[20] = bad  # block 1 = [16, 32)
    clean = roundtrip(gradcomp.compressor(name, **opt), x)
    dirty = roundtrip(gradcomp.compressor(name, **opt), y)
    assert not torch.isfinite(dirty[16:32]).any(), "the whole block decodes non-finite"
    others = torch.cat([dirty[:16], dirty[32:]])
    assert torch.isfinite(others).all()
    assert torch.equal(others, torch.cat([clean[:16], clean[32:]]))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_terngrad_whole_tensor_scale_makes_all_non_finite(bad):
    x = torch.randn(50)
    x[3] = bad
    assert not torch.isfinite(roundtrip(gradcomp.compressor("terngrad"), x)).any()


def test_zero_blocks_stay_zero():
    x = torch.zeros(64)
    x[40:] = torch.randn(24)
    for name, opt in DETERMINISTIC + STOCHASTIC:
        out = roundtrip(gradcomp.compressor(name, **opt), x)
        assert (out[:32] == 0).all(), (name, opt)
        assert torch.isfinite(out).all()


# -- options ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,opt,option", [
    ("qsgd", {"levels": 0}, "levels"), ("qsgd", {"levels": 200}, "levels"),
    ("qsgd", {"levels": 128}, "levels"), ("qsgd", {"levels": 2.5}, "levels"),
    ("qsgd", {"block_size": 0}, "block_size"), ("int8", {"block_size": 0}, "block_size"),
    ("int4", {"block_size": 0}, "block_size"), ("terngrad", {"block_size": -1}, "block_size"),
    ("int8", {"scheme": "foo"}, "scheme"), ("int4", {"scheme": "foo"}, "scheme"),
    ("qsgd", {"stochastic": "yes"}, "stochastic"), ("int8", {"stochastic": 1}, "stochastic"),
    ("natural", {"seed": -1}, "seed"), ("terngrad", {"seed": 1.5}, "seed"),
])
def test_bad_options_are_named(name, opt, option):
    with pytest.raises(ValueError, match=rf"^{option}=.* is not allowed"):
        gradcomp.compressor(name, **opt)


def test_bad_scheme_lists_the_choices():
    with pytest.raises(ValueError, match="scheme='foo'.*'absmax'.*'minmax'"):
        gradcomp.compressor("int8", scheme="foo")


def test_registered_in_order_with_defaults():
    names = gradcomp.names()
    ours = [n for n in names if n in {"qsgd", "int8", "int4", "terngrad", "natural"}]
    assert ours == ["qsgd", "int8", "int4", "terngrad", "natural"]
    assert gradcomp.compressor("qsgd").options() == {
        "levels": 15, "stochastic": True, "block_size": 512, "seed": 0}
    for n in ("int8", "int4"):
        assert gradcomp.compressor(n).options() == {
            "block_size": 256, "scheme": "absmax", "stochastic": False, "seed": 0}
    assert gradcomp.compressor("terngrad").options() == {"block_size": 0, "seed": 0}
    assert gradcomp.compressor("natural").options() == {"seed": 0}
    for n in ours:
        c = gradcomp.compressor(n)
        assert c.aggregation == "allgather" and not c.shared_randomness


@pytest.mark.parametrize("cfg", STOCHASTIC, ids=cid)
def test_randomness_is_seeded_per_rank(cfg):
    name, opt = cfg
    x = torch.randn(200, generator=torch.Generator().manual_seed(2))

    def run(seed, rank):
        c = gradcomp.compressor(name, **{**opt, "seed": seed})
        c.set_rank(rank)
        return roundtrip(c, x)

    assert torch.equal(run(0, 0), run(0, 0))
    assert not torch.equal(run(0, 0), run(0, 1))
    assert not torch.equal(run(0, 0), run(1, 0))
    # Only the compressor's generator is used: the global RNG is untouched.
    state = torch.get_rng_state()
    run(0, 0)
    assert torch.equal(state, torch.get_rng_state())
