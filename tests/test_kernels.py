"""Triton kernels (gradcomp.kernels) against the torch compressors they stand in for.

Without a GPU the kernels run on CPU tensors under Triton's interpreter (TRITON_INTERPRET=1 is
set below, before the kernels are first loaded); with a GPU the same tests run on CUDA tensors
with the compiled kernels, against the torch path on the same device (GRADCOMP_KERNELS=0).
The interpreter costs milliseconds per program, so inputs are small (a few thousand values) and
the wrappers use large tiles there, which keeps the grid to one or two programs.

Exact where the math is: codes, scales and decoded values of round-to-nearest equal the torch
reference bit for bit (NaN matching NaN). Sums (QSGD's norm, efsignsgd/onebit means) agree to
float32 rounding. Stochastic rounding is checked for determinism per seed, for landing on a
neighbouring grid point, and for unbiasedness.
"""
import contextlib
import math
import os
import random
import subprocess
import sys

import torch

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ["TRITON_INTERPRET"] = "1"  # before gradcomp.kernels loads its Triton kernels

import pytest  # noqa: E402

pytest.importorskip("triton")

import gradcomp  # noqa: E402
from gradcomp import kernels  # noqa: E402
from gradcomp.kernels.packing import reference as bitpack  # noqa: E402

DEVICE = "cuda" if CUDA else "cpu"
# The interpreter evaluates both sides of tl.where in numpy, which warns about overflow there.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
F64 = torch.float64


# -- helpers -----------------------------------------------------------------------------------
@contextlib.contextmanager
def torch_path():
    """Run the compressors' torch reference even where they would dispatch to a kernel."""
    old = os.environ.get("GRADCOMP_KERNELS")
    os.environ["GRADCOMP_KERNELS"] = "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ["GRADCOMP_KERNELS"]
        else:
            os.environ["GRADCOMP_KERNELS"] = old


def nvidia_backend() -> bool:
    """Whether this Triton can compile for NVIDIA GPUs."""
    try:
        import triton.backends.nvidia  # noqa: F401
    except ImportError:
        return False
    return True


def without_interpreter() -> dict:
    return {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}


def run_without_interpreter(args):
    """`python *args` in a fresh process without TRITON_INTERPRET (to compile kernels for a
    GPU); skips where this Triton has no NVIDIA backend."""
    if not nvidia_backend():
        pytest.skip("this Triton has no NVIDIA backend")
    return subprocess.run([sys.executable, *args], env=without_interpreter(),
                          capture_output=True, text=True, timeout=600)


def reference(name, x, **opt):
    """(compressor, payload) of the torch implementation on x's device."""
    c = gradcomp.compressor(name, **opt)
    with torch_path():
        return c, c.compress(x)


def ref_decode(c, payload, tensors):
    with torch_path():
        return c.decompress(payload.with_tensors(tensors)).reshape(-1)


_INT = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
        torch.float64: torch.int64}


def same(a, b, what="", zero_sign=True):
    """Bit-for-bit equal (NaN matches NaN; 0.0 and -0.0 differ unless not `zero_sign`)."""
    assert a.shape == b.shape, (what, a.shape, b.shape)
    assert a.dtype == b.dtype, (what, a.dtype, b.dtype)
    if a.is_floating_point():
        na, nb = a.isnan(), b.isnan()
        assert torch.equal(na, nb), f"{what}: NaN positions differ"
        if not zero_sign:
            a, b = a + 0.0, b + 0.0  # -0.0 + 0.0 == +0.0
        a = torch.where(na, 0, a).view(_INT[a.dtype])
        b = torch.where(nb, 0, b).view(_INT[b.dtype])
    bad = (a != b).nonzero().reshape(-1)
    assert bad.numel() == 0, (f"{what}: {bad.numel()} of {a.numel()} differ, first at "
                              f"{bad[:5].tolist()}: {a[bad[:5]].tolist()} != {b[bad[:5]].tolist()}")


