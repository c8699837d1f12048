#!/usr/bin/env python
"""Sweep the launch configuration of the quantizer and sign kernels on one CUDA GPU.

    PYTHONPATH=. python benchmarks/tune_launch.py --out DIR

For each kernel-backed case of `gpu_roofline.CASES` (25.6M float32 values), times encode and
decode through the kernel entry points (`gradcomp.kernels`) with triton.testing.do_bench (L2
flushed) under several tile sizes and warp counts, and the device copy bandwidth in the same
run. Writes DIR/launch_sweep_DTYPE.csv row by row. The defaults in `gradcomp/kernels/launch.py`
(`elems`, `dec_block`, `warps`) are chosen from this table.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpu_roofline import CASES, DTYPES, bench, copy_bandwidth  # noqa: E402

from bench_kernels import _direct  # noqa: E402
from gradcomp.kernels import launch as L, stats  # noqa: E402
from gradcomp.kernels.packing import launcher as packing  # noqa: E402
from gradcomp.kernels.quantize import launcher as quantize  # noqa: E402
from gradcomp.kernels.sign import launcher as sign  # noqa: E402

ENCODE = [(2048, 4), (4096, 8), (8192, 8), (8192, 16), (16384, 16)]  # (elements, warps)
DECODE = [(1024, 4), (2048, 4), (4096, 4), (4096, 8), (8192, 8)]  # (block, warps)


def _set(name, value):
    """Replace the launch helper `name` in `launch` and in the wrappers that imported it."""
    for module in (L, stats, quantize, sign, packing):
        if hasattr(module, name):
            setattr(module, name, value)


def configure(enc=None, dec=None):
    """Point the quantizer and sign kernels' launch helpers at one configuration."""
    if enc is not None:
        _set("elems", lambda: enc[0])
        _set("warps", lambda n: enc[1])
    if dec is not None:
        _set("dec_block", lambda: dec[0])
        launch = L.launch.__wrapped__ if hasattr(L.launch, "__wrapped__") else L.launch

        def patched(kernel, grid, *args, num_warps=4, **kw):
            if "decode" in kernel.fn.__name__:
                num_warps = dec[1]
            return launch(kernel, grid, *args, num_warps=num_warps, **kw)

        patched.__wrapped__ = launch
        _set("launch", patched)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--numel", type=int, default=25_600_000)
    ap.add_argument("--rep", type=int, default=60, help="do_bench repetition time (ms)")
    ap.add_argument("--dtype", default="fp32", choices=list(DTYPES),
                    help="dtype of the gradient (default fp32)")
    ap.add_argument("--cases", default="", help="comma-separated case labels (default: all)")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if not args.cases or c[0] in args.cases.split(",")]
    os.makedirs(args.out, exist_ok=True)
    copy_gbs, _ = copy_bandwidth(200)
    print(f"copy bandwidth {copy_gbs:.0f} GB/s", flush=True)
    x = torch.randn(args.numel, device="cuda").to(DTYPES[args.dtype])
    fields = ["case", "dtype", "direction", "tile", "warps", "ms", "bytes", "GBps", "frac_copy_bw"]
    with open(os.path.join(args.out, f"launch_sweep_{args.dtype}.csv"), "w", newline="") as fh:
        out = csv.DictWriter(fh, fieldnames=fields)
        out.writeheader()
        for label, name, opt, _ in cases:
            enc_fn, dec_fn = _direct(name, opt)
            wire = enc_fn(x)
            moved = x.numel() * x.element_size() + sum(t.numel() * t.element_size() for t in wire)
            for direction, configs in (("encode", ENCODE), ("decode", DECODE)):
                for tile, warps in configs:
                    if direction == "encode":
                        configure(enc=(tile, warps))
                        ms = bench(lambda: enc_fn(x), args.rep)[0]
                    else:
                        configure(dec=(tile, warps))
                        ms = bench(lambda: dec_fn(wire, x.numel()), args.rep)[0]
                    gbs = moved / (ms * 1e-3) / 1e9
                    out.writerow({"case": label, "dtype": args.dtype, "direction": direction, "tile": tile,
                                  "warps": warps, "ms": round(ms, 4), "bytes": moved,
                                  "GBps": round(gbs, 1),
                                  "frac_copy_bw": round(gbs / copy_gbs, 3)})
                    fh.flush()
                    print(f"{label:16s} {direction} tile {tile:6d} warps {warps:2d} "
                          f"{ms:.4f} ms {gbs / copy_gbs:.0%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
