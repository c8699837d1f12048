"""PowerSGD on one worker: the low-rank approximation, warm start, layout and wire size."""
import pytest
import torch

import gradcomp
from gradcomp.compressors.orthogonalize import orthogonalize_
from gradcomp.compressors.powersgd import square_view


def rel_error(c, m):
    out = c.decompress(c.compress(m))
    return ((out - m).norm() / m.norm()).item()


def test_error_falls_with_rank_and_vanishes_at_full_rank():
    g = torch.Generator().manual_seed(0)
    m = torch.randn(24, 16, generator=g, dtype=torch.float64)
    errors = [rel_error(gradcomp.compressor("powersgd", rank=r, error_feedback=False,
                                            min_compression_rate=0), m) for r in (1, 4, 8, 16)]
    assert errors == sorted(errors, reverse=True)
    assert errors[-1] < 1e-10


def test_exact_for_a_low_rank_matrix():
    g = torch.Generator().manual_seed(1)
    m = torch.randn(40, 2, generator=g, dtype=torch.float64) @ torch.randn(2, 30, generator=g,
                                                                          dtype=torch.float64)
    assert rel_error(gradcomp.compressor("powersgd", rank=2, error_feedback=False), m) < 1e-10


def test_warm_start_improves_a_fixed_matrix_over_calls():
    g = torch.Generator().manual_seed(2)
    m = torch.randn(64, 48, generator=g)
    c = gradcomp.compressor("powersgd", rank=2, error_feedback=False, warm_start=True)
    first = rel_error(c, m)
    for _ in range(10):
        last = rel_error(c, m)
    best = torch.linalg.svdvals(m.double())
    optimum = (best[2:].square().sum().sqrt() / best.square().sum().sqrt()).item()
    assert last < first and last < optimum * 1.01


def test_orthogonalize_gives_orthonormal_columns():
    for rank in (1, 2, 3, 5):
        x = orthogonalize_(torch.randn(4, 20, rank, dtype=torch.float64))
        eye = torch.eye(rank, dtype=torch.float64).expand(4, rank, rank)
        torch.testing.assert_close(x.transpose(1, 2) @ x, eye)


@pytest.mark.parametrize("numel", [1, 2, 10, 99, 100, 101, 25_600_000])
def test_square_view_holds_the_tensor(numel):
    rows, cols = square_view(numel)
    assert rows * cols >= numel and rows * cols - numel < max(rows, cols)


def test_wire_bytes_of_resnet50_sized_gradient():
    c = gradcomp.compressor("powersgd", rank=4)
    rows, cols = square_view(25_600_000)
    assert c.wire_nbytes(25_600_000) == (rows + cols) * 4 * 4


def test_min_compression_rate_leaves_small_and_1d_pieces_plain():
    c = gradcomp.compressor("powersgd", rank=4)
    lay = c.layout([torch.Size([64, 32]), torch.Size([64]), torch.Size([3, 3])])
    assert lay.plain == [1, 2] and list(lay.groups) == [(64, 32)]


def test_same_seed_same_initial_q_different_seed_different():
    m = torch.randn(30, 20)
    a, b, c = (gradcomp.compressor("powersgd", seed=s, error_feedback=False) for s in (5, 5, 6))
    assert torch.equal(a.decompress(a.compress(m)), b.decompress(b.compress(m)))
    assert not torch.equal(a.decompress(a.compress(m)), c.decompress(c.compress(m)))


@pytest.mark.parametrize("bad", [dict(rank=0), dict(rank=1.5), dict(min_compression_rate=-1)])
def test_bad_options_name_the_option(bad):
    (name,) = bad
    with pytest.raises(ValueError, match=name):
        gradcomp.compressor("powersgd", **bad)


def test_generic_error_feedback_wrapper_is_refused():
    from gradcomp.compressors import ErrorFeedback

    with pytest.raises(ValueError, match="error_feedback"):
        ErrorFeedback(gradcomp.compressor("powersgd"))


SHAPES = [torch.Size(s) for s in [(10,), (10, 64), (64,), (64, 64), (64,), (64, 64)]]


def _average_alone(c, flat: torch.Tensor, key=0) -> torch.Tensor:
    """One worker's begin / next_round / finish of a bucket (its own sums)."""
    step = c.begin(flat, SHAPES, key)
    plain = step.plain().clone()
    second = c.next_round(step, step.first().clone())
    out = flat.clone()
    c.finish(step, plain, second, out=out)
    return out


def test_kept_buffers_give_the_result_of_fresh_ones_bit_for_bit():
    kept, fresh = gradcomp.compressor("powersgd"), gradcomp.compressor("powersgd")
    gen = torch.Generator().manual_seed(0)
    n = sum(s.numel() for s in SHAPES)
    packed = set()
    for _ in range(4):
        flat = torch.randn(n, generator=gen)
        fresh._scratches.clear()
        a, b = _average_alone(kept, flat.clone()), _average_alone(fresh, flat.clone())
        assert torch.equal(a, b)
        assert torch.equal(kept.residuals[0], fresh.residuals[0])
        packed.add(next(iter(kept._scratch(0, "packed", flat.device).values())).data_ptr())
    assert len(packed) == 1  # one buffer for the bucket's matrices, reused


def test_state_dict_residuals_do_not_change_with_later_steps():
    c = gradcomp.compressor("powersgd")
    flat = torch.randn(sum(s.numel() for s in SHAPES))
    _average_alone(c, flat.clone())
    state = c.state_dict()
    saved = state["residuals"][0].clone()
    _average_alone(c, flat.clone())  # its corrected input takes over the residual's buffer
    assert torch.equal(state["residuals"][0], saved)


def test_a_payload_survives_the_next_compress_of_its_key():
    c = gradcomp.compressor("powersgd", error_feedback=False, min_compression_rate=100.0)
    a, b = torch.randn(2, 8, 8).unbind()  # too small to compress: plain pieces
    first = c.compress(a)
    c.compress(b)
    assert torch.equal(c.decompress(first), a)


def test_buffers_are_kept_on_the_cpu_only():
    # CUDA's caching allocator reuses freed blocks; kept buffers would hold ~2x the gradient.
    c = gradcomp.compressor("powersgd")
    assert c._scratch(0, "packed", torch.device("cpu")) is c._scratch(0, "packed",
                                                                      torch.device("cpu"))
    assert c._scratch(0, "packed", torch.device("cuda", 0)) is None
