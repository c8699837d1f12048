"""Gradient compressors: `compressor(name, **options)` builds one, `names()` lists them.

Each method module registers its classes when imported; the import order is the order of
`names()`.
"""
from .base import Compressor, Payload, RoundStep, TwoRoundCompressor
from .memory import ErrorFeedback
from .registry import compressor, compressor_class, names, option_names, register

from . import cast  # noqa: E402,F401  none, fp16, bf16
from . import sparsify  # noqa: E402,F401  topk, randomk, threshold
from . import powersgd  # noqa: E402,F401  powersgd
from . import quantize  # noqa: E402,F401  qsgd, int8, int4, terngrad, natural
from . import sign  # noqa: E402,F401  signsgd, efsignsgd, onebit

__all__ = [
    "Compressor",
    "ErrorFeedback",
    "Payload",
    "RoundStep",
    "TwoRoundCompressor",
    "compressor",
    "compressor_class",
    "names",
    "option_names",
    "register",
]
