#!/usr/bin/env python
"""PowerSGD's CPU encode against a plain reference of the same work (issue #34 item 3): per
tensor, view it as a matrix M, P = M Q, orthonormalise P by Gram-Schmidt, Q = M^T P, keep Q
(warm start) and, with error feedback, the residual M - P Q^T; no all-reduce (one worker).

    # script mode: gradcomp and the reference interleaved, medians of --repeats runs, a table
    # of ms and ratios (gradcomp / plain), torch.set_num_threads(--threads):
    python benchmarks/bench_powersgd_encode.py [--repeats 7] [--threads 2] [--only matrix,...]
    # pytest-benchmark (CI runs every case once, untimed, at a small size):
    python -m pytest benchmarks/bench_powersgd_encode.py --benchmark-enable --benchmark-only \
        --benchmark-group-by=param:case

Cases (rank 4, min_compression_rate 2, warm start; `+EF`: error feedback on):
* `matrix`: one 2048 x 12479 float32 gradient (ResNet-50's fc weight with a 12479-class head,
  the size the issue quotes);
* `resnet50`: ResNet-50's 161 parameter gradients (torchvision's shapes, in order), each
  compressed on its own under its own key, as a per-tensor framework (GRACE) calls it.
The reference follows gradcomp's layout rules, so both send the same tensors: a tensor of 2 or
more dimensions is the matrix (shape[0], rest), a 1-D one the most nearly square matrix that
holds it (zero-padded); a matrix that would not shrink by min_compression_rate travels as it
is; the first Q of each key is drawn as gradcomp draws it. Its Gram-Schmidt gives the same
column spaces as gradcomp's QR (rank > 2), so every case checks that the decoded tensors agree
to float32 rounding and that the wire sizes are equal, which keeps the reference honest.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time

import numpy as np
import pytest
import torch

try:
    import gradcomp
except ImportError:  # run from the repository root without PYTHONPATH
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import gradcomp
from gradcomp.evaluation.profiles.architectures import resnet_shapes

RANK = 4
MIN_RATE = 2.0


# -- the plain reference ---------------------------------------------------------------------
def gram_schmidt_(m: torch.Tensor) -> torch.Tensor:
    """Orthonormalise the columns of an (n, r) matrix in place, one column after another."""
    for i in range(m.shape[1]):
        col = m[:, i : i + 1]
        col /= torch.linalg.vector_norm(col)
        if i + 1 < m.shape[1]:
            rest = m[:, i + 1 :]
            rest -= (col * rest).sum(0) * col
    return m


def matrix_shape(shape: torch.Size) -> tuple[int, int]:
    numel = math.prod(shape)
    if len(shape) >= 2:
        return shape[0], numel // shape[0]
    rows = math.isqrt(max(numel - 1, 0)) + 1
    return rows, -(-numel // rows)


class PlainPowerSGD:
    """One tensor at a time: the simplest code of what gradcomp's `compress` computes."""

    def __init__(self, rank: int, error_feedback: bool, seed: int = 0):
        self.rank, self.error_feedback = rank, error_feedback
        self.seeds = np.random.RandomState(seed)
        self.qs: dict = {}
        self.residuals: dict = {}

    def compress(self, x: torch.Tensor, key) -> tuple[torch.Tensor, ...]:
        numel = x.numel()
        n, m = matrix_shape(x.shape)
        r = min(n, m, self.rank)
        work = x.reshape(-1)
        if key in self.residuals:
            work = work + self.residuals[key]
        if not (n + m) * r * MIN_RATE < n * m:
            return (work.clone(),)  # plain: no residual
        if n * m != numel:
            work = torch.cat([work, work.new_zeros(n * m - numel)])
        mat = work.view(n, m)
        q = self.qs.get(key)
        if q is None:
            gen = torch.Generator().manual_seed(int(self.seeds.randint(1_000_000_000)))
            q = torch.randn(m, r, generator=gen)
        p = gram_schmidt_(mat @ q)
        q = self.qs[key] = mat.T @ p
        if self.error_feedback:
            approx = (p @ q.T).view(-1)
            self.residuals[key] = (work - approx)[:numel].nan_to_num_(0.0, 0.0, 0.0)
        return p, q

    @staticmethod
    def decompress(wire: tuple[torch.Tensor, ...], shape: torch.Size) -> torch.Tensor:
        if len(wire) == 1:
            return wire[0].view(shape)
        p, q = wire
        return (p @ q.T).view(-1)[: math.prod(shape)].view(shape)


