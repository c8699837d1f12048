"""Error feedback: a wrapper that makes any compressor remember what it dropped."""
from __future__ import annotations

from typing import Any, Hashable

import torch

from .base import Compressor, Payload, check_tensor, work_dtype


def finite_or_zero(residual: torch.Tensor) -> torch.Tensor:
    """`residual` with NaN and +-Inf set to zero, in place (one pass; `isfinite` + `where`
    took 6x longer on CPU)."""
    return residual.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)


class ErrorFeedback(Compressor):
    """Adds the stored residual of `key` before compressing and keeps
    ``residual = corrected - decompress(compress(corrected))``.

    Residuals are kept in float32 (float64 for float64 input) whatever the gradient dtype, so
    low-precision gradients do not lose what was dropped. A residual whose shape no longer
    matches (DDP rebuilt its buckets) is dropped and starts again from zero. A non-finite
    gradient still decodes non-finite in its own step, but its NaN/Inf are not kept in the
    residual (they would poison every later step, e.g. after an AMP overflow step).
    """

    def __init__(self, inner: Compressor):
        if isinstance(inner, ErrorFeedback):
            raise ValueError("error_feedback: the compressor already has error feedback")
        if inner.handles_error_feedback:
            raise ValueError(f"error_feedback: {inner.name!r} keeps its own residuals; "
                             "use its error_feedback option")
        self.inner = inner
        self.residuals: dict[Hashable, torch.Tensor] = {}

    # Behave like the wrapped method everywhere else.
    @property
    def name(self):
        return self.inner.name

    @property
    def aggregation(self):
        return self.inner.aggregation

    @property
    def shared_randomness(self):
        return self.inner.shared_randomness

    def options(self) -> dict[str, Any]:
        return {**self.inner.options(), "error_feedback": True}

    def set_rank(self, rank: int) -> None:
        self.inner.set_rank(rank)

    def compress(self, tensor: torch.Tensor, key: Hashable = None) -> Payload:
        check_tensor(tensor)
        residual = self.residuals.get(key)
        if residual is None or residual.shape != tensor.shape:
            corrected = tensor.to(work_dtype(tensor.dtype), copy=True)
        else:  # not in place: a state_dict() taken earlier must not change
            corrected = residual.to(tensor.device) + tensor
        payload = self.inner.compress(corrected.to(tensor.dtype), key)
        # Not in place: the payload may be a view of `corrected` (the identity method).
        self.residuals[key] = finite_or_zero(corrected - self.inner.decompress(payload))
        return payload

    def decompress(self, payload: Payload) -> torch.Tensor:
        return self.inner.decompress(payload)

    def aggregate(self, payloads: list[Payload]) -> torch.Tensor:
        return self.inner.aggregate(payloads)

    def wire_nbytes(self, numel: int, dtype: torch.dtype = torch.float32) -> int:
        return self.inner.wire_nbytes(numel, dtype)

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict(), "residuals": dict(self.residuals)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state["inner"])
        self.residuals = {k: v.clone() for k, v in state["residuals"].items()}