def close(a, b, what="", rtol=2e-6):
    """Equal up to float32 rounding of differently ordered sums; same NaN/Inf pattern."""
    assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape)
    assert torch.equal(a.isnan(), b.isnan()), f"{what}: NaN positions differ"
    ok = ~a.isnan()
    a, b = a[ok].double(), b[ok].double()
    assert torch.equal(a.isinf(), b.isinf()) and torch.equal(a[a.isinf()], b[b.isinf()]), what
    f = ~a.isinf()
    err = (a[f] - b[f]).abs() / b[f].abs().clamp_min(1e-30)
    assert err.numel() == 0 or err.max() <= rtol, f"{what}: relative error {err.max():.3g}"


def fresh_seed():
    return random.randrange(2**31)


def sample(n, dtype, seed, specials=True):
    """Random values over several orders of magnitude, with zeros and (optionally) blocks of
    special values at the front: exact ties, zeros, NaN, +-Inf, subnormals, huge values."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g, dtype=F64) * 10.0 ** torch.randint(-2, 3, (n,), generator=g)
    x[torch.rand(n, generator=g) < 0.05] = 0.0
    if specials:
        head = [7.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 4.5, -6.5, 5.5, 0.0, -0.0, 1.0, 2.0, 6.5]
        head += [0.0] * 8 + [-0.0] * 8  # zero blocks
        head += [1.0, math.nan, -2.0] + [0.25] * 5 + [1.0, math.inf, 3.0] + [0.1] * 5
        head += [-math.inf] + [1.0] * 7
        head += [1e-40, -3e-41, 2e-39] + [0.0] * 5 if dtype == torch.float32 else [1e-3] * 8
        big = 3e38 if dtype != torch.float16 else 6e4
        head += [big, -big, 1.0, big / 2] + [2.0] * 4
        head = torch.tensor(head, dtype=F64)[:n]
        x[: head.numel()] = head
    return x.to(dtype).to(DEVICE)


def finite_sample(n, dtype, seed):
    return sample(n, dtype, seed, specials=False)


# -- environment ---------------------------------------------------------------------------------
# One fresh interpreter without TRITON_INTERPRET serves two tests (its start-up, importing torch,
# costs seconds): it uses a compressor and says whether that imported Triton, then (argument
# "compile") runs `compile_check.py --smoke` as its command line would.
FRESH = """
import sys, torch, gradcomp
from gradcomp import kernels
c = gradcomp.compressor('int4'); c.decompress(c.compress(torch.randn(100)))
assert kernels.supports(torch.randn(10)) is False
print('triton imported' if 'triton' in sys.modules else 'triton not imported', flush=True)
if sys.argv[1] == 'compile':
    import runpy
    sys.argv = [sys.argv[2], '--smoke']
    runpy.run_path(sys.argv[0], run_name='__main__')
