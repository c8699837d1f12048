"""Encode and decode of every kernel-backed compressor, torch against Triton (pytest-benchmark).

    python -m pytest benchmarks/bench_kernels.py --benchmark-enable --benchmark-only

* CPU (CI): a CI-sized tensor (65,536 float32 values); the torch backend only, and the Triton
  kernels too when TRITON_INTERPRET=1 is set (interpreter timings say nothing about a GPU),
  then on 32,768 values: one program of each kernel (the interpreter pays per program).
* GPU: 25.6M float32 values on CUDA, both backends (triton = the compressor dispatching to its
  kernels, torch = the same compressor with GRADCOMP_KERNELS=0), and a roofline table at the
  end: achieved GB/s = (bytes read + bytes written) / median time, and its fraction of the
  device copy bandwidth measured in the same run. benchmarks/gpu_roofline.py does the same with
  triton.testing.do_bench (L2 flushed) plus the correctness checks: prefer it for reports.
"""
import os

import pytest
import torch

import gradcomp
from gradcomp import kernels

from gpu_roofline import CASES, backend

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
NUMEL = int(os.environ.get("GRADCOMP_BENCH_NUMEL", 25_600_000 if CUDA else
                           1 << 15 if kernels.interpreting() else 1 << 16))
BACKENDS = ["torch", "triton"] if CUDA or kernels.interpreting() else ["torch"]


def _direct(name, opt):
    """(encode, decode) through the kernel functions themselves: the interpreter runs them on
    CPU tensors, where the compressors keep to torch."""
    c = gradcomp.compressor(name, **opt)
    if name in ("int8", "int4"):
        return (lambda x: kernels.int_encode(x, c.bits, c.block_size, c.scheme, c.stochastic),
                lambda t, n: kernels.int_decode(*t, n, c.bits, c.block_size, c.scheme))
    if name == "qsgd":
        return (lambda x: kernels.qsgd_encode(x, c.levels, c.block_size, c.stochastic),
                lambda t, n: kernels.qsgd_decode(*t, n, c.levels, c.block_size))
    if name == "terngrad":
        return (lambda x: kernels.terngrad_encode(x, c.block_size),
                lambda t, n: kernels.terngrad_decode(*t, n, c.block_size))
    if name == "natural":
        return kernels.natural_encode, lambda t, n: kernels.natural_decode(*t, n)
    bs = getattr(c, "block_size", 0)
    return (lambda x: kernels.sign_encode(x, name, bs),
            lambda t, n: kernels.sign_decode(*t, n, name, bs))


def _functions(name, opt, be):
    """(encode, decode, wire bytes of x) for backend `be`."""
    if be == "triton" and not CUDA:
        enc, dec = _direct(name, opt)
        return (lambda x: enc(x), lambda x, wire: dec(wire, x.numel()),
                lambda x: sum(t.numel() * t.element_size() for t in enc(x)))
    c = gradcomp.compressor(name, **opt)

    def run(fn, *args):
        with backend(be):
            return fn(*args)

    return (lambda x: run(c.compress, x), lambda x, wire: run(c.decompress, wire),
            lambda x: run(c.compress, x).nbytes)


@pytest.fixture(scope="module")
def roofline(request):
    """Rows of the roofline table, printed at the end of a timed GPU run."""
    table = {"rows": [], "copy_GBps": None}
    if CUDA:
        from gpu_roofline import copy_bandwidth

        table["copy_GBps"] = copy_bandwidth(100)[0]
    yield table
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    if not table["rows"] or tr is None:
        return
    bw = table["copy_GBps"]
    tr.write_line("")
    tr.write_line(f"roofline of {NUMEL:,} values on {torch.cuda.get_device_name()}: device copy "
                  f"bandwidth {bw:.0f} GB/s (read + write)")
    tr.write_line(f"{'case':16s} {'dir':6s} {'backend':7s} {'median ms':>10s} {'GB/s':>7s} "
                  f"{'of copy':>7s}")
    for r in table["rows"]:
        tr.write_line(f"{r['case']:16s} {r['direction']:6s} {r['backend']:7s} {r['ms']:10.3f} "
                      f"{r['GBps']:7.1f} {r['GBps'] / bw:7.0%}")


@pytest.mark.parametrize("direction", ["encode", "decode"])
@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("label,name,opt", [(c[0], c[1], c[2]) for c in CASES],
                         ids=[c[0] for c in CASES])
def test_kernel_bench(benchmark, roofline, label, name, opt, be, direction):
    x = torch.randn(NUMEL, device=DEVICE)
    enc, dec, wire_bytes = _functions(name, opt, be)
    wire = enc(x)
    sync = torch.cuda.synchronize if CUDA else (lambda: None)
    if direction == "encode":
        def fn():
            enc(x)
            sync()
    else:
        def fn():
            dec(x, wire)
            sync()
    benchmark.group = f"{label} {direction}"
    benchmark.extra_info.update(numel=NUMEL, backend=be, device=DEVICE)
    if be == "triton" and not CUDA:  # the interpreter: a few rounds are plenty
        benchmark.pedantic(fn, rounds=3, warmup_rounds=1)
    else:
        benchmark(fn)
    if CUDA and not benchmark.disabled and benchmark.stats is not None:
        ms = benchmark.stats.stats.median * 1e3
        moved = NUMEL * x.element_size() + wire_bytes(x)
        roofline["rows"].append({"case": label, "direction": direction, "backend": be, "ms": ms,
                                 "GBps": moved / (ms * 1e-3) / 1e9})
