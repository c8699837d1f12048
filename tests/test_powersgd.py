"""PowerSGD on one worker: the low-rank approximation, warm start, layout and wire size."""
import pytest
import torch

import gradcomp
from gradcomp.compressors.powersgd import orthogonalize_, square_view


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
