"""PowerSGD: rank-r approximation by one step of subspace iteration (Vogels, Karimireddy and
Jaggi, NeurIPS 2019), in the form of torch's `powerSGD_hook`.

For each matrix M (n x m) and a Q (m x r) shared by all ranks (random at first, then the last
step's Q: warm start): P = M Q, all-reduce P, orthogonalise P, Q = M^T P, all-reduce Q and divide
by the number of workers; the approximation is P Q^T. The steps are `begin`, `next_round` and
`finish` (the `TwoRoundCompressor` protocol), so that a communicator can put an all-reduce
between them; `compress` runs them on one worker.

Error feedback is part of the method (as in the paper and in torch): the residual is the
corrected gradient minus the *aggregated* approximation, so it is kept here rather than by the
generic wrapper. Tensors whose matrix is too small to save `min_compression_rate` travel
uncompressed. Matrices of the same shape are processed as one batch.

Views: a tensor of 2 or more dimensions is the matrix (shape[0], rest); a 1-D tensor given to
`compress` is a flattened gradient and is viewed as the most nearly square matrix that holds it
(zero-padded). Communicators that pass per-parameter shapes leave 1-D parameters (biases)
uncompressed, as torch does. P and Q are computed and sent in float32 (float64 for float64).

Non-finite values: a NaN or Inf in a matrix spreads through P and Q to the whole matrix.

On a GPU (float32 on CUDA, `gradcomp.kernels.available()`), the orthogonalisations of a call
run as one Triton launch over all its matrices (`gradcomp.kernels.orthogonalize_`), and the
pieces of a bucket are gathered and scattered by a few batched copies, not one per parameter.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Hashable

import numpy as np
import torch

from ..checks import check_bool, check_int
from ..kernels.blocks import reused
from .base import Payload, TwoRoundCompressor, check_tensor, work_dtype
from .memory import finite_or_zero
from .orthogonalize import orthogonalize_all
from .registry import register


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

    @functools.cached_property
    def plain_numel(self) -> int:
        return sum(self.pieces[i][1] for i in self.plain)

    def low_rank_numel(self, which: int) -> int:
        """Elements of all P (which=0) or Q (which=1) matrices."""
        return sum(len(ids) * shape[which] * self.rank[shape] for shape, ids in self.groups.items())

    def low_rank_shapes(self, which: int) -> list[tuple[int, int, int]]:
        """(b, n, r) of the P (which=0) or Q (which=1) batches, in group order."""
        return [(len(ids), shape[which], self.rank[shape]) for shape, ids in self.groups.items()]

    @functools.cached_property
    def plain_runs(self) -> list[tuple[int, int]]:
        """(offset, numel) of the plain pieces, adjacent pieces merged, in order."""
        runs: list[list[int]] = []
        for i in self.plain:
            o, n, _ = self.pieces[i]
            if runs and runs[-1][0] + runs[-1][1] == o:
                runs[-1][1] += n
            elif n:
                runs.append([o, n])
        return [tuple(r) for r in runs]


@dataclass
class PowerStep:
    """One PowerSGD call in flight: the corrected input, its matrices, P and Q (each batch a
    view of one flat buffer: `packed` holds the plain pieces then the matrices)."""

    key: Hashable
    layout: _Layout
    work: torch.Tensor  # corrected flat input (float32/64)
    out_dtype: torch.dtype
    packed: torch.Tensor  # the plain pieces, then every batch of matrices
    mats: dict[tuple[int, int], torch.Tensor]  # shape -> (b, n, m)
    q_buf: torch.Tensor
    qs: dict[tuple[int, int], torch.Tensor]  # shape -> (b, m, r), views of q_buf
    p_buf: torch.Tensor | None = None
    ps: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)  # views of p_buf

    def plain(self) -> torch.Tensor:
        """The uncompressed pieces, concatenated, in the output dtype (in the work dtype, a
        view of the step's scratch: callers may reduce it in place)."""
        return self.packed[: self.layout.plain_numel].to(self.out_dtype)

    def first(self) -> torch.Tensor:
        """All P matrices, flat (the step's own buffer): round 1's wire tensor."""
        return self.p_buf

    def nbytes(self) -> int:
        """Bytes on the wire: the plain pieces (output dtype), then P and Q (work dtype)."""
        plain = self.layout.plain_numel * self.out_dtype.itemsize
        return plain + (self.p_buf.numel() + self.q_buf.numel()) * self.work.element_size()


def _split(flat: torch.Tensor, keys, shapes) -> dict:
    """Views of `flat` of the (b, n, r) `shapes`, laid end to end, keyed by `keys`."""
    out, offset = {}, 0
    for key, (b, n, r) in zip(keys, shapes):
        out[key] = flat[offset : offset + b * n * r].view(b, n, r)
        offset += b * n * r
    return out


def _bmm_flat(a: dict, b: dict, transpose_a: bool, like: torch.Tensor) -> torch.Tensor:
    """a[k] @ b[k] (a[k] transposed with `transpose_a`) for every key, flat and concatenated.
    (Not written into views of one buffer with `out=`: on the CPU, MKL's result depends on the
    alignment of its operands.) On the CPU M^T P is (P^T M)^T: MKL's M^T P took 7-10x the
    time of M Q, (P^T M)^T about as long as M Q (2048 x 12479, rank 4, one thread)."""
    def product(k):
        if transpose_a and a[k].device.type == "cpu":
            return torch.bmm(b[k].transpose(1, 2), a[k]).transpose(1, 2)
        return torch.bmm(a[k].transpose(1, 2) if transpose_a else a[k], b[k])
    out = [product(k).reshape(-1) for k in a]
    return (torch.cat(out) if len(out) > 1 else out[0]) if out else like.new_zeros(0)


@register
class PowerSGD(TwoRoundCompressor):
    """Low-rank PowerSGD with warm start and built-in error feedback (see module docstring)."""

    name = "powersgd"
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
        self._layouts: dict[tuple, _Layout] = {}
        self._scratches: dict[tuple, dict] = {}

    def options(self) -> dict[str, Any]:
        return {"rank": self.rank_r, "warm_start": self.warm_start,
                "min_compression_rate": self.min_compression_rate,
                "error_feedback": self.error_feedback,
                "orthogonalization_epsilon": self.epsilon, "seed": self.seed}

    # -- layout ----------------------------------------------------------------------------
    _LAYOUT_CACHE = 64  # layouts kept per compressor (one per bucket in a hook)

    def layout(self, shapes: list[torch.Size], flat_as_square: bool = False) -> _Layout:
        """Split a flat buffer holding tensors of `shapes` into compressed matrices and plain
        pieces (cached by shapes and options)."""
        key = (tuple(tuple(s) for s in shapes), flat_as_square, self.rank_r,
               self.min_compression_rate)
        lay = self._layouts.get(key)
        if lay is None:
            lay = self._layouts[key] = self._new_layout(shapes, flat_as_square)
            if len(self._layouts) > self._LAYOUT_CACHE:
                del self._layouts[next(iter(self._layouts))]
        return lay

    def _new_layout(self, shapes, flat_as_square: bool) -> _Layout:
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
        """Add the residual, build the matrices and compute P = M Q (to be all-reduced).
        The corrected input takes over the residual's buffer, and on the CPU the matrices
        and P Q^T of `finish` are written into buffers kept for `key` (`_scratch`)."""
        return self._begin(flat, shapes, key, flat_as_square, borrow=False)

    def _begin(self, flat, shapes, key, flat_as_square: bool, borrow: bool) -> PowerStep:
        """`begin`; with `borrow`, a lone matrix may be `flat` itself (see `_corrected`)."""
        check_tensor(flat)
        layout = self.layout(shapes, flat_as_square)
        single = not layout.plain and len(layout.pieces) == 1
        size = math.prod(next(iter(layout.groups))) if single else flat.numel()
        packed = self._corrected(flat, key, size, borrow)
        work = packed[: flat.numel()]
        if single:  # one matrix: the corrected input is written straight into its buffer
            mats = {shape: packed.view(1, *shape) for shape in layout.groups}
        else:
            packed, mats = _gather(work, layout, self._scratch(key, "packed", work.device))
        q_shapes, p_shapes = layout.low_rank_shapes(1), layout.low_rank_shapes(0)
        qs = self.memories.get(key, {}) if self.warm_start else {}
        if [(s, tuple(q.shape), q.device) for s, q in qs.items()] != [
                (s, shape, work.device) for s, shape in zip(layout.groups, q_shapes)]:
            qs = self._fresh_qs(layout, work)
        q_buf = torch.cat([q.reshape(-1) for q in qs.values()]) if qs else work.new_zeros(0)
        qs = _split(q_buf, layout.groups, q_shapes)
        orthogonalize_all(q_buf, qs, q_shapes, self.epsilon, finite_or_eye=True)
        p_buf = _bmm_flat(mats, qs, False, work)
        return PowerStep(key, layout, work, flat.dtype, packed, mats, q_buf, qs, p_buf,
                         _split(p_buf, layout.groups, p_shapes))

    def _corrected(self, flat: torch.Tensor, key: Hashable, size: int,
                   borrow: bool) -> torch.Tensor:
        """`size` (>= flat's numel) work-dtype elements: flat + the residual of `key`, zeros
        after (padding); in the residual's own buffer where it holds `size` (none paged in),
        `flat` itself where `borrow` (`compress`, never written to) and nothing is added."""
        numel, dtype = flat.numel(), work_dtype(flat.dtype)
        residual = self.residuals.get(key) if self.error_feedback else None
        if residual is not None and residual.shape != flat.shape:
            residual = None  # DDP rebuilt its buckets: start again from zero
        if (borrow and not self.error_feedback and size == numel and flat.dtype == dtype
                and flat.is_contiguous()):
            return flat
        mine = residual is not None and residual.dtype == dtype
        buf = _whole(self.residuals.pop(key), size) if mine else None
        buf = torch.empty(size, dtype=dtype, device=flat.device) if buf is None else buf
        if mine:
            torch.add(flat, residual, out=buf[:numel])  # flat upcast to the work dtype
        else:
            buf[:numel].copy_(flat)
            if residual is not None:
                buf[:numel] += residual
        buf[numel:].zero_()
        return buf

    def _scratch(self, key: Hashable, name: str, device: torch.device) -> dict | None:
        """Buffers kept between calls for `key` (a bucket), one set per `name`, on the CPU
        only: glibc gives a large freed buffer back to the kernel, and page-faulting it in
        again made the MLP bucket's encode 14-19 ms instead of 8 on some calls. (CUDA's
        caching allocator reuses freed blocks without that cost, and kept buffers would hold
        about twice the gradient's size for good.) None: allocate."""
        return self._scratches.setdefault((key, name), {}) if device.type == "cpu" else None

    def _fresh_qs(self, layout: _Layout, work: torch.Tensor) -> dict:
        """Random Qs shared by all ranks, drawn on the CPU as torch's hook draws them (a new
        seed from a NumPy stream, then one matrix after another), so both agree."""
        gen = torch.Generator().manual_seed(int(self._seed_stream.randint(1_000_000_000)))
        return {shape: torch.stack([torch.randn(shape[1], layout.rank[shape], generator=gen,
                                                dtype=work.dtype) for _ in ids]).to(work.device)
                for shape, ids in layout.groups.items()}

    def take_residual(self, key: Hashable) -> torch.Tensor | None:
        return self.residuals.pop(key, None)

    def shared_state(self) -> bytes:
        return repr(self._seed_stream.get_state()).encode()

    def next_round(self, step: PowerStep, p_sum: torch.Tensor) -> torch.Tensor:
        """Take the summed P, orthogonalise it and return Q = M^T P (to be all-reduced)."""
        lay = step.layout
        step.p_buf = p_sum.to(step.work.dtype)
        step.ps = _split(step.p_buf, lay.groups, lay.low_rank_shapes(0))
        orthogonalize_all(step.p_buf, step.ps, lay.low_rank_shapes(0), self.epsilon)
        step.q_buf = _bmm_flat(step.mats, step.ps, True, step.work)
        step.qs = _split(step.q_buf, lay.groups, lay.low_rank_shapes(1))
        return step.q_buf

    def finish(self, step: PowerStep, plain_mean: torch.Tensor, q_mean: torch.Tensor,
               out: torch.Tensor | None = None) -> torch.Tensor:
        """Decode P Q^T with the averaged Q into `out` (flat), keep Q and the residual."""
        qs = _split(q_mean.to(step.work.dtype), step.layout.groups,
                    step.layout.low_rank_shapes(1))
        direct = (out is not None and out.dtype == step.work.dtype and out.is_contiguous()
                  and out.numel() == step.work.numel())
        result = _assemble(step, plain_mean, step.ps, qs, out.view(-1) if direct else None,
                           self._scratch(step.key, "approx", step.work.device))
        self._keep(step, qs, result)
        if out is None:
            return result.to(step.out_dtype)
        return out if direct else out.copy_(result)

    def _keep(self, step: PowerStep, qs: dict, result: torch.Tensor | None) -> None:
        """Keep Q (warm start) and the residual: the corrected input minus `result`, in the
        step's buffer; without `result` (`compress`: one piece), minus P Q^T in place."""
        if self.warm_start:
            self.memories[step.key] = qs
        if not self.error_feedback:
            return
        if result is None:  # a lone matrix's buffer is step.work's (padded)
            for shape, mat in step.mats.items():
                mat.baddbmm_(step.ps[shape], qs[shape].transpose(1, 2), alpha=-1)
            residual = step.work
        else:
            residual = step.work.sub_(result)
        runs = [residual[o : o + n] for o, n in step.layout.plain_runs]
        if runs:  # exact all-reduce: nothing to remember
            torch._foreach_zero_(runs)
        self.residuals[step.key] = finite_or_zero(residual)

    # -- one worker: the Compressor interface ---------------------------------------------
    def compress(self, tensor: torch.Tensor, key: Hashable = None) -> Payload:
        check_tensor(tensor)
        shapes = [tensor.shape] if tensor.dim() else [torch.Size([1])]
        step = self._begin(tensor.reshape(-1), shapes, key, True, borrow=True)
        plain = step.plain().clone()  # not a view of the buffers the key's next call reuses
        q = self.next_round(step, step.first())
        self._keep(step, step.qs, None)  # one piece: a lone matrix or plain
        return Payload((plain, step.first(), q), tensor.shape, tensor.dtype, {"step": step})

    def decompress(self, payload: Payload) -> torch.Tensor:
        step: PowerStep = payload.meta["step"]
        plain, p, q = payload.tensors
        lay = step.layout
        result = _assemble(step, plain, _split(p, lay.groups, lay.low_rank_shapes(0)),
                           _split(q, lay.groups, lay.low_rank_shapes(1)))
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
                "residuals": {k: v.clone() for k, v in self.residuals.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._seed_stream.set_state(state["seed_stream"])
        self.memories = {k: dict(v) for k, v in state["memories"].items()}
        self.residuals = {k: v.clone() for k, v in state["residuals"].items()}


#: Each group's matrices start at a multiple of this many elements of the gathered buffer (64
#: bytes in float32): BLAS kernels (MKL on the CPU, cuBLAS) pick code paths, and on the CPU
#: round differently, by the alignment of their inputs.
_ALIGN = 16


def _whole(residual: torch.Tensor, size: int) -> torch.Tensor | None:
    """The buffer of `size` elements that `residual` starts (a lone matrix's buffer, padding
    included, kept as its residual by the last call), or None where it holds fewer."""
    storage = residual.untyped_storage()  # (residuals are 1-D and dense: contiguous)
    if residual.storage_offset() or storage.nbytes() < size * residual.element_size():
        return None
    return residual.new_empty(0).set_(storage, 0, (size,))


def _gather(work: torch.Tensor, lay: _Layout, scratch: dict | None
            ) -> tuple[torch.Tensor, dict]:
    """One buffer holding the plain pieces, then each group's matrices (zero-padded for square
    views, each group aligned to `_ALIGN` elements), gathered by one concatenation into a
    buffer of `scratch`; and the (b, n, m) views of the matrices."""
    parts = [work[o : o + n] for o, n in lay.plain_runs]
    offset, starts = lay.plain_numel, {}
    for (n, m), ids in lay.groups.items():
        if offset % _ALIGN:
            parts.append(work.new_zeros(_ALIGN - offset % _ALIGN))
            offset += _ALIGN - offset % _ALIGN
        starts[(n, m)] = offset
        for i in ids:
            o, numel, _ = lay.pieces[i]
            parts.append(work[o : o + numel])
            if n * m != numel:
                parts.append(work.new_zeros(n * m - numel))
        offset += len(ids) * n * m
    packed = (torch.cat(parts, out=reused(scratch, (offset,), work.dtype, work.device))
              if parts else work.new_zeros(0))
    mats = {(n, m): packed[start : start + len(lay.groups[(n, m)]) * n * m].view(-1, n, m)
            for (n, m), start in starts.items()}
    return packed, mats


def _assemble(step: PowerStep, plain: torch.Tensor, ps: dict, qs: dict,
              into: torch.Tensor | None = None, scratch: dict | None = None) -> torch.Tensor:
    """The flat result (written into `into` when given): plain pieces as given, compressed
    ones as P Q^T (each group's product in a buffer of `scratch`, if any; one batched
    copy)."""
    lay = step.layout
    if into is None and not lay.plain and len(lay.pieces) == 1:
        # One compressed matrix (`compress` of a tensor): the result is the start of P Q^T,
        # returned as a view, not copied into a new buffer.
        (shape, ids), = lay.groups.items()
        return torch.bmm(ps[shape], qs[shape].transpose(1, 2)).view(-1)[: lay.pieces[0][1]]
    result = torch.empty_like(step.work) if into is None else into
    plain = plain.to(result.dtype)
    dst, src, offset = [], [], 0
    for o, n in lay.plain_runs:
        dst.append(result[o : o + n])
        src.append(plain[offset : offset + n])
        offset += n
    for shape, ids in lay.groups.items():
        p, q = ps[shape], qs[shape].transpose(1, 2)
        approx = (torch.bmm(p, q) if scratch is None else torch.bmm(
            p, q, out=reused(scratch, (len(ids), *shape), p.dtype, p.device)
        )).reshape(len(ids), -1)
        for row, i in zip(approx, ids):
            o, n, _ = lay.pieces[i]
            dst.append(result[o : o + n])
            src.append(row[:n])
    if dst:
        torch._foreach_copy_(dst, src)
    return result
