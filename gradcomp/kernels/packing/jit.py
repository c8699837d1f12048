"""Kernels of generic MSB-first bit packing (wrapped by `gradcomp.kernels.packing.launcher`)."""
from __future__ import annotations

import triton
import triton.language as tl

from ..tiles import load_codes, store_packed, tile


@triton.jit
def pack_kernel(codes_ptr, packed_ptr, n, nbytes, BITS: tl.constexpr, BP2: tl.constexpr,
                ROWS: tl.constexpr, G: tl.constexpr):
    pid = tl.program_id(0)
    r, e, mask, grp, gvalid = tile(pid, n, 8 * G, ROWS, G)
    c = tl.load(codes_ptr + e, mask=mask, other=0).to(tl.int32) & ((1 << BITS) - 1)
    store_packed(packed_ptr, c, grp, gvalid, nbytes, BITS, BP2)


@triton.jit
def unpack_kernel(packed_ptr, codes_ptr, n, nbytes, BITS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    e = pid * BLOCK + tl.arange(0, BLOCK)
    mask = e < n
    c = load_codes(packed_ptr, e, mask, nbytes, BITS)
    tl.store(codes_ptr + e, c.to(tl.uint8), mask=mask)