# -- cases -----------------------------------------------------------------------------------
CASES = ["matrix", "matrix+EF", "resnet50", "resnet50+EF"]


def shapes(case: str, small: bool) -> list[torch.Size]:
    """The case's gradient shapes (small: a 128 x 780 matrix; ResNet-50's stem and layer1)."""
    if case.startswith("matrix"):
        return [torch.Size((128, 780) if small else (2048, 12479))]
    all_shapes = resnet_shapes(50)
    return [torch.Size(s) for s in (all_shapes[:33] if small else all_shapes)]


def gradients(sizes: list[torch.Size], seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen) for s in sizes]


def steps(case: str):
    """(gradcomp step, plain step): each compresses every gradient of a list once and returns
    (wire tensors, shape) per gradient."""
    ef = case.endswith("+EF")
    c = gradcomp.compressor("powersgd", rank=RANK, min_compression_rate=MIN_RATE,
                            error_feedback=ef)
    ref = PlainPowerSGD(RANK, ef)

    def ours(grads):
        return [c.compress(g, key=i) for i, g in enumerate(grads)]

    def plain(grads):
        return [ref.compress(g, key=i) for i, g in enumerate(grads)]

    def decoded(out, grads):
        if out and isinstance(out[0], gradcomp.compressors.Payload):
            return [(c.decompress(p), p.nbytes) for p in out]
        return [(ref.decompress(w, g.shape), sum(t.numel() * 4 for t in w))
                for w, g in zip(out, grads)]
    return ours, plain, decoded


def agree(a, b) -> bool:
    """Same wire sizes; decoded tensors equal to float32 rounding (relative to their norm)."""
    return len(a) == len(b) and all(
        na == nb and float((da - db).norm()) <= 1e-4 * float(db.norm()) + 1e-30
        for (da, na), (db, nb) in zip(a, b))


# -- pytest ----------------------------------------------------------------------------------
@pytest.mark.parametrize("impl", ["gradcomp", "plain"])
@pytest.mark.parametrize("case", CASES)
def test_powersgd_encode(benchmark, case, impl):
    ours, plain, decoded = steps(case)
    grads = gradients(shapes(case, small=True))
    for step in range(3):  # warm start from step 2; with error feedback a residual too
        xs = [g * (1 + step) for g in grads]
        assert agree(decoded(ours(xs), xs), decoded(plain(xs), xs)), (case, step)
    benchmark.group = case
    benchmark(ours if impl == "gradcomp" else plain, grads)


# -- script ----------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="", help=f"comma-separated cases of {CASES}")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cases = args.only.split(",") if args.only else CASES
    print(f"# PowerSGD rank {RANK} encode, {torch.get_num_threads()} threads, torch "
          f"{torch.__version__}, {platform.processor() or platform.machine()}, median of "
          f"{args.repeats} (interleaved), load average {os.getloadavg()[0]:.2f}")
    print("| case | gradcomp ms | plain ms | gradcomp / plain |\n| --- | ---: | ---: | ---: |")
    for case in cases:
        ours, plain, decoded = steps(case)
        grads = gradients(shapes(case, small=False))
        for _ in range(2):  # warm-up: first Qs drawn, buffers kept, warm start running
            assert agree(decoded(ours(grads), grads), decoded(plain(grads), grads)), case
        times = {"gradcomp": [], "plain": []}
        for r in range(args.repeats):
            order = [("gradcomp", ours), ("plain", plain)]
            for name, fn in order if r % 2 == 0 else order[::-1]:
                t0 = time.perf_counter()
                fn(grads)
                times[name].append(time.perf_counter() - t0)
        a, b = (statistics.median(times[k]) * 1e3 for k in ("gradcomp", "plain"))
        print(f"| {case} | {a:.1f} | {b:.1f} | {a / b:.2f}x |", flush=True)
    print(f"# load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
