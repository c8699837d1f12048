"""The batched orthogonalisation kernel (gradcomp.kernels.orthogonalize_) against PowerSGD's
torch reference (gradcomp.compressors.orthogonalize's Gram-Schmidt for r <= 2, QR for r > 2).

Without a GPU the kernel runs on CPU tensors under Triton's interpreter (TRITON_INTERPRET=1 is
set below, before the kernels load), and the compile test builds it for sm_90; with a GPU the
same tests run on CUDA tensors against the torch code on the same device.

Tolerances (float32, n <= 300 rows): r <= 2, the kernel runs the reference's own steps, so the
matrices agree to rounding: |kernel - torch| <= 1e-6 + 1e-5 |torch|. r > 2, QR's columns are
fixed only up to sign, so the column spaces are compared: Q Q^T to 2e-6 absolute (its entries
are O(r / n)), and Q^T Q = I to 2e-6.
"""
import pytest
import torch
# test_kernels sets TRITON_INTERPRET=1 without a GPU (before the kernels load) and skips
# without Triton.
from test_kernels import CUDA, DEVICE

import gradcomp
from gradcomp import kernels
from gradcomp.compressors import orthogonalize
from gradcomp.kernels.orthogonal import reference as torch_code

# The interpreter evaluates both sides of tl.where in numpy, which warns about NaN/Inf there.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
EXACT_TOL = dict(rtol=1e-5, atol=1e-6)
SPACE_TOL = dict(rtol=0.0, atol=2e-6)


def randn(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(DEVICE)


def reference(x, eps=0.0):
    return torch_code.orthogonalize_torch(x.clone(), eps)


def kernel(x, eps=0.0, **kw):
    return kernels.orthogonalize_(x.clone(), eps, **kw)


def same_nan(a, b):
    assert torch.equal(a.isnan(), b.isnan()), "NaN positions differ"
    torch.testing.assert_close(torch.nan_to_num(a), torch.nan_to_num(b), **EXACT_TOL)


def orthonormal(q):
    eye = torch.eye(q.shape[2], device=q.device).expand(q.shape[0], -1, -1)
    torch.testing.assert_close(q.transpose(1, 2) @ q, eye, **SPACE_TOL)


def same_space(q, ref):
    torch.testing.assert_close(q @ q.transpose(1, 2), ref @ ref.transpose(1, 2), **SPACE_TOL)


# -- agreement with the torch reference on fresh random batches --------------------------------
# (b, n, r, chunk_rows): chunk_rows None keeps a matrix in one register tile; a small one makes
# the kernel loop over row chunks (n not a multiple of it).
GS_CASES = [(1, 37, 1, None), (3, 50, 2, None), (1, 70, 1, 16), (2, 45, 2, 16)]
QR_CASES = [(1, 40, 3, None), (3, 64, 4, None), (2, 300, 8, None), (2, 45, 5, 16), (1, 70, 3, 32)]


@pytest.mark.parametrize("b,n,r,chunk", GS_CASES)
@pytest.mark.parametrize("eps", [0.0, 1e-2])
def test_gram_schmidt_equals_the_reference(b, n, r, chunk, eps):
    x = randn(b, n, r, seed=n * 10 + r) * 3
    torch.testing.assert_close(kernel(x, eps, chunk_rows=chunk), reference(x, eps), **EXACT_TOL)


@pytest.mark.parametrize("b,n,r,chunk", QR_CASES)
def test_qr_same_column_space_and_orthonormal(b, n, r, chunk):
    x = randn(b, n, r, seed=n * 10 + r)
    q = kernel(x, chunk_rows=chunk)
    same_space(q, reference(x))
    orthonormal(q)
    # the same span column by column (Gram-Schmidt and QR both triangularise): R = Q^T x
    r_mat = q.transpose(1, 2) @ x
    torch.testing.assert_close(torch.tril(r_mat, -1), torch.zeros_like(r_mat), rtol=0, atol=1e-5)


def test_flat_batches_of_several_shapes_in_one_launch():
    shapes = [(2, 40, 1), (1, 33, 2), (3, 50, 4), (1, 20, 3)]
    parts = [randn(b, n, r, seed=i) for i, (b, n, r) in enumerate(shapes)]
    flat = torch.cat([p.reshape(-1) for p in parts])
    out = kernels.orthogonalize_(flat.clone(), 0.0, shapes=shapes)
    offset = 0
    for (b, n, r), x in zip(shapes, parts):
        q = out[offset : offset + b * n * r].view(b, n, r)
        offset += b * n * r
        if r <= 2:
            torch.testing.assert_close(q, reference(x), **EXACT_TOL)
        else:
            same_space(q, reference(x))
            orthonormal(q)


# -- zero and non-finite columns ----------------------------------------------------------------
@pytest.mark.parametrize("chunk", [None, 16])
@pytest.mark.parametrize("eps", [0.0, 1e-3])
def test_gram_schmidt_zero_columns_as_the_reference(chunk, eps):
    x = randn(3, 40, 2, seed=5)
    x[0, :, 0] = 0  # eps 0: the whole matrix NaN, as in torch
    x[1, :, 1] = 0  # eps 0: column 1 NaN
    same_nan(kernel(x, eps, chunk_rows=chunk), reference(x, eps))


@pytest.mark.parametrize("chunk", [None, 16])
def test_qr_completes_zero_columns_like_qr(chunk):
    x = randn(3, 40, 4, seed=6)
    x[0] = 0                       # QR of a zero matrix: the identity's columns
    x[1, :, 1] = 0                 # a zero column in the middle
    x[2, :, 2] = x[2, :, 0] * 2.5  # a repeated direction (rank deficient)
    ref = reference(x)
    q = kernel(x, chunk_rows=chunk)
    assert torch.isfinite(ref).all() and torch.isfinite(q).all()
    torch.testing.assert_close(q[0], torch.eye(40, 4, device=DEVICE), rtol=0, atol=0)
    orthonormal(q)
    torch.testing.assert_close(q @ (q.transpose(1, 2) @ x), x, rtol=0, atol=1e-5)  # x in span
    same_space(q[1:, :, :1], ref[1:, :, :1])  # before the degenerate column: the same span


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("r", [1, 2, 4])
def test_non_finite_spreads_as_in_the_reference(value, r):
    x = randn(3, 30, r, seed=7)
    col = r // 2
    x[1, 4, col] = value
    q, ref = kernel(x), reference(x)
    # what `identity_if_not_finite` looks at: which matrices are finite
    assert torch.equal(torch.isfinite(q).all(dim=(1, 2)), torch.isfinite(ref).all(dim=(1, 2)))
    assert torch.isfinite(q[1, :, :col]).all()  # the columns before it stay finite
    assert (~torch.isfinite(q[1, :, col:])).any(dim=0).all()  # it and those after it do not
    if r <= 2:
        same_nan(q, ref)
    else:  # the columns before it span what the finite columns span
        same_space(q[1:2, :, :col], torch.linalg.qr(x[1:2, :, :col])[0])
    keep = [0, 2]
    if r <= 2:
        torch.testing.assert_close(q[keep], ref[keep], **EXACT_TOL)
    else:
        same_space(q[keep], ref[keep])


@pytest.mark.parametrize("chunk", [None, 16])
@pytest.mark.parametrize("r", [2, 4])
def test_finite_or_eye_replaces_non_finite_matrices(chunk, r):
    x = randn(3, 40, r, seed=8)
    x[1, 3, 0] = float("nan")
    x[2, 0, r - 1] = float("-inf")
    q = kernel(x, finite_or_eye=True, chunk_rows=chunk)
    want = reference(torch_code.identity_if_not_finite(x))
    if r <= 2:
        torch.testing.assert_close(q, want, **EXACT_TOL)
    else:
        same_space(q, want)
    torch.testing.assert_close(q[1:], torch.eye(40, r, device=DEVICE).expand(2, -1, -1))


def test_empty_batch_is_a_no_op():
    x = torch.empty(0, 10, 2, device=DEVICE)
    assert kernels.orthogonalize_(x) is x


@pytest.mark.parametrize("bad,match", [
    (lambda: kernels.orthogonalize_(torch.zeros(2, 8, 2, dtype=torch.float64, device=DEVICE)),
     "float32"),
    (lambda: kernels.orthogonalize_(torch.zeros(2, 2, 8, device=DEVICE).transpose(1, 2)),
     "contiguous"),
    (lambda: kernels.orthogonalize_(torch.zeros(2, 3, 4, device=DEVICE)), "r <= min"),
    (lambda: kernels.orthogonalize_(torch.zeros(2, 8, 2, device=DEVICE), -1.0), "epsilon"),
    (lambda: kernels.orthogonalize_(torch.zeros(2, 8, 2, device=DEVICE), chunk_rows=24),
     "chunk_rows"),
    (lambda: kernels.orthogonalize_(torch.zeros(10, device=DEVICE), shapes=[(1, 4, 2)]),
     "shapes"),
    (lambda: kernels.orthogonalize_(torch.zeros(8, 2, device=DEVICE)), r"\(b, n, r\)"),
])
def test_bad_input_is_refused_with_the_option_named(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        bad()


# -- PowerSGD through the kernel against its torch path ----------------------------------------
@pytest.fixture
def kernel_path(monkeypatch):
    """PowerSGD's dispatch to the kernel: the real one on a GPU; on the CPU the same dispatch
    with CPU tensors allowed (the interpreter runs the kernel)."""
    if not CUDA:
        def use_kernel(t, max_rank=None):
            ok = t.dtype == torch.float32 and t.is_contiguous() and t.numel() > 0
            return ok and (max_rank is not None or t.shape[2] <= t.shape[1])

        monkeypatch.setattr(orthogonalize, "use_kernel", use_kernel)
    calls = []
    real = kernels.orthogonalize_

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(kernels, "orthogonalize_", spy, raising=False)
    yield
    assert calls, "PowerSGD never called the orthogonalisation kernel"


def torch_path_run(fn):
    """fn() with PowerSGD on its torch code."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(orthogonalize, "use_kernel", lambda t, max_rank=None: False)
        return fn()


def hook_steps(comp, shapes, flats):
    """begin / next_round / finish as the DDP hook drives them (one rank); the outputs."""
    outs = []
    for flat in flats:
        step = comp.begin(flat, shapes, key=0)
        plain = step.plain().clone()
        q = comp.next_round(step, step.first())
        outs.append(comp.finish(step, plain, q).clone())
    return outs


@pytest.mark.parametrize("rank", [1, 2, 4])
def test_powersgd_through_the_kernel_matches_the_torch_path(kernel_path, rank):
    shapes = [torch.Size(s) for s in [(48, 3, 3, 3), (48,), (48, 40), (20, 30), (48, 40), (7,)]]
    numel = sum(s.numel() for s in shapes)
    flats = [randn(numel, seed=20 + i) for i in range(3)]
    # a zero matrix: torch's Gram-Schmidt gives NaN at epsilon 0 (so r <= 2 runs with 1e-8), QR
    # does not
    flats[1][: shapes[0].numel()] = 0
    opts = dict(rank=rank, seed=4, orthogonalization_epsilon=1e-8 if rank <= 2 else 0.0)
    ours = hook_steps(gradcomp.compressor("powersgd", **opts), shapes, flats)
    ref = torch_path_run(lambda: hook_steps(gradcomp.compressor("powersgd", **opts), shapes,
                                            flats))
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    comp = gradcomp.compressor("powersgd", rank=rank, seed=4)
    ref_comp = gradcomp.compressor("powersgd", rank=rank, seed=4)
    m = randn(60, 50, seed=30)
    for _ in range(2):  # warm start and error feedback through compress / decompress
        got = comp.decompress(comp.compress(m, key="m"))
        want = torch_path_run(lambda: ref_comp.decompress(ref_comp.compress(m, key="m")))
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_powersgd_recovers_from_a_non_finite_gradient_through_the_kernel(kernel_path):
    comp = gradcomp.compressor("powersgd", rank=3, seed=1)
    m = randn(40, 30, seed=31)
    bad = m.clone()
    bad[2, 3] = float("nan")
    assert not torch.isfinite(comp.decompress(comp.compress(bad, key=0))).all()
    out = comp.decompress(comp.compress(m, key=0))  # Q memory was NaN: restarts from eye
    assert torch.isfinite(out).all()
