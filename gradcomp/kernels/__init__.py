"""Triton kernels behind the compressors' hot paths.

Importing this package never imports Triton; the kernels load on first use of one of the
functions below, e.g. ``kernels.int8_encode(x)``. One package per method family (`quantize`,
`sign`, `packing`, `sparse`, `randomk`, `orthogonal`) holds the family's torch `reference`
beside its `launcher` (the Python entry points) and its `jit` (the `@triton.jit` sources); the
families share `launch` (launch helpers), `blocks` (block layout), `tiles` (`@triton.jit`
helpers and the kernels' conventions) and `stats` (the statistics pass). The compressors call
the kernels for CUDA tensors when `supports(tensor)` is true and the torch reference otherwise
(CPU tensors, float64, and any case the kernels do not cover).

* `available()`: Triton imports and a CUDA (or ROCm) device is present, and the environment
  variable GRADCOMP_KERNELS is not "0" (set it to 0 to force the torch path everywhere, e.g. to
  time torch against Triton through the compressor API).
* `interpreting()`: TRITON_INTERPRET=1, so the kernels run on CPU tensors with Triton's
  interpreter (slow: ~ms per program; for tests). It must be set before the kernels are first
  used in the process.
* `supports(x)` / `supports_decode(wire, dtype, numel)`: the compressors' dispatch tests;
  `supports_selection(x)` for top-k and threshold, which also need Triton >= 3.4.

What runs where (CUDA tensors of float32/float16/bfloat16 with 1 to 2**28 - 1 values):

=====================  ===================================================================
int8, int4, qsgd       block_size a multiple of 8 (int8: any) and <= 8192: one fused kernel
(+ terngrad blocks)    (block statistic, rounding, packing, scales in one pass); else a
                       statistics pass (`stats.partials`), a tiny torch reduction, and a
                       codes pass (`quantize`).
terngrad (block 0)     statistics pass (max|x|) + codes pass.
natural                one element-wise kernel (`quantize.natural_encode`).
topk                   exact radix select, no host sync (`sparse.topk_select`): a 64-bin
                       exponent histogram pass, a split pass (keys above the k-th's bin to
                       the output, the keys of that bin compacted), then 4 small radix
                       passes and a write over the compacted keys; decode torch.
threshold              threshold in torch (sample + topk); a count pass + a write pass
                       (`sparse.threshold_select`); decode torch.
randomk                finiteness pass whose programs also compute the positions (Feistel
                       permutation, keys as scalars) + gather over k (`randomk.randomk_encode`,
                       2 launches); decode torch fill + Triton scatter over k.
signsgd, efsignsgd,    whole tensor (block_size 0): one kernel (bits + per-program partial
onebit                 sums) + a tiny torch reduction; block_size a multiple of 8 <= 8192:
                       one fused kernel; else bits kernel + statistics pass (`sign`).
every decoder          one element-wise kernel writing the output dtype.
powersgd               float32 P and Q orthogonalised by one launch per call over all the
                       bucket's matrices (`orthogonal.orthogonalize_`: one program per
                       matrix, Gram-Schmidt for r <= 2, re-orthogonalised Gram-Schmidt in
                       place of QR for r > 2); the matrix products stay torch (cuBLAS).
error feedback         `*_encode_ef(x, residual, ...)` (int, qsgd, terngrad, natural, sign):
(fused)                the same kernels read the float32 residual beside x and write the new
                       residual (corrected - decoded, NaN/Inf -> 0) beside the codes, so a
                       fused block size reads gradient + residual once and writes codes +
                       residual once; the two-pass paths read both once more. `ErrorFeedback`
                       uses them through the compressors' `compress_with_residual`.
=====================  ===================================================================

Everything else stays torch: CPU tensors, float64, empty tensors, the other methods (none,
fp16, bf16), PowerSGD's matrix products and signsgd's majority-vote `aggregate`.
Round-to-nearest results equal the torch code on the same device bit for bit (see
`gradcomp.kernels.quantize.launcher` for the two documented exceptions: sums, and the sign of a zero
min/max); stochastic rounding draws from Triton's Philox generator, seeded per call from the
compressor's own generator.
"""
from __future__ import annotations