"""


@pytest.fixture(scope="module")
def fresh_process():
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compile_check.py")
    todo = "compile" if nvidia_backend() and not CUDA else "import"  # GPU: the tests run them
    return subprocess.run([sys.executable, "-c", FRESH, todo, tool], env=without_interpreter(),
                          capture_output=True, text=True, timeout=600)


def test_importing_gradcomp_never_imports_triton(fresh_process):
    out = fresh_process.stdout
    assert out.startswith("triton not imported\n"), out[-3000:] + fresh_process.stderr[-3000:]


def test_availability_and_dispatch_test():
    assert kernels.available() == (CUDA and kernels.enabled())
    assert not kernels.supports(torch.randn(10))  # CPU tensors stay on the torch reference
    if CUDA:
        assert kernels.supports(torch.randn(10, device="cuda"))
        assert not kernels.supports(torch.randn(10, device="cuda", dtype=F64))
        assert not kernels.supports(torch.randn(0, device="cuda"))
        with torch_path():
            assert not kernels.supports(torch.randn(10, device="cuda"))


def test_bad_input_is_named():
    x = torch.randn(100, device=DEVICE)
    with pytest.raises(TypeError, match="float64"):
        kernels.int8_encode(x.double())
    with pytest.raises(ValueError, match="block_size"):
        kernels.int4_encode(x, block_size=0)
    with pytest.raises(ValueError, match="scheme"):
        kernels.int8_encode(x, scheme="absmin")
    with pytest.raises(ValueError, match="method"):
        kernels.sign_encode(x, "sign")
    with pytest.raises(ValueError, match="levels"):
        kernels.qsgd_encode(x, levels=0)
    with pytest.raises(ValueError, match="elements"):
        kernels.int8_encode(x[:0])


# -- bit packing -------------------------------------------------------------------------------
@pytest.mark.parametrize("bits", range(1, 9))
def test_pack_and_unpack_match_bitpack(bits):
    n = random.choice([1, 7, 8, 9, 1000, 4097])
    codes = torch.randint(0, 2**bits, (n,), dtype=torch.uint8, device=DEVICE)
    packed = kernels.pack(codes, bits)
    same(packed, bitpack.pack(codes, bits), "pack")
    same(kernels.unpack(packed, n, bits), codes, "unpack")


# -- int8 / int4 -------------------------------------------------------------------------------
INT_CASES = [(name, scheme, bs) for name in ("int8", "int4") for scheme in ("absmax", "minmax")
             for bs in (16, 24, 256, 100, 10, 9000)]


@pytest.mark.parametrize("name,scheme,bs", INT_CASES)
def test_int_round_to_nearest_is_bit_exact(name, scheme, bs):
    seed, dtype = fresh_seed(), random.choice(DTYPES)
    n = random.choice([bs * 7, bs * 7 + 5, 2999, 3001])
    x = sample(n, dtype, seed)
    c, p = reference(name, x, block_size=bs, scheme=scheme)
    bits = 8 if name == "int8" else 4
    packed, scales = kernels.int_encode(x, bits, bs, scheme)
    tag = f"{name} {scheme} bs={bs} n={n} {dtype} seed={seed}"
    # The sign of a zero minimum/maximum of a block holding both 0.0 and -0.0 is unspecified
    # (torch's CPU and CUDA reductions differ there too), and so is that of its decoding.
    zero_sign = scheme == "absmax"
    same(scales, p.tensors[1], "scales " + tag, zero_sign)
    same(packed, p.tensors[0], "codes " + tag)
    out = kernels.int_decode(packed, scales, n, bits, bs, scheme, dtype=dtype)
    same(out, ref_decode(c, p, p.tensors), "decode " + tag, zero_sign)
    same(out, ref_decode(c, p, [packed, scales]), "decode of the kernel's payload " + tag)


@pytest.mark.parametrize("name,scheme", [("int4", "absmax"), ("int8", "minmax"),
                                         ("int4", "minmax")])
def test_int_stochastic_rounding(name, scheme):
    bits = 8 if name == "int8" else 4
    x = finite_sample(3000, torch.float32, fresh_seed())
    enc = lambda seed: kernels.int_encode(x, bits, 16, scheme, stochastic=True, seed=seed)
    (p1, s1), (p2, _), (p3, _) = enc(5), enc(5), enc(6)
    same(p1, p2, "same seed, same codes")
    assert not torch.equal(p1, p3), "another seed, other codes"
    nearest, scales = kernels.int_encode(x, bits, 16, scheme)
    same(s1, scales, "scales do not depend on the rounding")
    c1 = bitpack.unpack(p1, x.numel(), bits).int()
    cn = bitpack.unpack(nearest, x.numel(), bits).int()
    assert (c1 - cn).abs().max() <= 1, "stochastic codes are a neighbour of the nearest"
    assert (c1 != cn).any()


# -- unbiasedness of every stochastic kernel -----------------------------------------------------
D = 1000  # draws: x tiled D times, one kernel call


def _draws(method, x):
    """D decodings of stochastic encodings of x (D, n) in float64, and the step per value."""
    n = x.numel()
    xs = x.repeat(D)
    if method == "int4":
        p, s = kernels.int4_encode(xs, block_size=16, stochastic=True, seed=11)
        out = kernels.int4_decode(p, s, xs.numel(), block_size=16)
        step = s[: n // 16].repeat_interleave(16)
    elif method == "int8-minmax":
        p, s = kernels.int8_encode(xs, block_size=16, scheme="minmax", stochastic=True, seed=11)
        out = kernels.int8_decode(p, s, xs.numel(), block_size=16, scheme="minmax")
        nb = xs.numel() // 16
        step = ((s[nb:2 * nb] - s[:nb]) / 255)[: n // 16].repeat_interleave(16)
    elif method == "qsgd":
        p, s = kernels.qsgd_encode(xs, levels=3, block_size=16, stochastic=True, seed=11)
        out = kernels.qsgd_decode(p, s, xs.numel(), levels=3, block_size=16)
        step = (s / 3)[: n // 16].repeat_interleave(16)
    elif method == "terngrad":
        p, s = kernels.terngrad_encode(xs, block_size=0, seed=11)
        out = kernels.terngrad_decode(p, s, xs.numel(), block_size=0)
        step = s.expand(n)
    else:  # natural: step = the power of two below |x|
        p, e = kernels.natural_encode(xs, seed=11)
        out = kernels.natural_decode(p, e, xs.numel())
        step = torch.ldexp(torch.ones_like(x), torch.frexp(x.abs())[1] - 1)
    return out.to(F64).view(D, n), step.to(F64).abs()


@pytest.mark.parametrize("method", ["int4", "int8-minmax", "qsgd", "terngrad", "natural"])
def test_stochastic_kernels_are_unbiased(method):
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(32, generator=g) * torch.logspace(-2, 2, 32)).to(DEVICE)
    x[5] = 0.0
    outs, step = _draws(method, x)
    x64 = x.to(F64)
    # Each draw is one of the two neighbouring grid points ...
    assert ((outs - x64).abs() <= step * (1 + 1e-5) + 1e-12).all()
    # ... and the mean is x within 5 standard deviations (Bernoulli with p <= 1/2 worst case).
    sd = step * 0.5 / math.sqrt(D)
    err = (outs.mean(0) - x64).abs()
    assert (err <= 5 * sd + 2e-6 * x64.abs()).all(), err.max()
    assert (outs.std(0) > 0).sum() > 16  # it really is random
    if method != "int8-minmax":  # zero is on every grid but minmax's
        assert (outs[:, 5] == 0).all()


# -- QSGD --------------------------------------------------------------------------------------
def qsgd_codes_given_norms(x, norms, levels, bs):
    """quantize.QSGD's round-to-nearest codes (unpacked), computed from the given norms."""
    bits = 1 + levels.bit_length()
    n = x.numel()
    nb = -(-n // bs)
    xb = torch.cat([x.float(), x.new_zeros(nb * bs - n, dtype=torch.float32)]).view(nb, bs)
    d = torch.where(norms > 0, norms, torch.ones_like(norms))
    r = torch.nan_to_num(xb.abs() / d[:, None] * levels, nan=0.0).clamp_(0, levels)
    level = torch.round(r)
    neg = (xb < 0) & (level > 0)
    codes = level.to(torch.uint8) | (neg.to(torch.uint8) << (bits - 1))
    return codes.reshape(-1)[:n]


@pytest.mark.parametrize("levels,bs", [(15, 512), (15, 16), (1, 24), (127, 100), (7, 9000)])
def test_qsgd_round_to_nearest(levels, bs):
    seed, dtype = fresh_seed(), random.choice(DTYPES)
    n = random.choice([3000, 3001, 1025])
    x = sample(n, dtype, seed)
    c, p = reference("qsgd", x, levels=levels, block_size=bs, stochastic=False)
    packed, norms = kernels.qsgd_encode(x, levels, bs, stochastic=False)
    tag = f"qsgd levels={levels} bs={bs} n={n} {dtype} seed={seed}"
    close(norms, p.tensors[1], "norms " + tag)
    bits = 1 + levels.bit_length()
    codes = bitpack.unpack(packed, n, bits)
    same(codes, qsgd_codes_given_norms(x, norms, levels, bs), "codes given the norms " + tag)
    same(packed, bitpack.pack(codes, bits), "packing " + tag)
    # Against the reference's own norms: at most a few codes on a rounding boundary move by one.
    ref_codes = bitpack.unpack(p.tensors[0], n, bits)
    moved = codes != ref_codes
    assert moved.float().mean() < 1e-2, tag
    mask = (1 << (bits - 1)) - 1
    assert ((codes[moved].int() & mask) - (ref_codes[moved].int() & mask)).abs().max(
        ).item() <= 1 if moved.any() else True
    out = kernels.qsgd_decode(packed, norms, n, levels, bs, dtype=dtype)
    same(out, ref_decode(c, p, [packed, norms]), "decode " + tag)


def test_qsgd_stochastic_is_deterministic_per_seed():
    x = finite_sample(2000, torch.float32, fresh_seed())
    a = kernels.qsgd_encode(x, 15, 16, stochastic=True, seed=3)
    b = kernels.qsgd_encode(x, 15, 16, stochastic=True, seed=3)
    c = kernels.qsgd_encode(x, 15, 16, stochastic=True, seed=4)
    same(a[0], b[0])
    same(a[1], b[1])
    assert not torch.equal(a[0], c[0])


# -- TernGrad ----------------------------------------------------------------------------------
@pytest.mark.parametrize("bs", [0, 16, 100])
def test_terngrad_scales_exact_codes_ternary_decode_exact(bs):
    seed, dtype = fresh_seed(), random.choice(DTYPES)
    n = 40000 if bs == 0 else 3001  # bs=0: statistics over several programs
    x = sample(n, dtype, seed, specials=bs != 0)
    c, p = reference("terngrad", x, block_size=bs)
    packed, s = kernels.terngrad_encode(x, bs, seed=1)
    tag = f"terngrad bs={bs} {dtype} seed={seed}"
    same(s, p.tensors[1], "scales " + tag)
    codes = bitpack.unpack(packed, n, 2).long()
    assert codes.max() <= 2
    sign = torch.where(x < 0, 0, 2)
    assert ((codes == 1) | (codes == sign)).all(), tag  # 0 or the sign of x
    same(packed, kernels.terngrad_encode(x, bs, seed=1)[0], "deterministic " + tag)
    out = kernels.terngrad_decode(packed, s, n, bs, dtype=dtype)
    same(out, ref_decode(c, p, [packed, s]), "decode " + tag)


# -- natural compression -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_natural_exponents_and_specials(dtype):
    seed = fresh_seed()
    x = sample(3000, dtype, seed)
    c, p = reference("natural", x)
    signs, exps = kernels.natural_encode(x, seed=2)
    tag = f"natural {dtype} seed={seed}"
    ref_signs = bitpack.unpack(p.tensors[0], x.numel(), 1)
    got_signs = bitpack.unpack(signs, x.numel(), 1)
    e, re = exps.int(), p.tensors[1].int()
    # Same exponent or one above/below (the two draws rounded differently); special values and
    # exact powers of two are deterministic.
    assert (e - re).abs().max() <= 1, tag
    det = ~torch.isfinite(x) | (x == 0) | (x.abs() == torch.ldexp(torch.ones_like(x),
                                                                     torch.frexp(x)[1] - 1))
    same(e[det], re[det], "special values " + tag)
    both = (e > 0) & (re > 0) | x.isnan()
    same(got_signs[both], ref_signs[both], "signs " + tag)
    assert (got_signs[e == 0] == x.isnan()[e == 0]).all()  # zero is +0, NaN is sign 1 exp 0
    out = kernels.natural_decode(signs, exps, x.numel(), dtype=dtype)
    same(out, ref_decode(c, p, [signs, exps]), "decode " + tag)
    assert torch.isfinite(out[torch.isfinite(x)]).all(), "finite stays finite (capping)"


# -- sign compressors --------------------------------------------------------------------------
SIGN_CASES = [("signsgd", 0)] + [(m, bs) for m in ("efsignsgd", "onebit")
                                 for bs in (0, 16, 24, 100, 7, 5000)]


@pytest.mark.parametrize("method,bs", SIGN_CASES)
def test_sign_bits_exact_statistics_close_decode_exact(method, bs):
    seed, dtype = fresh_seed(), random.choice(DTYPES)
    n = random.choice([3000, 3001, 40000 if bs == 0 else 2999])
    x = sample(n, dtype, seed, specials=random.random() < 0.5)
    opt = {} if method == "signsgd" else {"block_size": bs}
    c, p = reference(method, x, **opt)
    packed, stats = kernels.sign_encode(x, method, bs)
    tag = f"{method} bs={bs} n={n} {dtype} seed={seed}"
    same(packed, p.tensors[0], "sign bits " + tag)
    close(stats, p.tensors[1], "statistics " + tag)
    out = kernels.sign_decode(packed, stats, n, method, bs, dtype=dtype)
    same(out, ref_decode(c, p, [packed, stats]), "decode " + tag)


def test_signsgd_flags_non_finite():
    for bad in (math.nan, math.inf, -math.inf):
        x = torch.randn(3000, device=DEVICE)
        x[1234] = bad
        _, flag = kernels.signsgd_encode(x)
        assert flag.isnan().all()
    _, flag = kernels.signsgd_encode(torch.randn(3000, device=DEVICE))
    assert flag.tolist() == [1.0]


def test_onebit_counts_are_exact_over_many_programs():
    # Whole-tensor statistics from several programs: the counts must add up exactly.
    x = torch.cat([torch.ones(40001), -torch.ones(3)]).to(DEVICE)
    _, means = kernels.onebit_encode(x)
    assert means.tolist() == [1.0, -1.0]
    _, scales = kernels.efsignsgd_encode(x)
    assert scales.tolist() == [1.0]


# -- the compressors dispatch to the kernels on CUDA ---------------------------------------------
DISPATCHED = [("int8", {}), ("int4", {}), ("int4", {"scheme": "minmax", "block_size": 64}),
              ("qsgd", {"stochastic": False}), ("efsignsgd", {"block_size": 256}),
              ("onebit", {}), ("signsgd", {})]


@pytest.mark.skipif(not CUDA, reason="dispatch happens for CUDA tensors only")
@pytest.mark.parametrize("name,opt", DISPATCHED)
def test_compressors_on_cuda_match_their_torch_path(name, opt):
    x = finite_sample(1_000_000, torch.float32, fresh_seed()).view(1000, 1000)[:, :999].T
    c = gradcomp.compressor(name, **opt)
    got = c.compress(x)  # a non-contiguous 2-D gradient
    with torch_path():
        want = c.compress(x)
    if name != "qsgd":  # QSGD's codes depend on its norm's float32 rounding
        same(got.tensors[0], want.tensors[0], name)
    for a, b in zip(got.tensors[1:], want.tensors[1:]):
        close(a, b, name)
    out = c.decompress(got)
    assert out.shape == x.shape and out.dtype == x.dtype
    with torch_path():
        same(out, c.decompress(got), name)


def test_reciprocal_mode_mirrors_torch_cuda_division(monkeypatch):
    """On CUDA, torch computes `tensor / python_number` as tensor * float32(1 / number); the
    kernels do the same there (RECIP). Checked here on any device against that formula."""
    from gradcomp.kernels.quantize import launcher as quantize

    monkeypatch.setattr(quantize, "_recip", lambda t: True)
    x = finite_sample(3000, torch.float32, fresh_seed())
    inv = lambda c: torch.ones((), dtype=torch.float32) / c  # noqa: E731  (IEEE, on the CPU)
    _, scales = kernels.int8_encode(x, block_size=16)
    amax = x[: 187 * 16].view(-1, 16).abs().amax(1).cpu()
    same(scales[:187].cpu(), amax * inv(127.0), "absmax scale = amax * (1/127)")
    packed, mm = kernels.int4_encode(x, block_size=16, scheme="minmax")
    nb = mm.numel() // 2
    lo, hi = mm[:nb].cpu(), mm[nb:].cpu()
    step = (0.5 * hi - 0.5 * lo) * inv(7.5)
    q = bitpack.unpack(packed, x.numel(), 4).cpu().float()
    n = x.numel()
    want = lo.repeat_interleave(16)[:n] + q * step.repeat_interleave(16)[:n]
    same(kernels.int4_decode(packed, mm, x.numel(), 16, "minmax").cpu(), want, "minmax decode")
    packed, norms = kernels.qsgd_encode(x, 15, 16, stochastic=False)
    codes = bitpack.unpack(packed, x.numel(), 5).cpu()
    mag = (codes & 15).float() * (norms.cpu() * inv(15.0)).repeat_interleave(16)[: x.numel()]
    want = torch.where(codes >= 16, -mag, mag)
    same(kernels.qsgd_decode(packed, norms, x.numel(), 15, 16).cpu(), want, "qsgd decode")


# -- the compiled (GPU) path, without a GPU ----------------------------------------------------
@pytest.mark.skipif(CUDA, reason="the CUDA tests above compile and run every kernel")
def test_kernels_compile_for_sm90(fresh_process):
    if not nvidia_backend():
        pytest.skip("this Triton has no NVIDIA backend")
    res = fresh_process  # ran compile_check.py --smoke after the import check
    assert res.returncode == 0 and "\n0 failure(s)\n" in res.stdout, (res.stdout[-3000:]
                                                                      + res.stderr[-3000:])
