"""Error feedback fused into the quantizer and sign kernels (`kernels.*_encode_ef`, and
`ErrorFeedback` through the compressors' `compress_with_residual`) against the unfused step.

The unfused reference is `ErrorFeedback`'s generic step around the same kernels: corrected =
residual + x in float32 (a copy of x on the first step), wire = encode(corrected.to(x.dtype)),
residual = finite_or_zero(corrected - decode(wire)). Same kernels, tiles and seed, so the wire
tensors and the new residual must agree bit for bit (NaN matching NaN, -0.0 apart from 0.0) for
every method, on the fused one-pass path and the two-pass path, for float32/float16/bfloat16
gradients holding NaN, +-Inf, -0.0, zeros and ties, and residuals that overflow the dtype.

Without a GPU the kernels run under Triton's interpreter (test_kernels sets TRITON_INTERPRET=1
before they load) and the compressors are made to dispatch CPU tensors to them; with a GPU the
same tests run on CUDA tensors.
"""
import pytest
import torch
from test_kernels import CUDA, DEVICE, DTYPES, fresh_seed, same, sample, torch_path

import gradcomp
from gradcomp import kernels
from gradcomp.compressors.memory import ErrorFeedback, finite_or_zero

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
N = 3001
SEED = 12345  # the kernels' Philox seed, the same for the fused and the unfused run


# -- the kernels -------------------------------------------------------------------------------
def codec(label, bs):
    """(encode(x), encode_ef(x, residual), decode(wire, n, dtype)) of the kernels for `label`
    ("method:variant") with block size `bs`."""
    name, _, var = label.partition(":")
    if name in ("int8", "int4"):
        bits, scheme = int(name[3]), var.split("-")[0]
        args = (bs, scheme, var.endswith("-sr"), SEED)
        return (lambda x: kernels.int_encode(x, bits, *args),
                lambda x, r: kernels.int_encode_ef(x, r, bits, *args),
                lambda w, n, dt: kernels.int_decode(*w, n, bits, bs, scheme, dt))
    if name == "qsgd":
        args = (7, bs, var == "sr", SEED)
        return (lambda x: kernels.qsgd_encode(x, *args),
                lambda x, r: kernels.qsgd_encode_ef(x, r, *args),
                lambda w, n, dt: kernels.qsgd_decode(*w, n, 7, bs, dt))
    if name == "terngrad":
        return (lambda x: kernels.terngrad_encode(x, bs, SEED),
                lambda x, r: kernels.terngrad_encode_ef(x, r, bs, SEED),
                lambda w, n, dt: kernels.terngrad_decode(*w, n, bs, dt))
    if name == "natural":
        return (lambda x: kernels.natural_encode(x, SEED),
                lambda x, r: kernels.natural_encode_ef(x, r, SEED),
                lambda w, n, dt: kernels.natural_decode(*w, n, dt))
    return (lambda x: kernels.sign_encode(x, name, bs),
            lambda x, r: kernels.sign_encode_ef(x, r, name, bs),
            lambda w, n, dt: kernels.sign_decode(*w, n, name, bs, dt))


def unfused(encode, decode, x, residual):
    """ErrorFeedback's generic step around the kernels: (wire tensors, new residual)."""
    corrected = x.to(torch.float32, copy=True) if residual is None else residual + x
    wire = encode(corrected.to(x.dtype))
    return wire, finite_or_zero(corrected - decode(wire, x.numel(), x.dtype))


def residual_sample(n, seed):
    """A float32 residual over many magnitudes, with zeros, -0.0, and values that overflow
    float16 (and float32, beside the gradient's huge values) when added."""
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(n, generator=g) * 10.0 ** torch.randint(-3, 2, (n,), generator=g)
    r[torch.rand(n, generator=g) < 0.05] = 0.0
    r[1::97] = -0.0
    r[5::211] = 1e5
    r[7::211] = -1e5
    r[:80:3] = 3e38  # on the special values at the front of `sample`
    return r.to(DEVICE)


# (method:variant, [fused block size, two-pass block size(s)]): int8 takes any block size up to
# FUSED_MAX in one pass; sub-byte codes and sign bits need a multiple of 8; 0 = whole tensor.
PATHS = {
    "int8:absmax": [100, 9000], "int8:minmax-sr": [16, 9000], "int4:absmax": [16, 100],
    "int4:minmax": [24, 100], "int4:absmax-sr": [16, 100], "qsgd:nearest": [16, 100],
    "qsgd:sr": [32, 100], "terngrad": [16, 0], "natural": [0], "signsgd": [0],
    "efsignsgd": [32, 0, 100], "onebit": [32, 0, 100],
}
CASES = [(label, bs) for label, sizes in PATHS.items() for bs in sizes]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("label,bs", CASES)
def test_fused_step_equals_the_unfused_step(label, bs, dtype):
    seed = fresh_seed()
    x = sample(N, dtype, seed)
    encode, encode_ef, decode = codec(label, bs)
    for step, residual in (("first", None), ("with residual", residual_sample(N, seed + 1))):
        tag = f"{label} bs={bs} {dtype} seed={seed} {step}"
        *wire, new = encode_ef(x, residual)
        want_wire, want_new = unfused(encode, decode, x, residual)
        assert len(wire) == len(want_wire), tag
        for k, (a, b) in enumerate(zip(wire, want_wire)):
            same(a, b, f"wire tensor {k} {tag}")
        same(new, want_new, "new residual " + tag)
        assert torch.isfinite(new).all(), "the residual of a non-finite gradient is finite"


