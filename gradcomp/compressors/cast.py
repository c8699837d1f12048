"""Identity and low-precision casts: `none` (fp32 as is), `fp16`, `bf16`. All-reducible.

Non-finite values: NaN and Inf pass through unchanged; values beyond fp16's range (65504)
become +-Inf in `fp16`, as a cast does.
"""
from __future__ import annotations

import torch

from .base import Compressor, Payload
from .registry import register


class _Cast(Compressor):
    aggregation = "allreduce"
    wire_dtype: torch.dtype | None = None  # None: send the gradient in its own dtype

    def _compress(self, flat, key):
        wire = flat if self.wire_dtype is None else flat.to(self.wire_dtype)
        return [wire], {}

    def _decompress(self, payload: Payload) -> torch.Tensor:
        return payload.tensors[0]

    def wire_nbytes(self, numel, dtype=torch.float32):
        return numel * (self.wire_dtype or dtype).itemsize


@register
class NoCompression(_Cast):
    """The gradient itself (the uncompressed baseline)."""

    name = "none"


@register
class FP16(_Cast):
    """Cast to IEEE half precision."""

    name = "fp16"
    wire_dtype = torch.float16


@register
class BF16(_Cast):
    """Cast to bfloat16 (fp32's exponent range, 8 bits of mantissa)."""

    name = "bf16"
    wire_dtype = torch.bfloat16