import functools
import importlib.util
import os

import torch

from .launch import MAX_NUMEL, SUPPORTED_DTYPES, interpreting

#: Public name -> the submodule (importing Triton) that defines it, loaded on first use.
_OPS = {name: "quantize.launcher" for name in (
    "int_encode", "int_decode", "int8_encode", "int8_decode", "int4_encode", "int4_decode",
    "qsgd_encode", "qsgd_decode", "terngrad_encode", "terngrad_decode",
    "int_decode_mean", "qsgd_decode_mean", "terngrad_decode_mean",
    "natural_encode", "natural_decode",
    "int_encode_ef", "qsgd_encode_ef", "terngrad_encode_ef", "natural_encode_ef")}
_OPS.update({name: "sign.launcher" for name in (
    "sign_encode", "sign_decode", "sign_encode_ef", "signsgd_encode", "signsgd_decode",
    "efsignsgd_encode", "efsignsgd_decode", "onebit_encode", "onebit_decode")})
_OPS.update({name: "packing.launcher" for name in ("pack", "unpack")})
_OPS.update({name: "launch" for name in ("fused_block_size", "FUSED_MAX")})
_OPS.update({name: "sparse.launcher" for name in ("topk_select", "threshold_select")})
_OPS.update({name: "randomk.launcher" for name in ("randomk_encode", "randomk_positions",
                                           "randomk_gather", "randomk_scatter")})
_OPS.update({name: "orthogonal.launcher" for name in ("orthogonalize_",)})


@functools.lru_cache(maxsize=None)
def _triton_importable() -> bool:
    """Whether Triton imports (tried once, only when a CUDA tensor asks)."""
    if importlib.util.find_spec("triton") is None:
        return False
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken install means the torch path
        return False
    return True


def enabled() -> bool:
    """False when GRADCOMP_KERNELS=0 asks for the torch path everywhere."""
    return os.environ.get("GRADCOMP_KERNELS", "1").lower() not in ("0", "false", "off", "no")


def available() -> bool:
    """True when the Triton kernels can run on CUDA tensors in this process."""
    return enabled() and torch.cuda.is_available() and _triton_importable()


def supports(x: torch.Tensor) -> bool:
    """Whether the compressors should hand `x` to a kernel: a non-empty float32/float16/
    bfloat16 CUDA tensor of at most 2**28 - 1 elements, with kernels available. CPU tensors
    always stay on the torch reference (the tests call the kernels directly under the
    interpreter)."""
    if not (0 < x.numel() <= MAX_NUMEL and x.dtype in SUPPORTED_DTYPES):
        return False
    if x.is_cuda:
        return available()
    return False


@functools.lru_cache(maxsize=None)
def triton_version() -> tuple[int, int]:
    """(major, minor) of the installed Triton (imports it: ask only after `supports`)."""
    import triton

    major, minor = triton.__version__.split(".")[:2]
    return int(major), int(minor)


def supports_selection(x: torch.Tensor) -> bool:
    """`supports(x)`, with Triton >= 3.4: the top-k and threshold kernels mask
    `tl.histogram`, which older Triton (torch 2.4-2.7's) lacks; those keep the torch path."""
    return supports(x) and triton_version() >= (3, 4)


def supports_decode(wire: torch.Tensor, dtype: torch.dtype, numel: int) -> bool:
    """Whether the compressors should decode a payload with a kernel: its wire tensor `wire`
    is on a CUDA device, it decodes to `numel` values of a supported `dtype`, and kernels are
    available."""
    return (wire.is_cuda and dtype in SUPPORTED_DTYPES and 0 < numel <= MAX_NUMEL and available())


def __getattr__(name):
    if name in _OPS:
        module = importlib.import_module(f"{__name__}.{_OPS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["available", "enabled", "interpreting", "supports", "supports_decode",
           "supports_selection", "triton_version", *sorted(_OPS)]