def test_bad_residual_is_named():
    x = torch.randn(100, device=DEVICE)
    with pytest.raises(TypeError, match="residual dtype"):
        kernels.int_encode_ef(x, x.half(), 8)
    with pytest.raises(ValueError, match="residual has 99"):
        kernels.sign_encode_ef(x, x[:99], "onebit")
    with pytest.raises(TypeError, match="residual must be"):
        kernels.qsgd_encode_ef(x, [0.0] * 100)


# -- ErrorFeedback dispatches to them ------------------------------------------------------------
@pytest.fixture
def dispatch(monkeypatch):
    """Make the compressors hand CPU tensors to the kernels (the interpreter) as they hand CUDA
    tensors; GRADCOMP_KERNELS=0 still turns them off."""
    if not CUDA:
        dt = (torch.float32, torch.float16, torch.bfloat16)
        monkeypatch.setattr(kernels, "supports", lambda x: kernels.enabled() and x.dtype in dt
                            and 0 < x.numel() <= kernels.MAX_NUMEL)
        monkeypatch.setattr(kernels, "supports_decode", lambda w, dtype, n: kernels.enabled()
                            and dtype in dt and 0 < n <= kernels.MAX_NUMEL)


def gradient(shape, dtype, seed, specials):
    """A non-contiguous 2-D gradient of `shape`."""
    return sample(shape[0] * shape[1], dtype, seed, specials).view(shape[1], shape[0]).T


METHODS = [("int8", {}), ("int4", {"scheme": "minmax", "stochastic": True, "block_size": 64}),
           ("qsgd", {}), ("terngrad", {"block_size": 0}), ("natural", {}), ("signsgd", {}),
           ("efsignsgd", {"block_size": 100}), ("onebit", {})]


@pytest.mark.parametrize("name,opt", METHODS)
def test_error_feedback_fused_equals_generic_over_steps(name, opt, dispatch):
    fused = gradcomp.compressor(name, error_feedback=True, **opt)
    generic = ErrorFeedback(gradcomp.compressor(name, **opt), fused=False)
    seed = fresh_seed()
    steps = [((60, 50), DTYPES[0], False), ((60, 50), DTYPES[0], True),
             ((60, 50), DTYPES[2], False), ((50, 40), DTYPES[1], False),
             ((50, 40), DTYPES[1], False)]  # a new shape drops the residual
    for i, (shape, dtype, specials) in enumerate(steps):
        x = gradient(shape, dtype, seed + i, specials)
        before = fused.state_dict()["residuals"]
        saved = {k: v.clone() for k, v in before.items()}
        a, b = fused.compress(x, "w"), generic.compress(x, "w")
        tag = f"{name} step {i} {dtype} seed={seed}"
        for k, (u, v) in enumerate(zip(a.tensors, b.tensors)):
            same(u, v, f"wire tensor {k} {tag}")
        ra, rb = fused.residuals["w"], generic.residuals["w"]
        assert ra.shape == x.shape and ra.dtype == torch.float32, tag
        same(ra.reshape(-1), rb.reshape(-1), "residual " + tag)
        assert torch.isfinite(ra).all(), tag
        for k, v in before.items():  # a state_dict taken earlier does not change
            same(v.reshape(-1), saved[k].reshape(-1), "earlier state_dict " + tag)
        same(fused.decompress(a).reshape(-1), generic.decompress(b).reshape(-1), "decode " + tag)


@pytest.mark.parametrize("name", ["int8", "int4"])
def test_error_feedback_fused_equals_the_torch_path(name, dispatch):
    """Round to nearest with absmax scales is exact: the fused kernels against ErrorFeedback
    around the compressors' own torch code."""
    fused = gradcomp.compressor(name, error_feedback=True, block_size=32)
    ref = gradcomp.compressor(name, error_feedback=True, block_size=32)
    seed = fresh_seed()
    for i, dtype in enumerate(DTYPES):
        x = gradient((40, 30), dtype, seed + i, specials=i == 1)
        a = fused.compress(x, 0)
        with torch_path():
            b = ref.compress(x, 0)
        for u, v in zip(a.tensors, b.tensors):
            same(u, v, f"{name} {dtype} wire")
        same(fused.residuals[0].reshape(-1), ref.residuals[0].reshape(-1),
             f"{name} {dtype} residual")


def test_fused_path_only_where_the_kernels_apply(dispatch):
    c = gradcomp.compressor("int8")
    x = torch.randn(64, device=DEVICE)
    assert c.compress_with_residual(x.double(), None) is None  # float64 stays torch
    assert c.compress_with_residual(x, torch.zeros(64, dtype=torch.float64, device=DEVICE)) is None
    with torch_path():
        assert c.compress_with_residual(x, None) is None
    payload, residual = c.compress_with_residual(x, None)
    assert residual.dtype == torch.float32 and residual.shape == x.shape
    with pytest.raises(ValueError, match="fused"):
        ErrorFeedback(c, fused="yes")
