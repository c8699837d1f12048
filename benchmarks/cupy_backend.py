"""Optional CuPy backend: bit packing and top-k index selection on CUDA tensors.

A benchmark helper (not part of the `gradcomp` package; `bench_cupy.py` and
`tests/test_cupy_backend.py` use it): an alternative to the torch reference
(`gradcomp.kernels.packing.reference`, `torch.topk`) and to the Triton kernels
(`gradcomp.kernels.pack` / `unpack`); the compressors never dispatch here. Install CuPy with
``pip install gradcomp[cupy]`` (or the cupy-cudaXXx wheel matching your CUDA).

Importing this module never imports CuPy: it loads on the first call that needs it, so the
benchmarks and tests import it without CuPy and without a GPU. Tensors cross between torch and CuPy
through DLPack without copies (``cupy.from_dlpack`` / ``torch.from_dlpack``), and the CuPy work
runs on torch's current stream of the tensor's device, so no extra synchronisation is needed.

* `available()`: CuPy imports and sees a CUDA device (never raises).
* `pack(codes, bits)` / `unpack(packed, count, bits)`: same MSB-first layout as `bitpack`,
  bit for bit, for every width 1 to 8 (one CuPy element-wise kernel per width, one thread per
  output byte / code).
* `topk_indices(magnitudes, k)`: int64 indices of the k largest values, in no particular order
  (``cupy.argpartition``; note that CuPy implements it with a full sort). NaN counts as the
  largest value, as in `torch.topk`.
"""
from __future__ import annotations

import contextlib
import functools

import torch

__all__ = ["available", "pack", "unpack", "topk_indices"]

_TOPK_DTYPES = (torch.float16, torch.float32, torch.float64)


def _import_cupy():
    """The cupy module, or None where it does not import (not installed, or a broken install
    such as a wheel for another CUDA major version)."""
    try:
        import cupy
    except Exception:  # noqa: BLE001 - any import failure means: no CuPy backend
        return None
    return cupy


