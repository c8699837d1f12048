"""The compressor interface: a gradient becomes a `Payload` on the wire and back.

A compressor never talks to other processes. It declares how payloads from several workers
combine (`aggregation`):

* ``"allreduce"``: the payload tensors of all workers may be summed elementwise, and
  ``decompress`` is linear in them, so ``decompress(sum of payloads) == sum of decompressions``.
* ``"allgather"``: every worker's payload is gathered and ``aggregate(payloads)`` decodes and
  combines them (the mean, or a majority vote).

A `TwoRoundCompressor` (PowerSGD) aggregates by two all-reduce rounds with work between them,
through the `begin` / `next_round` / `finish` protocol declared below.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Hashable, Protocol

import torch

from ..kernels.blocks import work_dtype

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
AGGREGATIONS = ("allreduce", "allgather")


@dataclass
class Payload:
    """What one worker transmits for one tensor.

    ``tensors`` travel on the wire; ``shape``, ``dtype`` and ``meta`` stay local and are the same
    on every rank for the same call sequence (so a gathered payload can be decoded anywhere).
    """

    tensors: tuple[torch.Tensor, ...]
    shape: torch.Size
    dtype: torch.dtype
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Exact number of bytes on the wire."""
        return sum(t.numel() * t.element_size() for t in self.tensors)

    @property
    def numel(self) -> int:
        return self.shape.numel()

    @property
    def device(self) -> torch.device:
        return self.tensors[0].device if self.tensors else torch.device("cpu")

    def with_tensors(self, tensors) -> "Payload":
        """The same payload description around other wire tensors (e.g. received ones)."""
        return Payload(tuple(tensors), self.shape, self.dtype, self.meta)


def check_tensor(tensor) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype not in FLOAT_DTYPES:
        allowed = ", ".join(str(d).replace("torch.", "") for d in FLOAT_DTYPES)
        raise TypeError(
            f"tensor dtype {str(tensor.dtype).replace('torch.', '')} is not supported: "
            f"gradcomp compresses real floating-point tensors ({allowed})"
        )


