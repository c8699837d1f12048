"""PowerSGD: rank-r approximation by one step of subspace iteration (Vogels, Karimireddy and
Jaggi, NeurIPS 2019), in the form of torch's `powerSGD_hook`.

For each matrix M (n x m) and a Q (m x r) shared by all ranks (random at first, then the last
step's Q: warm start): P = M Q, all-reduce P, orthogonalise P, Q = M^T P, all-reduce Q and divide
by the number of workers; the approximation is P Q^T. The steps are exposed as `begin`,
`next_round` and `finish` so that a communicator can put an all-reduce between them;
`compress` runs them on one worker.

Error feedback is part of the method (as in the paper and in torch): the residual is the
corrected gradient minus the *aggregated* approximation, so it is kept here rather than by the
generic wrapper. Tensors whose matrix is too small to save `min_compression_rate` travel
uncompressed. Matrices of the same shape are processed as one batch.

Views: a tensor of 2 or more dimensions is the matrix (shape[0], rest); a 1-D tensor given to
`compress` is a flattened gradient and is viewed as the most nearly square matrix that holds it
(zero-padded). Communicators that pass per-parameter shapes leave 1-D parameters (biases)
uncompressed, as torch does. P and Q are computed and sent in float32 (float64 for float64).

Non-finite values: a NaN or Inf in a matrix spreads through P and Q to the whole matrix.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Hashable

import numpy as np
import torch

from .base import Compressor, Payload, check_bool, check_int, check_tensor, work_dtype
from .memory import finite_or_zero
from .registry import register


def orthogonalize_(matrices: torch.Tensor, epsilon: float = 0.0) -> torch.Tensor:
    """Orthonormalise the columns of a batch of tall matrices (b, n, r) in place: Gram-Schmidt
    for r <= 2, QR otherwise (as torch's hook does)."""
    rank = matrices.shape[2]
    if rank > 2:
        q, _ = torch.linalg.qr(matrices)
        return matrices.copy_(q)
    for i in range(rank):
        col = matrices[:, :, i : i + 1]
        col /= torch.linalg.vector_norm(col, dim=1, keepdim=True) + epsilon
        if i + 1 < rank:
            rest = matrices[:, :, i + 1 :]
            rest -= torch.sum(col * rest, dim=1, keepdim=True) * col
    return matrices


def square_view(numel: int) -> tuple[int, int]:
    """The most nearly square (rows, cols) with rows * cols >= numel."""
    rows = max(1, math.isqrt(max(numel - 1, 0)) + 1) if numel else 1
    return rows, max(1, -(-numel // rows))


@dataclass
class _Layout:
    """How a flat buffer splits into matrices: which are compressed, grouped by shape."""

    pieces: list[tuple[int, int, tuple[int, int]]]  # (offset, numel, matrix shape) per tensor
    groups: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # shape -> piece ids
    plain: list[int] = field(default_factory=list)  # pieces sent uncompressed
    rank: dict[tuple[int, int], int] = field(default_factory=dict)

    @property
    def plain_numel(self) -> int:
        return sum(self.pieces[i][1] for i in self.plain)

    def low_rank_numel(self, which: int) -> int:
        """Elements of all P (which=0) or Q (which=1) matrices."""
        return sum(len(ids) * shape[which] * self.rank[shape] for shape, ids in self.groups.items())


@dataclass
class PowerStep:
    """One PowerSGD call in flight: the corrected input, its matrices, P and Q."""

    key: Hashable
    layout: _Layout
    work: torch.Tensor  # corrected flat input (float32/64)
    out_dtype: torch.dtype
    mats: dict[tuple[int, int], torch.Tensor]  # shape -> (b, n, m)
    qs: dict[tuple[int, int], torch.Tensor]  # shape -> (b, m, r)
    ps: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)

    def plain(self) -> torch.Tensor:
        """The uncompressed pieces, concatenated, in the output dtype."""
        pieces = [self.layout.pieces[i] for i in self.layout.plain]
        flat = [self.work[o : o + n] for o, n, _ in pieces]
        if not flat:
            return self.work.new_zeros(0, dtype=self.out_dtype)
        return torch.cat(flat).to(self.out_dtype)

    def p_flat(self) -> torch.Tensor:
        return _cat_flat(self.ps.values(), self.work)

    def q_flat(self) -> torch.Tensor:
        return _cat_flat(self.qs.values(), self.work)


def _cat_flat(tensors, like: torch.Tensor) -> torch.Tensor:
    tensors = [t.reshape(-1) for t in tensors]
    return torch.cat(tensors) if tensors else like.new_zeros(0)


def _split_like(flat: torch.Tensor, like: dict) -> dict:
    out, offset = {}, 0
    for shape, t in like.items():
        out[shape] = flat[offset : offset + t.numel()].view_as(t)
        offset += t.numel()
    return out


@register
class PowerSGD(Compressor):
    """Low-rank PowerSGD with warm start and built-in error feedback (see module docstring)."""

    name = "powersgd"
    aggregation = "allreduce"
    shared_randomness = True
    handles_error_feedback = True
    default_error_feedback = True

    def __init__(self, rank: int = 1, warm_start: bool = True, min_compression_rate: float = 2.0,
                 error_feedback: bool = True, orthogonalization_epsilon: float = 0.0,
                 seed: int = 0):
        self.rank_r = check_int(rank, "rank", 1)
        if isinstance(min_compression_rate, bool) or not isinstance(
                min_compression_rate, (int, float)) or not min_compression_rate >= 0:
            raise ValueError(f"min_compression_rate={min_compression_rate!r} is not allowed: "
                             "it must be a number >= 0")
        if isinstance(orthogonalization_epsilon, bool) or not isinstance(
                orthogonalization_epsilon, (int, float)) or not orthogonalization_epsilon >= 0:
            raise ValueError(f"orthogonalization_epsilon={orthogonalization_epsilon!r} is not "
                             "allowed: it must be a number >= 0")
        self.warm_start = check_bool(warm_start, "warm_start")
        self.min_compression_rate = float(min_compression_rate)
        self.error_feedback = check_bool(error_feedback, "error_feedback")
        self.epsilon = float(orthogonalization_epsilon)
        self.seed = check_int(seed, "seed", 0, 2**32 - 1)
        self._seed_stream = np.random.RandomState(self.seed)
        self.memories: dict[Hashable, dict[tuple[int, int], torch.Tensor]] = {}
        self.residuals: dict[Hashable, torch.Tensor] = {}

    def options(self) -> dict[str, Any]:
        return {"rank": self.rank_r, "warm_start": self.warm_start,
                "min_compression_rate": self.min_compression_rate,
                "error_feedback": self.error_feedback,
                "orthogonalization_epsilon": self.epsilon, "seed": self.seed}

    # -- layout ----------------------------------------------------------------------------
    def layout(self, shapes: list[torch.Size], flat_as_square: bool = False) -> _Layout:
        """Split a flat buffer holding tensors of `shapes` into compressed matrices and plain
        pieces."""
        pieces, offset = [], 0
        lay = _Layout(pieces)
        for i, shape in enumerate(shapes):
            numel = math.prod(shape)
            if len(shape) >= 2:
                mat = (shape[0], numel // shape[0] if shape[0] else 0)
            elif flat_as_square:
                mat = square_view(numel)
            else:
                mat = (numel, 1)
            pieces.append((offset, numel, mat))
            offset += numel
            n, m = mat
            r = min(n, m, self.rank_r)
            if numel and r >= 1 and (n + m) * r * self.min_compression_rate < n * m:
                lay.groups.setdefault(mat, []).append(i)
                lay.rank[mat] = r
            else:
                lay.plain.append(i)
        return lay

    # -- the three steps -------------------------------------------------------------------
    def begin(self, flat: torch.Tensor, shapes: list[torch.Size], key: Hashable = None,
              flat_as_square: bool = False) -> PowerStep:
        """Add the residual, build the matrices and compute P = M Q (to be all-reduced)."""
        check_tensor(flat)
        layout = self.layout(shapes, flat_as_square)
        work = flat.to(work_dtype(flat.dtype), copy=True)
        residual = self.residuals.get(key)
        if self.error_feedback and residual is not None and residual.shape == work.shape:
            work += residual
        mats = {shape: torch.stack([_padded(work, layout.pieces[i], shape) for i in ids])
                for shape, ids in layout.groups.items()}
        qs = self.memories.get(key, {}) if self.warm_start else {}
        if [(s, q.shape, q.device) for s, q in qs.items()] != [
                (s, (len(ids), s[1], layout.rank[s]), work.device)
                for s, ids in layout.groups.items()]:
            qs = self._fresh_qs(layout, work)
        qs = {shape: orthogonalize_(_finite_or_eye(q), self.epsilon) for shape, q in qs.items()}
        step = PowerStep(key, layout, work, flat.dtype, mats, qs)
        step.ps = {s: torch.bmm(mats[s], qs[s]) for s in mats}
        return step

    def _fresh_qs(self, layout: _Layout, work: torch.Tensor) -> dict:
        """Random Qs shared by all ranks, drawn on the CPU as torch's hook draws them (a new
        seed from a NumPy stream, then one matrix after another), so both agree."""
        gen = torch.Generator().manual_seed(int(self._seed_stream.randint(1_000_000_000)))
        return {shape: torch.stack([torch.randn(shape[1], layout.rank[shape], generator=gen,
                                                dtype=work.dtype) for _ in ids]).to(work.device)
                for shape, ids in layout.groups.items()}

    def shared_state(self) -> bytes:
        return repr(self._seed_stream.get_state()).encode()

    def next_round(self, step: PowerStep, p_sum: torch.Tensor) -> torch.Tensor:
        """Take the summed P, orthogonalise it and return Q = M^T P (to be all-reduced)."""
        step.ps = _split_like(p_sum.to(step.work.dtype), step.ps)
        for shape, p in step.ps.items():
            orthogonalize_(p, self.epsilon)
            step.qs[shape] = torch.bmm(step.mats[shape].transpose(1, 2), p)
        return step.q_flat()

    def finish(self, step: PowerStep, plain_mean: torch.Tensor, q_mean: torch.Tensor,
               out: torch.Tensor | None = None) -> torch.Tensor:
        """Decode P Q^T with the averaged Q into `out` (flat), keep Q and the residual."""
        qs = _split_like(q_mean.to(step.work.dtype), step.qs)
        result = _assemble(step, plain_mean, step.ps, qs)
        lay = step.layout
        if self.warm_start:
            self.memories[step.key] = qs
        if self.error_feedback:
            residual = step.work - result
            for i in lay.plain:  # exact all-reduce: nothing to remember
                o, n, _ = lay.pieces[i]
                residual[o : o + n] = 0
            self.residuals[step.key] = finite_or_zero(residual)
        if out is None:
            return result.to(step.out_dtype)
        return out.copy_(result)

    # -- one worker: the Compressor interface ---------------------------------------------
    def compress(self, tensor: torch.Tensor, key: Hashable = None) -> Payload:
        check_tensor(tensor)
        shapes = [tensor.shape] if tensor.dim() else [torch.Size([1])]
        step = self.begin(tensor.reshape(-1), shapes, key, flat_as_square=True)
        plain = step.plain()
        q = self.next_round(step, step.p_flat())
        p = step.p_flat()
        meta = {"step": step}
        if self.error_feedback or self.warm_start:
            self.finish(step, plain, q)
        return Payload((plain, p, q), tensor.shape, tensor.dtype, meta)

    def decompress(self, payload: Payload) -> torch.Tensor:
        step: PowerStep = payload.meta["step"]
        plain, p, q = payload.tensors
        result = _assemble(step, plain, _split_like(p, step.ps), _split_like(q, step.qs))
        return result.to(payload.dtype).reshape(payload.shape)

    def aggregate(self, payloads: list[Payload]) -> torch.Tensor:
        raise TypeError("powersgd aggregates by two all-reduce rounds (begin / next_round / "
                        "finish), not by gathering payloads")

    def wire_nbytes(self, numel: int, dtype: torch.dtype = torch.float32) -> int:
        lay = self.layout([torch.Size([numel])], flat_as_square=True)
        work_bytes = 8 if dtype == torch.float64 else 4
        low_rank = lay.low_rank_numel(0) + lay.low_rank_numel(1)
        return lay.plain_numel * dtype.itemsize + low_rank * work_bytes

    def state_dict(self) -> dict[str, Any]:
        return {"seed_stream": self._seed_stream.get_state(),
                "memories": {k: dict(v) for k, v in self.memories.items()},
                "residuals": dict(self.residuals)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._seed_stream.set_state(state["seed_stream"])
        self.memories = {k: dict(v) for k, v in state["memories"].items()}
        self.residuals = {k: v.clone() for k, v in state["residuals"].items()}


def _finite_or_eye(q: torch.Tensor) -> torch.Tensor:
    """A copy of the stacked Qs (b, m, r) where a Q that holds NaN/Inf (after a non-finite
    gradient) is replaced by the first r columns of the identity, so warm start recovers; the
    same on every rank, since Q was all-reduced, and without a host sync."""
    eye = torch.eye(q.shape[1], q.shape[2], dtype=q.dtype, device=q.device).expand_as(q)
    return torch.where(torch.isfinite(q).all(dim=(1, 2), keepdim=True), q, eye)


def _assemble(step: PowerStep, plain: torch.Tensor, ps: dict, qs: dict) -> torch.Tensor:
    """The flat result: plain pieces as given, compressed ones as P Q^T."""
    lay = step.layout
    result = torch.empty_like(step.work)
    offset = 0
    for i in lay.plain:
        o, n, _ = lay.pieces[i]
        result[o : o + n] = plain[offset : offset + n]
        offset += n
    for shape, ids in lay.groups.items():
        approx = torch.bmm(ps[shape], qs[shape].transpose(1, 2)).reshape(len(ids), -1)
        for row, i in zip(approx, ids):
            o, n, _ = lay.pieces[i]
            result[o : o + n] = row[:n]
    return result


def _padded(work: torch.Tensor, piece: tuple[int, int, tuple[int, int]],
            shape: tuple[int, int]) -> torch.Tensor:
    """The matrix view of one piece of the flat buffer (zero-padded for square views)."""
    offset, numel, _ = piece
    flat = work[offset : offset + numel]
    n, m = shape
    if n * m != numel:
        flat = torch.cat([flat, flat.new_zeros(n * m - numel)])
    return flat.view(n, m)