def available() -> bool:
    """True when CuPy imports and a CUDA device is usable through it. Never raises."""
    cupy = _import_cupy()
    if cupy is None:
        return False
    try:
        return bool(cupy.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


def _cupy(t: torch.Tensor, what: str):
    """Check that `t` is a CUDA tensor and return the cupy module (clear errors otherwise)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cuda":
        raise RuntimeError(f"the CuPy backend needs CUDA tensors: {what} is on device "
                           f"'{t.device}' (use gradcomp.kernels.packing.reference / torch.topk "
                           "for it)")
    cupy = _import_cupy()
    if cupy is None:
        raise RuntimeError("the CuPy backend needs CuPy: pip install 'gradcomp[cupy]' (or the "
                           "cupy-cudaXXx wheel matching your CUDA version)")
    return cupy


@contextlib.contextmanager
def _on_torch_stream(cupy, device: torch.device):
    """Run CuPy on `device` and on torch's current stream there, so that CuPy's work is ordered
    with torch's (and DLPack exchanges need no event)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    stream = torch.cuda.current_stream(index)
    with cupy.cuda.Device(index), cupy.cuda.ExternalStream(stream.cuda_stream, index):
        yield


def _check_bits(bits) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 8:
        raise ValueError(f"bits={bits!r} is not allowed: bits must be an integer in [1, 8]")
    return bits


# One thread per output byte. Widths dividing 8 hold whole codes per byte; the others walk the
# byte's 8 bit positions (bit p of the stream is bit BITS-1-(p % BITS) of code p / BITS).
_PACK = r"""
const long long nc = (long long)n_codes;
unsigned int acc = 0;
#if (8 % BITS) == 0
const long long c0 = (long long)i * (8 / BITS);
#pragma unroll
for (int t = 0; t < 8 / BITS; ++t) {
    const long long c = c0 + t;
    const unsigned int v = c < nc ? ((unsigned int)codes[c] & ((1u << BITS) - 1u)) : 0u;
    acc |= v << (8 - BITS * (t + 1));
}
#else
const long long p0 = (long long)i * 8;
#pragma unroll
for (int t = 0; t < 8; ++t) {
    const long long p = p0 + t;
    const long long c = p / BITS;
    const int b = (int)(p - c * BITS);
    const unsigned int v = c < nc ? (((unsigned int)codes[c] >> (BITS - 1 - b)) & 1u) : 0u;
    acc |= v << (7 - t);
}
#endif
out = (unsigned char)acc;
"""

# One thread per code.
_UNPACK = r"""
unsigned int v = 0;
#if (8 % BITS) == 0
const unsigned int bv = packed[(long long)i / (8 / BITS)];
const int slot = (int)((long long)i % (8 / BITS));
v = (bv >> (8 - BITS * (slot + 1))) & ((1u << BITS) - 1u);
#else
const long long p0 = (long long)i * BITS;
#pragma unroll
for (int b = 0; b < BITS; ++b) {
    const long long p = p0 + b;
    v = (v << 1) | (((unsigned int)packed[p >> 3] >> (7 - (int)(p & 7))) & 1u);
}
#endif
out = (unsigned char)v;
"""


@functools.lru_cache(maxsize=None)
def _kernels(bits: int):
    """(pack kernel, unpack kernel) for `bits`-bit codes (compiled by CuPy on first launch)."""
    import cupy

    pre = f"#define BITS {bits}\n"
    pk = cupy.ElementwiseKernel("raw uint8 codes, int64 n_codes", "uint8 out", _PACK,
                                f"gradcomp_pack{bits}", preamble=pre)
    up = cupy.ElementwiseKernel("raw uint8 packed", "uint8 out", _UNPACK,
                                f"gradcomp_unpack{bits}", preamble=pre)
    return pk, up


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """`bitpack.pack` with CuPy: a CUDA uint8 tensor of codes (< 2**bits, as the reference
    takes them; higher bits are ignored here) into ``(len * bits + 7) // 8`` bytes, MSB
    first."""
    bits = _check_bits(bits)
    cupy = _cupy(codes, "codes")
    if codes.dtype != torch.uint8:
        raise TypeError(f"codes must be uint8, got {codes.dtype}")
    codes = codes.reshape(-1).contiguous()
    n = codes.numel()
    out = torch.empty((n * bits + 7) // 8, dtype=torch.uint8, device=codes.device)
    if n:
        kernel = _kernels(bits)[0]
        with _on_torch_stream(cupy, codes.device):
            kernel(cupy.from_dlpack(codes), n, cupy.from_dlpack(out))
    return out


def unpack(packed: torch.Tensor, count: int, bits: int) -> torch.Tensor:
    """`bitpack.unpack` with CuPy: the first `count` `bits`-bit codes of a CUDA uint8 stream."""
    bits = _check_bits(bits)
    cupy = _cupy(packed, "packed")
    if packed.dtype != torch.uint8:
        raise TypeError(f"packed must be uint8, got {packed.dtype}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count={count!r} is not allowed: count must be an integer >= 0")
    packed = packed.reshape(-1).contiguous()
    need = (count * bits + 7) // 8
    if packed.numel() < need:
        raise ValueError(f"{count} codes of {bits} bits need {need} bytes, packed has "
                         f"{packed.numel()}")
    out = torch.empty(count, dtype=torch.uint8, device=packed.device)
    if count:
        kernel = _kernels(bits)[1]
        with _on_torch_stream(cupy, packed.device):
            kernel(cupy.from_dlpack(packed), cupy.from_dlpack(out))
    return out


def topk_indices(magnitudes: torch.Tensor, k: int) -> torch.Tensor:
    """int64 indices (on the same device, in no particular order) of the `k` largest values of
    a CUDA float tensor (flattened), e.g. `gradcomp.kernels.sparse.reference.magnitudes(x)`.
    Ties at the k-th value are broken arbitrarily; NaN counts as the largest value. bfloat16 is
    compared in float32 (exact), which CuPy's sort supports."""
    cupy = _cupy(magnitudes, "magnitudes")
    if magnitudes.dtype == torch.bfloat16:
        magnitudes = magnitudes.float()
    if magnitudes.dtype not in _TOPK_DTYPES:
        raise TypeError(f"magnitudes must be float16, bfloat16, float32 or float64, got "
                        f"{magnitudes.dtype}")
    flat = magnitudes.detach().reshape(-1).contiguous()
    n = flat.numel()
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= n:
        raise ValueError(f"k={k!r} is not allowed: k must be an integer in [0, {n}]")
    if k == 0:
        return torch.empty(0, dtype=torch.int64, device=flat.device)
    with _on_torch_stream(cupy, flat.device):
        order = cupy.argpartition(cupy.from_dlpack(flat), n - k)
        # The k largest sit at the end (NaN sorts last). astype copies them out, so that the
        # n-element index array is freed; torch takes the copy without another one.
        return torch.from_dlpack(order[n - k:].astype(cupy.int64))