class Compressor:
    """Base class. Subclasses set `name` and `aggregation` and implement `_compress` / `_decompress`
    on flat 1-D tensors; the base class validates, flattens and restores shape and dtype."""

    name: ClassVar[str] = ""
    aggregation: ClassVar[str] = "allgather"
    #: True when ranks must draw the same random numbers (checked across ranks by the hooks).
    shared_randomness: ClassVar[bool] = False
    #: True when the method keeps its own residuals (its `error_feedback` option).
    handles_error_feedback: ClassVar[bool] = False
    #: Whether `compressor(name)` turns error feedback on when not told.
    default_error_feedback: ClassVar[bool] = False

    seed: int = 0
    rank: int = 0

    # -- the public interface -------------------------------------------------------------
    def compress(self, tensor: torch.Tensor, key: Hashable = None) -> Payload:
        check_tensor(tensor)
        flat = tensor.reshape(-1)
        tensors, meta = self._compress(flat, key)
        return Payload(tuple(tensors), tensor.shape, tensor.dtype, meta)

    def decompress(self, payload: Payload) -> torch.Tensor:
        flat = self._decompress(payload)
        return flat.to(payload.dtype).reshape(payload.shape)

    def aggregate(self, payloads: list[Payload]) -> torch.Tensor:
        """Combine the gathered payloads of all workers into the average gradient."""
        total = self.decompress(payloads[0]).to(work_dtype(payloads[0].dtype))
        for p in payloads[1:]:
            total += self.decompress(p)
        return total.div_(len(payloads)).to(payloads[0].dtype)

    def aggregate_into(self, payloads: list[Payload], out: torch.Tensor) -> torch.Tensor:
        """`aggregate(payloads)` written into `out`, a flat tensor of the payloads' numel and
        dtype (the bucket), and returned; the sparsifiers sum straight into it (no dense
        tensor allocated per call)."""
        return out.copy_(self.aggregate(payloads).reshape(-1))

    def aggregate_rows(self, rows: torch.Tensor, offsets: list[int], mine: Payload,
                       out: torch.Tensor) -> torch.Tensor | None:
        """`aggregate_into` of the payloads held one per row of `rows` (uint8, every row laid
        out as this rank's payload `mine`, its tensors at byte `offsets`), in one pass over
        them where the method has a kernel for it; None where it has not (the caller then
        splits the rows into payloads)."""
        return None

    def left_over(self, corrected: torch.Tensor, payload: Payload) -> torch.Tensor:
        """``corrected - decompress(payload)``, what error feedback keeps of `corrected` (a
        contiguous float32/64 tensor that `payload` was compressed from, which a subclass may
        overwrite). Not in place here: the payload may be a view of `corrected` (the identity
        method)."""
        return corrected - self.decompress(payload)

    def wire_nbytes(self, numel: int, dtype: torch.dtype = torch.float32) -> int:
        """Bytes one worker sends for a tensor of `numel` elements (expected value where the
        size depends on the data)."""
        return self.compress(torch.ones(numel, dtype=dtype)).nbytes

    def options(self) -> dict[str, Any]:
        """The options this compressor was built with."""
        return {}

    def take_residual(self, key: Hashable) -> torch.Tensor | None:
        """Remove and return what error feedback kept for `key` (None: nothing), so that a
        hook that hands the tensor to another method can send it with the next gradient."""
        return None

    def set_rank(self, rank: int) -> None:
        """Tell the compressor its rank, so that randomness that need not be shared differs
        between workers (stochastic rounding); shared randomness ignores it."""
        self.rank = rank
        self._generators = {}

    def shared_state(self) -> bytes:
        """What must be equal on every rank for shared randomness to agree (the random
        generators' states); the hooks compare a digest of it across ranks."""
        gens = getattr(self, "_generators", {})
        return b"".join(str(d).encode() + g.get_state().cpu().numpy().tobytes()
                        for d, g in sorted(gens.items(), key=lambda kv: str(kv[0])))

    def state_dict(self) -> dict[str, Any]:
        gens = getattr(self, "_generators", {})
        return {"generators": {str(d): g.get_state() for d, g in gens.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._generators = {}
        for dev, gstate in state.get("generators", {}).items():
            self._generator(torch.device(dev)).set_state(gstate)

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({opts})"

    # -- for subclasses -------------------------------------------------------------------
    def _compress(self, flat: torch.Tensor, key: Hashable) -> tuple[list[torch.Tensor], dict]:
        raise NotImplementedError

    def _decompress(self, payload: Payload) -> torch.Tensor:
        raise NotImplementedError

    def _generator(self, device: torch.device) -> torch.Generator:
        """This compressor's random generator on `device`, seeded from `seed` (and the rank,
        unless the randomness must be shared)."""
        gens = self.__dict__.setdefault("_generators", {})
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device not in gens:
            seed = self.seed if self.shared_randomness else self.seed + 1_000_003 * self.rank
            gens[device] = torch.Generator(device=device).manual_seed(seed)
        return gens[device]


class RoundStep(Protocol):
    """One `TwoRoundCompressor` call in flight, between `begin` and `finish`."""

    def plain(self) -> torch.Tensor:
        """The pieces that travel uncompressed (summed like round 2's tensor)."""

    def first(self) -> torch.Tensor:
        """Round 1's wire tensor, to be summed across ranks."""

    def nbytes(self) -> int:
        """Bytes this rank sends in both rounds, plain pieces included."""


class TwoRoundCompressor(Compressor):
    """A compressor whose average takes two all-reduce rounds with work between them
    (PowerSGD: P, then Q computed from the summed P). A communicator drives it:

        step = c.begin(flat, shapes, key)             # sum step.first() and step.plain()
        second = c.next_round(step, summed_first)     # sum second
        c.finish(step, plain_mean, second_mean, out=flat)

    `shapes` are the shapes of the tensors laid end to end in `flat` (one bucket's parameters).
    A step may use buffers kept for its `key`: finish it before the next `begin` of that key.
    """

    aggregation: ClassVar[str] = "allreduce"

    def begin(self, flat: torch.Tensor, shapes: list[torch.Size],
              key: Hashable = None) -> RoundStep:
        raise NotImplementedError

    def next_round(self, step: RoundStep, first_sum: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def finish(self, step: RoundStep, plain_mean: torch.Tensor, second_mean: torch.Tensor,
               out: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError
