#!/usr/bin/env python
"""Correctness and roofline of gradcomp's Triton kernels on one CUDA GPU.

    PYTHONPATH=. python benchmarks/gpu_roofline.py --out benchmarks/results/gpu

1. Correctness: every compressor that dispatches to a kernel is run on fresh random CUDA
   inputs (25.6M values and odd sizes, float32/float16/bfloat16, special values in front:
   ties, zeros, -0.0, NaN, +-Inf, subnormals, huge values) twice: through its Triton kernels
   and through its torch code on the same GPU (GRADCOMP_KERNELS=0). Round-to-nearest must match
   bit for bit; sums (QSGD norms, sign means) to float32 rounding; stochastic rounding must land
   on a neighbouring grid point, repeat for the same seed and be unbiased.
2. Roofline: encode and decode of 25.6M float32 values (and 16-bit inputs for int8/int4), torch
   against Triton, timed with triton.testing.do_bench (median of repeated runs, L2 flushed
   between runs, with p20/p80); achieved bandwidth = (bytes read + bytes written) / time, where
   the bytes are the minimum a kernel must move (the input and the payload), and its fraction
   of the device's copy bandwidth, measured in the same run by a large device-to-device copy.

Writes DIR/correctness.csv and DIR/timings.csv (row by row, so an interrupted run keeps what it
measured), DIR/roofline.md (DIR/correctness.md with --no-time) and DIR/env.json, then prints a
short table. A failing check or case is reported and the run goes on; the exit status is 1 if
any correctness check failed. The checks stop starting new inputs after --max-check-seconds
(most telling inputs first), so that the whole run fits in 10 minutes.

Needs only torch, triton and gradcomp (PYTHONPATH=. from the repository root).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import platform
import sys
import time
import traceback

import torch

try:
    import gradcomp
    from gradcomp import kernels
    from gradcomp.kernels.packing import reference as bitpack
except ImportError:  # run from the repository root without PYTHONPATH
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import gradcomp
    from gradcomp import kernels
    from gradcomp.kernels.packing import reference as bitpack

F64 = torch.float64
N_BIG = 25_600_000
DEVICE = "cuda"

# (label, compressor, options, kind). kind: exact = bit for bit; exact0 = bit for bit up to the
# sign of a zero min/max (minmax blocks mixing 0.0 and -0.0); qsgd = norms to rounding, codes
# given the norms exact; stoch = stochastic rounding; sign = bits exact, means to rounding.
CASES = [
    ("int8", "int8", {}, "exact"),
    ("int8-minmax", "int8", {"scheme": "minmax"}, "exact0"),
    ("int8-sr", "int8", {"stochastic": True}, "stoch"),
    ("int4", "int4", {}, "exact"),
    ("int4-minmax", "int4", {"scheme": "minmax"}, "exact0"),
    ("int4-sr", "int4", {"stochastic": True}, "stoch"),
    ("int4-bs100", "int4", {"block_size": 100}, "exact"),  # two-pass path (not a multiple of 8)
    ("int8-bs16384", "int8", {"block_size": 16384}, "exact"),  # two-pass path (> FUSED_MAX)
    ("qsgd", "qsgd", {}, "stoch"),
    ("qsgd-nearest", "qsgd", {"stochastic": False}, "qsgd"),
    ("terngrad", "terngrad", {}, "stoch"),
    ("terngrad-bs256", "terngrad", {"block_size": 256}, "stoch"),
    ("natural", "natural", {}, "stoch"),
    ("signsgd", "signsgd", {}, "sign"),
    ("efsignsgd", "efsignsgd", {}, "sign"),
    ("efsignsgd-bs256", "efsignsgd", {"block_size": 256}, "sign"),
    ("onebit", "onebit", {}, "sign"),
    ("onebit-bs256", "onebit", {"block_size": 256}, "sign"),
]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_INT = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


# -- helpers -----------------------------------------------------------------------------------
@contextlib.contextmanager
def backend(name: str):
    """'torch': the compressors' torch code; 'triton': their kernels (where they have one)."""
    old = os.environ.get("GRADCOMP_KERNELS")
    os.environ["GRADCOMP_KERNELS"] = "0" if name == "torch" else "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("GRADCOMP_KERNELS", None)
        else:
            os.environ["GRADCOMP_KERNELS"] = old


class CheckFailed(AssertionError):
    pass


def check(cond, msg):
    if not bool(cond):
        raise CheckFailed(msg)


def same(a, b, what, zero_sign=True):
    """Bit for bit (NaN matches NaN)."""
    check(a.shape == b.shape and a.dtype == b.dtype,
          f"{what}: {a.shape} {a.dtype} vs {b.shape} {b.dtype}")
    if a.is_floating_point():
        na, nb = a.isnan(), b.isnan()
        check(torch.equal(na, nb), f"{what}: NaN positions differ ({(na != nb).sum().item()})")
        if not zero_sign:
            a, b = a + 0.0, b + 0.0
        a = torch.where(na, 0, a).view(_INT.get(a.dtype, torch.int64))
        b = torch.where(nb, 0, b).view(_INT.get(b.dtype, torch.int64))
    bad = (a != b).nonzero().reshape(-1)
    check(bad.numel() == 0, f"{what}: {bad.numel()} of {a.numel()} differ, first at "
                            f"{bad[:3].tolist()}: {a[bad[:3]].tolist()} vs {b[bad[:3]].tolist()}")


def close(a, b, what, rtol):
    check(a.shape == b.shape and a.dtype == b.dtype, f"{what}: shapes/dtypes differ")
    check(torch.equal(a.isnan(), b.isnan()), f"{what}: NaN positions differ")
    ok = ~a.isnan()
    a, b = a[ok].double(), b[ok].double()
    check(torch.equal(a.isinf(), b.isinf()), f"{what}: Inf positions differ")
    f = ~a.isinf()
    if f.any():
        err = ((a[f] - b[f]).abs() / b[f].abs().clamp_min(1e-30)).max().item()
        check(err <= rtol, f"{what}: relative error {err:.3g} > {rtol:g}")


def sample(n, dtype, seed, specials=True):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    x = torch.randn(n, generator=g, device=DEVICE, dtype=torch.float32)
    x *= 10.0 ** torch.randint(-2, 3, (n,), generator=g, device=DEVICE).float()
    x[torch.rand(n, generator=g, device=DEVICE) < 0.05] = 0.0
    if specials:
        head = [7.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 4.5, -6.5, 5.5, 0.0, -0.0, 1.0, 2.0,
                6.5] + [0.0] * 8 + [-0.0] * 8
        head += [1.0, math.nan, -2.0] + [0.25] * 5 + [1.0, math.inf, 3.0] + [0.1] * 5
        head += [-math.inf] + [1.0] * 7
        head += [1e-40, -3e-41, 2e-39] + [0.0] * 5 if dtype == torch.float32 else [1e-3] * 8
        big = 3e38 if dtype != torch.float16 else 6e4
        head += [big, -big, 1.0, big / 2] + [2.0] * 4
        head = torch.tensor(head, dtype=torch.float32, device=DEVICE)[:n]
        x[: head.numel()] = head
    return x.to(dtype)


def per_element(v, bs, n):
    return v.repeat_interleave(bs)[:n] if bs else v.expand(n)


def steps(name, opt, payload, x):
    """Grid step per value of a payload (float64), for the stochastic checks."""
    n = x.numel()
    if name == "natural":
        return torch.ldexp(torch.ones(n, dtype=F64, device=x.device),
                           torch.frexp(x.double().abs())[1] - 1)
    st = payload.tensors[1].double()
    bs = opt.get("block_size", {"qsgd": 512, "terngrad": 0}.get(name, 256))
    if name == "qsgd":
        return per_element(st / opt.get("levels", 15), bs, n)
    if name == "terngrad":
        return per_element(st, bs, n)
    bits = 8 if name == "int8" else 4
    if opt.get("scheme", "absmax") == "minmax":
        nb = st.numel() // 2
        return per_element((st[nb:] - st[:nb]) / (2**bits - 1), bs, n)
    return per_element(st, bs, n)


# -- correctness -------------------------------------------------------------------------------
def make(name, opt, seed):
    """The compressor, with `seed` where it takes one."""
    if "seed" in gradcomp.compressors.option_names(name):
        opt = {**opt, "seed": seed % 100_000}
    return gradcomp.compressor(name, **opt)


def check_case(name, opt, kind, x, seed):
    n = x.numel()
    c = make(name, opt, seed)
    with backend("torch"):
        ref = c.compress(x)
        ref_dec = c.decompress(ref)
    with backend("triton"):
        check(kernels.supports(x), "the compressor does not dispatch this input to a kernel")
        got = c.compress(x)
        dec = c.decompress(got)
        dec_of_ref = c.decompress(ref)
    with backend("torch"):
        ref_dec_of_got = c.decompress(got)
    check(got.nbytes == ref.nbytes, f"wire size {got.nbytes} != {ref.nbytes}")
    check(dec.shape == x.shape and dec.dtype == x.dtype, "decoded shape/dtype")
    # Decoders are exact whatever the payload.
    same(dec, ref_dec_of_got, "decode (kernel vs torch, same payload)")
    same(dec_of_ref, ref_dec, "decode of the torch payload")
    if kind in ("exact", "exact0"):
        zs = kind == "exact"
        same(got.tensors[1], ref.tensors[1], "scales", zero_sign=zs)
        same(got.tensors[0], ref.tensors[0], "codes")
        same(dec, ref_dec, "decoded values", zero_sign=zs)
    elif kind == "qsgd":
        close(got.tensors[1], ref.tensors[1], "norms", rtol=1e-5)
        bits = c.bits
        a, b = bitpack.unpack(got.tensors[0], n, bits), bitpack.unpack(ref.tensors[0], n, bits)
        moved = (a != b).float().mean().item()
        check(moved <= 1e-3, f"{moved:.2%} of the codes differ from torch's (> 0.1%)")
    elif kind == "sign":
        same(got.tensors[0], ref.tensors[0], "sign bits")
        close(got.tensors[1], ref.tensors[1], "scales/means", rtol=1e-5 if n > 1e6 else 2e-6)
    else:  # stochastic
        xf = x.double()
        step = steps(name, opt, got, x)
        fin = torch.isfinite(xf) & torch.isfinite(step)
        if name in ("int8", "int4") or name == "terngrad":
            same(got.tensors[1], ref.tensors[1], "scales (independent of the rounding)",
                 zero_sign=opt.get("scheme") != "minmax")
        elif name == "qsgd":
            close(got.tensors[1], ref.tensors[1], "norms", rtol=1e-5)
        err = (dec.double() - xf).abs()
        tol = step * (1 + 1e-5) + 1e-30 + 2e-6 * xf.abs()
        if x.dtype != torch.float32:  # the decoded value is rounded to the 16-bit dtype
            eps, tiny = (2.0**-8, 1e-38) if x.dtype == torch.bfloat16 else (2.0**-11, 2.0**-25)
            tol = tol + dec.double().abs().nan_to_num() * eps + tiny
        check(((err <= tol) | ~fin).all(), "a stochastic value is not a neighbouring grid point")
        with backend("triton"):
            p1 = make(name, opt, seed).compress(x)
            fresh = make(name, opt, seed)
            p2 = fresh.compress(x)
            p3 = fresh.compress(x)
        for t1, t2 in zip(p1.tensors, p2.tensors):
            same(t1, t2, "same seed, same payload")
        if n > 1000:
            check(not all(torch.equal(a, b) for a, b in zip(p2.tensors, p3.tensors)),
                  "the next call draws anew")


def check_unbiased(name, opt, draws=4000):
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(32, generator=g) * torch.logspace(-2, 2, 32)).to(DEVICE)
    x[5] = 0.0
    c = gradcomp.compressor(name, **opt)
    xs = x.repeat(draws)
    with backend("triton"):
        p = c.compress(xs)
        outs = c.decompress(p).double().view(draws, -1)
    step = steps(name, opt, p, xs).view(draws, -1)[0]
    sd = step * 0.5 / math.sqrt(draws)
    err = (outs.mean(0) - x.double()).abs()
    check((err <= 5 * sd + 2e-6 * x.double().abs()).all(),
          f"biased: max error {err.max().item():.3g} vs 5 sd {(5 * sd).max().item():.3g}")
    check((outs.std(0) > 0).sum() > 16, "not random")


def check_pack():
    for bits in range(1, 9):
        for n in (1, 7, 8, 4097, 1_000_003):
            codes = torch.randint(0, 2**bits, (n,), dtype=torch.uint8, device=DEVICE)
            p = kernels.pack(codes, bits)
            same(p, bitpack.pack(codes, bits), f"pack bits={bits} n={n}")
            same(kernels.unpack(p, n, bits), codes, f"unpack bits={bits} n={n}")


CHECK_FIELDS = ["case", "input", "status", "detail", "seconds"]
TIME_FIELDS = ["case", "dtype", "numel", "direction", "torch_ms", "triton_ms", "triton_p20_ms",
               "triton_p80_ms", "speedup", "bytes", "wire_bytes", "torch_GBps", "triton_GBps",
               "triton_frac_copy_bw", "torch_frac_copy_bw", "torch_gpu_ms", "triton_gpu_ms",
               "triton_gpu_frac_copy_bw", "triton_kernels", "error"]


class Sink:
    """Rows appended to a CSV file as they come (an interrupted run keeps what it measured)."""

    def __init__(self, path, fields):
        self.rows = []
        self.f = open(path, "w", newline="")
        self.w = csv.DictWriter(self.f, fieldnames=fields, restval="")
        self.w.writeheader()

    def add(self, row):
        self.rows.append(row)
        self.w.writerow(row)
        self.f.flush()


def run_correctness(big: int, quick: bool, sink: Sink, max_seconds: float):
    seed0 = int(time.time()) % 100_000
    t_start = time.perf_counter()

    def record(case, inp, fn):
        t0 = time.perf_counter()
        try:
            fn()
            status, detail = "ok", ""
        except CheckFailed as exc:
            status, detail = "FAIL", str(exc)
        except Exception as exc:  # noqa: BLE001 - report and go on
            status, detail = "ERROR", f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        sink.add({"case": case, "input": inp, "status": status, "detail": detail[:500],
                  "seconds": round(time.perf_counter() - t0, 3)})
        print(f"  {status:5s} {case:16s} {inp:28s} {detail[:150]}", flush=True)

    # Most telling first: every case on big float32 input, then the rest while time allows.
    passes = [[(big, "fp32", True), (big, "fp32", False)]]
    if not quick:
        passes.append([(big, "bf16", True)])
        passes.append([(n, dt, True) for n in (1, 7, 4097, 1_000_003) for dt in DTYPES])
    for k, inputs in enumerate(passes):
        for j, (n, dt, specials) in enumerate(inputs):
            for i, (label, name, opt, kind) in enumerate(CASES):
                if time.perf_counter() - t_start > max_seconds:
                    sink.add({"case": "(rest)", "input": f"skipped after {max_seconds:.0f} s",
                              "status": "SKIPPED", "detail": "raise --max-check-seconds"})
                    print(f"  SKIPPED the remaining checks after {max_seconds:.0f} s", flush=True)
                    return sink.rows
                sp = specials
                if kind not in ("exact", "exact0", "sign") and sp and n > 64:
                    sp = False  # the stochastic checks want finite blocks
                seed = seed0 + 1000 * k + 97 * i + j
                x = sample(n, DTYPES[dt], seed, sp)
                record(label, f"n={n} {dt}{' specials' if sp else ''} seed={seed}",
                       lambda: check_case(name, opt, kind, x, seed))
        if k == 0:
            for label, name, opt, kind in CASES:
                if kind == "stoch":
                    record(label, "unbiased (32 values x 4000 draws)",
                           lambda: check_unbiased(name, opt))
            record("pack/unpack", "bits 1..8", check_pack)
    return sink.rows


# -- timing ------------------------------------------------------------------------------------
def bench(fn, rep_ms):
    if DEVICE == "cpu":  # --dry-run: wall time of a few calls
        times = sorted(_wall_ms(fn) for _ in range(5))
        return times[2], times[1], times[3]
    from triton.testing import do_bench

    med, p20, p80 = do_bench(fn, warmup=max(10, rep_ms // 4), rep=rep_ms,
                             quantiles=[0.5, 0.2, 0.8])
    return med, p20, p80


def gpu_time(fn, iters=20):
    """(ms, kernels) of one call of `fn` on the device alone: the summed durations of the GPU
    kernels, memsets and copies it issues (torch.profiler), averaged over `iters` calls, so
    Python and launch gaps are left out; kernels = 'name:us' of the three longest."""
    if DEVICE == "cpu":  # --dry-run: the host is the device
        return sum(_wall_ms(fn) for _ in range(iters)) / iters, "cpu"
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    per_kernel = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per_kernel[e.name] = per_kernel.get(e.name, 0.0) + e.time_range.elapsed_us()
    top = sorted(per_kernel.items(), key=lambda kv: -kv[1])[:3]
    names = "; ".join(f"{k[:40]}:{v / iters:.1f}" for k, v in top)
    return sum(per_kernel.values()) / iters / 1000, names


def _wall_ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def free_cache():
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def copy_bandwidth(rep_ms):
    """Device-to-device copy bandwidth in GB/s (read + write bytes / time), 1 GiB buffers
    (16 MiB on the CPU of a dry run)."""
    nbytes = 1 << 30 if DEVICE == "cuda" else 1 << 24
    free = torch.cuda.mem_get_info()[0] if DEVICE == "cuda" else 3 * nbytes
    while 3 * nbytes > free and nbytes > (1 << 26):
        nbytes //= 2
    src = torch.empty(nbytes, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    med, p20, p80 = bench(lambda: dst.copy_(src), rep_ms)
    return 2 * nbytes / (med * 1e-3) / 1e9, nbytes


#: Sparsifiers timed beside CASES (their checks live in tests/test_kernels_sparse.py and
#: tests/test_kernels_randomk.py): (label, compressor, options).
SPARSE_CASES = [("topk", "topk", {}), ("threshold", "threshold", {}), ("randomk", "randomk", {})]


def run_timings(n, rep_ms, copy_gbs, sink: Sink):
    cases = [(label, name, opt, "fp32") for label, name, opt, _ in CASES]
    cases += [(label, name, opt, dt) for label, name, opt, _ in CASES
              if label in ("int8", "int4") for dt in ("bf16", "fp16")]
    cases += [(label, name, opt, "fp32") for label, name, opt in SPARSE_CASES]
    for label, name, opt, dt in cases:
        dtype = DTYPES[dt]
        try:
            x = torch.randn(n, device=DEVICE).to(dtype)
            c = gradcomp.compressor(name, **opt)
            res = {}
            for be in ("torch", "triton"):
                with backend(be):
                    p = c.compress(x)
                    enc = bench(lambda: c.compress(x), rep_ms)
                    dec = bench(lambda: c.decompress(p), rep_ms)
                    enc_gpu = gpu_time(lambda: c.compress(x))
                    dec_gpu = gpu_time(lambda: c.decompress(p))
                res[be] = (enc, dec, p.nbytes, enc_gpu, dec_gpu)
            xbytes = n * x.element_size()
            for direction, k in (("encode", 0), ("decode", 1)):
                moved = xbytes + res["triton"][2]
                t_torch, t_triton = res["torch"][k][0], res["triton"][k][0]
                g_torch, (g_triton, kernels_used) = res["torch"][k + 3][0], res["triton"][k + 3]
                row = {
                    "case": label, "dtype": dt, "numel": n, "direction": direction,
                    "torch_ms": round(t_torch, 4), "triton_ms": round(t_triton, 4),
                    "triton_p20_ms": round(res["triton"][k][1], 4),
                    "triton_p80_ms": round(res["triton"][k][2], 4),
                    "speedup": round(t_torch / t_triton, 2),
                    "bytes": moved, "wire_bytes": res["triton"][2],
                    "torch_GBps": round(moved / (t_torch * 1e-3) / 1e9, 1),
                    "triton_GBps": round(moved / (t_triton * 1e-3) / 1e9, 1),
                    "torch_gpu_ms": round(g_torch, 4), "triton_gpu_ms": round(g_triton, 4),
                    "triton_gpu_frac_copy_bw": round(moved / (g_triton * 1e-3) / 1e9 / copy_gbs,
                                                     3),
                    "triton_kernels": kernels_used,
                }
                row["triton_frac_copy_bw"] = round(row["triton_GBps"] / copy_gbs, 3)
                row["torch_frac_copy_bw"] = round(row["torch_GBps"] / copy_gbs, 3)
                sink.add(row)
                print(f"  {label:16s} {dt:4s} {direction:6s} torch {t_torch:8.3f} ms  triton "
                      f"{t_triton:8.3f} ms  x{row['speedup']:6.2f}  {row['triton_GBps']:7.1f} GB/s"
                      f" ({row['triton_frac_copy_bw']:.0%} of copy); GPU time {g_triton:.3f} ms"
                      f" [{kernels_used}]", flush=True)
        except Exception as exc:  # noqa: BLE001 - report and go on
            traceback.print_exc()
            sink.add({"case": label, "dtype": dt, "numel": n, "direction": "error",
                      "error": f"{type(exc).__name__}: {exc}"[:300]})
            print(f"  ERROR {label} {dt}: {type(exc).__name__}: {exc}", flush=True)
        free_cache()
    return sink.rows


#: Error feedback, fused into the kernels against the generic wrapper around them.
EF_CASES = [("int8", "int8", {}), ("int4", "int4", {}), ("int4-bs100", "int4", {"block_size": 100}),
            ("qsgd", "qsgd", {}), ("terngrad", "terngrad", {}), ("natural", "natural", {}),
            ("signsgd", "signsgd", {}), ("efsignsgd", "efsignsgd", {}),
            ("onebit-bs256", "onebit", {"block_size": 256})]
EF_FIELDS = ["case", "numel", "unfused_ms", "fused_ms", "unfused_gpu_ms", "fused_gpu_ms",
             "speedup_gpu", "bytes", "floor_ms", "fused_gpu_over_floor", "fused_kernels", "error"]


def run_ef_timings(n, rep_ms, copy_gbs, sink: Sink):
    """One error-feedback step (a residual already held) of a float32 gradient: the fused
    kernels against `ErrorFeedback(..., fused=False)` over the same kernels. Floor bytes =
    gradient + residual read, payload + residual written."""
    from gradcomp.compressors.memory import ErrorFeedback

    x = torch.randn(n, device=DEVICE)
    for label, name, opt in EF_CASES:
        try:
            res = {}
            for fused in (False, True):
                ef = ErrorFeedback(gradcomp.compressor(name, **opt), fused=fused)
                wire = ef.compress(x, 0).nbytes
                call = bench(lambda: ef.compress(x, 0), rep_ms)[0]
                res[fused] = (call, *gpu_time(lambda: ef.compress(x, 0)))
            moved = 12 * n + wire
            floor = moved / (copy_gbs * 1e9) * 1e3
            row = {"case": label, "numel": n, "unfused_ms": round(res[False][0], 4),
                   "fused_ms": round(res[True][0], 4), "unfused_gpu_ms": round(res[False][1], 4),
                   "fused_gpu_ms": round(res[True][1], 4),
                   "speedup_gpu": round(res[False][1] / res[True][1], 2), "bytes": moved,
                   "floor_ms": round(floor, 4),
                   "fused_gpu_over_floor": round(res[True][1] / floor, 2),
                   "fused_kernels": res[True][2]}
            sink.add(row)
            print(f"  ef {label:14s} unfused GPU {row['unfused_gpu_ms']:.3f} ms, fused "
                  f"{row['fused_gpu_ms']:.3f} ms (x{row['speedup_gpu']}), "
                  f"{row['fused_gpu_over_floor']}x floor", flush=True)
        except Exception as exc:  # noqa: BLE001 - report and go on
            traceback.print_exc()
            sink.add({"case": label, "numel": n, "error": f"{type(exc).__name__}: {exc}"[:300]})
        free_cache()
    return sink.rows


def floor_rows(timings, copy_gbs):
    """Encode + decode per (case, dtype) against the memory-traffic floor: (case, dtype, floor
    ms, call ms, GPU ms, call / floor, GPU / floor)."""
    pairs = {}
    for r in timings:
        if r.get("direction") in ("encode", "decode"):
            pairs.setdefault((r["case"], r["dtype"]), []).append(r)
    out = []
    for (case, dt), rows in pairs.items():
        if len(rows) != 2:
            continue
        floor = sum(r["bytes"] for r in rows) / (copy_gbs * 1e9) * 1e3
        call = sum(r["triton_ms"] for r in rows)
        gpu = sum(r["triton_gpu_ms"] for r in rows)
        out.append((case, dt, floor, call, gpu, call / floor, gpu / floor))
    return out


# -- output ------------------------------------------------------------------------------------
def markdown(env, correctness, timings, copy_gbs, ef_rows=()):
    lines = [f"# gradcomp Triton kernels on {env['device']}", "",
             f"torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, "
             f"{env['time']}", "",
             f"Device-to-device copy bandwidth (read + write): **{copy_gbs:.0f} GB/s**", ""]
    if correctness:
        bad = [r for r in correctness if r["status"] != "ok"]
        ok = len(correctness) - len(bad)
        failed = sum(r["status"] in ("FAIL", "ERROR") for r in correctness)
        lines += [f"## Correctness: {ok} checks pass, {failed} fail "
                  "(kernel vs torch on this GPU)", ""]
        if bad:
            lines += ["| case | input | status | detail |", "|---|---|---|---|"]
            lines += [f"| {r['case']} | {r['input']} | {r['status']} | "
                      f"{r['detail'].replace('|', '/')} |" for r in bad]
            lines.append("")
    if timings:
        lines += ["## Encode + decode against the memory-traffic floor", "",
                  "Floor = (input read + payload written + payload read + output written) / copy "
                  "bandwidth. Call = through the compressor API, timed by do_bench (Python and "
                  "launches included); GPU = the summed durations of the kernels it issues "
                  "(torch.profiler), what the device spends.", "",
                  "| case | dtype | floor ms | call ms | GPU ms | call / floor | GPU / floor |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {c} | {d} | {f:.3f} | {call:.3f} | {g:.3f} | {rc:.2f} | {rg:.2f} |"
                  for c, d, f, call, g, rc, rg in floor_rows(timings, copy_gbs)]
        lines += ["", "## Encode / decode of one tensor (median of do_bench, L2 flushed)", "",
                  "Bytes = input read + payload written (encode), payload read + output written "
                  "(decode): the least any implementation moves.", "",
                  "| case | dtype | dir | torch ms | triton ms | speedup | triton GB/s | "
                  "of copy BW | torch GB/s | triton GPU ms | kernels (us per call) |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in timings:
            if r.get("direction") == "error":
                lines.append(f"| {r['case']} | {r['dtype']} | error | {r['error']} | | | | | | | |")
                continue
            lines.append(f"| {r['case']} | {r['dtype']} | {r['direction']} | {r['torch_ms']:.3f}"
                         f" | {r['triton_ms']:.3f} | {r['speedup']:.2f} | {r['triton_GBps']:.0f}"
                         f" | {r['triton_frac_copy_bw']:.0%} | {r['torch_GBps']:.0f} | "
                         f"{r['triton_gpu_ms']:.3f} | {r['triton_kernels']} |")
    if ef_rows:
        lines += ["", "## Error feedback: fused kernels vs the generic wrapper (float32)", "",
                  "Floor bytes = gradient + residual read, payload + residual written.", "",
                  "| case | unfused GPU ms | fused GPU ms | speedup | floor ms | fused / floor "
                  "| unfused call ms | fused call ms |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['case']} | {r['unfused_gpu_ms']:.3f} | {r['fused_gpu_ms']:.3f} | "
                  f"{r['speedup_gpu']:.2f} | {r['floor_ms']:.3f} | {r['fused_gpu_over_floor']:.2f}"
                  f" | {r['unfused_ms']:.3f} | {r['fused_ms']:.3f} |"
                  for r in ef_rows if not r.get("error")]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for the tables")
    ap.add_argument("--numel", type=int, default=N_BIG, help="size of the big tensor")
    ap.add_argument("--rep", type=int, default=100, help="do_bench repetition time (ms)")
    ap.add_argument("--quick", action="store_true", help="only the big float32 inputs")
    ap.add_argument("--no-check", action="store_true", help="skip the correctness checks")
    ap.add_argument("--no-time", action="store_true", help="skip the timings")
    ap.add_argument("--cases", default="", help="comma-separated case labels (default: all)")
    ap.add_argument("--dry-run", action="store_true",
                    help="the same steps on the CPU at 4096 values (set TRITON_INTERPRET=1)")
    ap.add_argument("--max-check-seconds", type=float, default=330,
                    help="stop starting new correctness checks after this long (default 330, "
                         "so that checks + timings fit in 10 minutes)")
    args = ap.parse_args(argv)
    if args.cases:
        wanted = set(args.cases.split(","))
        labels = [c[0] for c in CASES + SPARSE_CASES]
        unknown = wanted - set(labels)
        if unknown:
            ap.error(f"unknown cases {sorted(unknown)}: choose from {labels}")
        CASES[:] = [c for c in CASES if c[0] in wanted]
        SPARSE_CASES[:] = [c for c in SPARSE_CASES if c[0] in wanted]
        EF_CASES[:] = [c for c in EF_CASES if c[0] in wanted]
    global DEVICE
    if args.dry_run:  # the same steps on the CPU, Triton's interpreter, tiny sizes
        DEVICE = "cpu"
        args.numel, args.rep, args.quick = min(args.numel, 4096), 1, True
        args.max_check_seconds = min(args.max_check_seconds, 20)
    elif not torch.cuda.is_available():
        print("no CUDA device: nothing to do (--dry-run runs on the CPU)", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    import triton

    env = {"device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (dry run)",
           "torch": torch.__version__,
           "triton": triton.__version__, "cuda": torch.version.cuda,
           "python": platform.python_version(), "numel": args.numel,
           "kernels_available": kernels.available(),
           "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    print(json.dumps(env), flush=True)
    t0 = time.perf_counter()
    correctness, timings, ef_rows = [], [], []
    if not args.no_check:
        print("correctness (kernel vs torch on this GPU):", flush=True)
        sink = Sink(os.path.join(args.out, "correctness.csv"), CHECK_FIELDS)
        correctness = run_correctness(args.numel, args.quick, sink, args.max_check_seconds)
    copy_gbs, copy_bytes = copy_bandwidth(args.rep)
    env["copy_GBps"] = round(copy_gbs, 1)
    env["copy_buffer_bytes"] = copy_bytes
    print(f"copy bandwidth: {copy_gbs:.0f} GB/s", flush=True)
    if not args.no_time:
        print("timings:", flush=True)
        sink = Sink(os.path.join(args.out, "timings.csv"), TIME_FIELDS)
        timings = run_timings(args.numel, args.rep, copy_gbs, sink)
        ef_rows = run_ef_timings(args.numel, args.rep, copy_gbs,
                                 Sink(os.path.join(args.out, "ef_timings.csv"), EF_FIELDS))
    env["seconds"] = round(time.perf_counter() - t0, 1)
    with open(os.path.join(args.out, "env.json"), "w") as f:
        json.dump(env, f, indent=2)
    md = markdown(env, correctness, timings, copy_gbs, ef_rows)
    name = "roofline.md" if timings else "correctness.md"
    with open(os.path.join(args.out, name), "w") as f:
        f.write(md)
    # The short table, last.
    bad = [r for r in correctness if r["status"] in ("FAIL", "ERROR")]
    ok = sum(r["status"] == "ok" for r in correctness)
    skipped = any(r["status"] == "SKIPPED" for r in correctness)
    print()
    print(f"{env['device']}: copy {copy_gbs:.0f} GB/s; correctness: {ok} ok, {len(bad)} failed"
          f"{' (time ran out: the rest skipped)' if skipped else ''}; {env['seconds']} s")
    for r in bad:
        print(f"  {r['status']} {r['case']} {r['input']}: {r['detail'][:200]}")
    if timings:
        print(f"{'case':16s} {'dt':4s} {'dir':6s} {'torch ms':>9s} {'triton ms':>9s} "
              f"{'speedup':>7s} {'GB/s':>6s} {'of copy':>7s}")
        for r in timings:
            if r.get("direction") == "error":
                print(f"{r['case']:16s} {r['dtype']:4s} ERROR {r['error'][:80]}")
                continue
            print(f"{r['case']:16s} {r['dtype']:4s} {r['direction']:6s} {r['torch_ms']:9.3f} "
                  f"{r['triton_ms']:9.3f} {r['speedup']:7.2f} {r['triton_GBps']:6.0f} "
                  f"{r['triton_frac_copy_bw']:7.0%}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
