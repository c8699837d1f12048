"""PowerSGD's one-worker `compress` (the CPU encode benchmarked in
benchmarks/bench_powersgd_encode.py): it equals the two-round protocol that the hooks drive
(begin / next_round / finish) to float32 rounding, sends orthonormal P, leaves the caller's
tensor alone, and keeps its residual in one buffer per key instead of a new one per call."""
import pytest
import torch

import gradcomp

# (shape, error feedback): a weight, a conv weight, a 1-D gradient viewed as a padded square
# matrix (45 x 45 holds 2000), and one too small to compress (sent plain).
CASES = [((48, 130), True), ((48, 130), False), ((16, 8, 3, 3), True), ((2000,), True),
         ((2000,), False), ((6,), True)]


def two_rounds(c, x, key):
    """One worker's begin / next_round / finish of `x` (its own sums): the plain pieces, P,
    Q, the result and the bytes sent."""
    flat = x.reshape(-1)
    step = c.begin(flat, [x.shape], key, flat_as_square=True)
    plain = step.plain().clone()
    q = c.next_round(step, step.first().clone())
    p = step.first().clone()
    return plain, p, q.clone(), c.finish(step, plain, q), step.nbytes()


@pytest.mark.parametrize("shape,ef", CASES)
def test_compress_equals_the_two_round_protocol(shape, ef):
    ours, hooks = (gradcomp.compressor("powersgd", rank=4, error_feedback=ef)
                   for _ in range(2))
    gen = torch.Generator().manual_seed(0)
    for step in range(4):  # warm start and residuals carried from step 2 on
        x = torch.randn(shape, generator=gen) * (1 + step)
        before = x.clone()
        payload = ours.compress(x, key="w")
        plain, p, q, decoded, nbytes = two_rounds(hooks, x, "w")
        assert torch.equal(x, before), "compress wrote into its input"
        for a, b in zip(payload.tensors, (plain, p, q)):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(ours.decompress(payload).reshape(-1), decoded, rtol=1e-4,
                                   atol=1e-5)
        assert payload.nbytes == nbytes
        if ef:
            torch.testing.assert_close(ours.residuals["w"], hooks.residuals["w"],
                                       rtol=1e-4, atol=1e-4)
        else:
            assert ours.residuals == {}


@pytest.mark.parametrize("shape", [(64, 300), (2000,)])
def test_sent_p_is_orthonormal(shape):
    c = gradcomp.compressor("powersgd", rank=4)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        _, p, _ = c.compress(x, key=0).tensors
        p = p.view(-1, 4)
        torch.testing.assert_close(p.T @ p, torch.eye(4), rtol=0, atol=1e-5)


@pytest.mark.parametrize("shape", [(64, 300), (2000,)])
def test_the_residual_keeps_one_buffer_per_key(shape):
    # A lone matrix's corrected input is written into the last residual's buffer (padding
    # included), not into a new one paged in on every call.
    c = gradcomp.compressor("powersgd", rank=4)
    gen = torch.Generator().manual_seed(2)
    ptrs = set()
    for _ in range(4):
        c.compress(torch.randn(shape, generator=gen), key=0)
        ptrs.add(c.residuals[0].data_ptr())
    assert len(ptrs) == 1


def test_a_loaded_residual_gives_the_same_steps():
    # A loaded residual is a fresh tensor of the gradient's size (no padding behind it): the
    # steps after it equal those of the compressor it was saved from.
    a, b = (gradcomp.compressor("powersgd", rank=4) for _ in range(2))
    gen = torch.Generator().manual_seed(3)
    xs = [torch.randn(2000, generator=gen) for _ in range(4)]
    for x in xs[:2]:
        a.compress(x, key=0)
    b.load_state_dict(a.state_dict())
    for x in xs[2:]:
        pa, pb = a.compress(x, key=0), b.compress(x, key=0)
        for u, v in zip(pa.tensors, pb.tensors):
            torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(a.residuals[0], b.residuals[0], rtol=1e-5, atol=1e-6)


def test_without_error_feedback_the_matrix_is_the_input_itself():
    c = gradcomp.compressor("powersgd", rank=4, error_feedback=False)
    x = torch.randn(64, 300)
    payload = c.compress(x, key=0)
    assert payload.meta["step"].work.data_ptr() == x.data_ptr()  # no copy of the gradient
    # warm start keeps the Q it sent
    assert torch.equal(c.memories[0][(64, 300)].reshape(-1), payload.tensors[2])


@pytest.mark.parametrize("ef", [False, True])
def test_sent_q_is_m_transposed_times_p(ef):
    # On the CPU Q = M^T P is computed as (P^T M)^T: the same products, another order.
    c = gradcomp.compressor("powersgd", rank=4, error_feedback=ef)
    x = torch.randn(64, 300, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    for _ in range(2):
        corrected = x + c.residuals.get(0, torch.zeros(x.numel(), dtype=x.dtype)).view_as(x)
        _, p, q = c.compress(x, key=0).tensors
        torch.testing.assert_close(q.view(300, 4), corrected.T @ p.view(64, 4))
