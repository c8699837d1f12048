#!/usr/bin/env python
"""Host-side cost of one encode/decode call on a CUDA GPU: Python, argument checks and kernel
launches, measured on a tensor so small (4096 values) that the device work is negligible.

    PYTHONPATH=. python benchmarks/call_overhead.py [--dry-run]

Prints microseconds per call (median of 5 runs of 300 calls, synchronising only at the end of
each run) for a bare torch op, a bare Triton launch, the kernel entry points and the compressor
API, so that the gap between "call" and "GPU" time in the roofline table can be attributed.
"""
from __future__ import annotations

import os
import argparse
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import gradcomp  # noqa: E402
from gradcomp import kernels  # noqa: E402


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def per_call_us(fn, calls=300, runs=5):
    fn()
    sync()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def bare_triton():
    import triton
    import triton.language as tl

    @triton.jit
    def _copy(src, dst, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + i, tl.load(src + i, mask=i < n), mask=i < n)

    return _copy


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true",
                    help="the same calls on the CPU, 3 per run (set TRITON_INTERPRET=1)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available() and not args.dry_run:
        ap.error("no CUDA device: give --dry-run to run on the CPU")
    calls = 3 if args.dry_run else 300
    x = torch.randn(4096, device="cpu" if args.dry_run else "cuda")
    y = torch.empty_like(x)
    copy = bare_triton()
    rows = [("torch x.add_(1)", lambda: x.add_(1.0).sub_(1.0)),
            ("triton bare launch (1 kernel)", lambda: copy[(1,)](x, y, x.numel(), BLOCK=4096))]
    for name in ("int8", "signsgd", "efsignsgd", "qsgd", "topk", "randomk", "threshold"):
        c = gradcomp.compressor(name)
        p = c.compress(x)
        rows.append((f"{name} compress", lambda c=c: c.compress(x)))
        rows.append((f"{name} decompress", lambda c=c, p=p: c.decompress(p)))
    rows.append(("kernels.int8_encode", lambda: kernels.int8_encode(x)))
    for label, fn in rows:
        print(f"{label:32s} {per_call_us(fn, calls):8.1f} us/call", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
