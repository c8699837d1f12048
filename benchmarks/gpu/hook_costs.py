#!/usr/bin/env python
"""What a user of gradcomp's DDP hook pays on one GPU, host time beside GPU time.

    PYTHONPATH=. python benchmarks/gpu/hook_costs.py --out DIR [--dry-run]

Two tables, written row by row as measured:

* ``bucket_costs.csv``: one bucket of a ResNet-50 and of a GPT-2 (the largest 25 MB DDP
  bucket of each model's parameter shapes, N(0, 1) values), every method as the hook runs it
  (`hookpath.hook_communicator`: compression with error feedback where the method has it, the
  division by the world size, the decode of `--world-size` payloads for all-gather methods).
  *Host* time: the Python call of encode (+ PowerSGD's middle round) + decode, read with
  `perf_counter` and no synchronisation, so it is what the hook's thread spends; *GPU* time:
  the summed durations of the kernels those calls issue (torch.profiler), without the cache
  eviction that precedes each call (`hookpath.evict`, profiled alone and subtracted).
* ``iterations.csv``: DDP iterations of the same parameter sets under a forward whose
  backward writes a stored random gradient per parameter (so an iteration is DDP plus the
  hook), bucket cap 25 MB, on NCCL with world size 1 and on 2 gloo ranks sharing the GPU:
  plain DDP (its own all-reduce) and every method. Per iteration: wall time (median, each
  iteration ending with a device synchronisation), the host time spent inside gradcomp's hook
  calls, and the summed kernel time, all beside plain DDP's.
* ``host_profile.txt``: where the host time of one ResNet-50 bucket goes (cProfile of
  `PROFILED` methods' encode + decode, the functions with the most cumulative time).

On a GPU this is the measurement; `--dry-run` runs the same code on the CPU at tiny sizes
(Triton's interpreter, gloo only), so the script is known to work before a GPU is lent. On
the CPU the "GPU" time is the device's wall time, the host's own.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import gradcomp  # noqa: E402
from gradcomp.comm.communicators import Bucket  # noqa: E402
from gradcomp.comm.hooks import build_state, hook  # noqa: E402
from gradcomp.evaluation.common import processes  # noqa: E402
from gradcomp.evaluation.common.env import end_process_group  # noqa: E402
from gradcomp.evaluation.benches.hookpath import evict, hook_communicator, run_phases  # noqa
from gradcomp.evaluation.profiles.profiles import load_profile  # noqa: E402

MODELS = ("resnet50", "gpt2")
BUCKET_CAP = 25 * 2**20
DDP_BASELINE = "ddp"  # plain DDP: its own all-reduce, no hook
SKIP = ("bf16",)  # methods a GPU without bf16 cannot run; kept where it can (see main)
PROFILED = ("int8", "topk", "randomk", "powersgd", "signsgd")


def shapes(model: str, dry: bool) -> list[torch.Size]:
    """The model's parameter shapes in forward order (profiles list them as they become
    ready in backward); `dry`: every dimension cut to at most 8 values."""
    ready = load_profile(model).shapes
    return [torch.Size(min(d, 8) if dry else d for d in s) for s in reversed(ready)]


def largest_bucket(model_shapes: list[torch.Size], cap_bytes: int) -> list[torch.Size]:
    """The shapes of the largest bucket when DDP fills buckets of `cap_bytes` from the last
    parameter backwards (its first bucket's 1 MB cap left aside)."""
    buckets, current, size = [], [], 0
    for s in reversed(model_shapes):
        current.append(s)
        size += 4 * math.prod(s)
        if size >= cap_bytes:
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return max(buckets, key=lambda b: sum(math.prod(s) for s in b))


class Writer:
    """Appends rows to a CSV as they are measured (header from the first row)."""

    def __init__(self, path: str):
        self.path, self.fields = path, None

    def add(self, row: dict) -> None:
        new = not os.path.exists(self.path)
        if self.fields is None:
            self.fields = list(row)
        with open(self.path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.fields)
            if new:
                w.writeheader()
            w.writerow(row)


def kernel_seconds(fn, device: torch.device, calls: int) -> float:
    """Seconds of device work per call of `fn`: summed kernel durations (CUDA), wall time
    with a synchronisation (CPU)."""
    if device.type != "cuda":
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    total = sum(e.time_range.elapsed_us() for e in prof.events()
                if e.device_type == torch.autograd.DeviceType.CUDA)
    return total / 1e6 / calls


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


# -- one bucket ------------------------------------------------------------------------------
def host_profile(fn, title: str, calls: int = 20) -> str:
    """cProfile of `calls` calls of `fn`: the 20 functions with the most cumulative time."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(20)
    return f"## {title}, {calls} calls\n{text.getvalue()}\n"


def bucket_row(model: str, method: str, bucket_shapes, world_size: int, device, reps: int,
               profile_to=None):
    numel = sum(math.prod(s) for s in bucket_shapes)
    grad = torch.randn(numel, generator=torch.Generator(device=device).manual_seed(0),
                       device=device)
    buffer = torch.empty_like(grad)
    bucket = Bucket(buffer, 0, lambda: bucket_shapes)
    comp, communicator = hook_communicator(method, {}, bucket, world_size)
    host = []

    def host_timed(fn, *args):
        start = time.perf_counter()
        out = fn(*args)
        host.append(time.perf_counter() - start)
        return 0.0, out

    def codec():
        run_phases(comp, communicator, bucket, world_size, host_timed)

    def once(with_codec=True):
        buffer.copy_(grad)
        evict(4 * numel, device)
        if with_codec:
            codec()

    for _ in range(3):  # compile, warm start, allocator
        once()
    sync(device)
    host.clear()
    per_call = []
    for _ in range(reps):
        once()
        per_call.append(sum(host))
        host.clear()
    sync(device)
    device_s = kernel_seconds(once, device, reps) - kernel_seconds(
        lambda: once(with_codec=False), device, reps)
    host.clear()
    if profile_to is not None:
        profile_to.write(host_profile(codec, f"{model} {method}: {numel} values"))
        host.clear()
    host_s = statistics.median(per_call)
    return {"model": model, "method": method, "communicator": type(communicator).__name__,
            "numel": numel, "tensors": len(bucket_shapes), "world_size": world_size,
            "host_us": round(host_s * 1e6, 1), "gpu_us": round(device_s * 1e6, 1),
            "host_over_gpu": round(host_s / device_s, 2) if device_s > 0 else math.nan}


# -- DDP iterations --------------------------------------------------------------------------
class _StoredGradients(torch.autograd.Function):
    """Forward: a scalar; backward: the stored gradient of each parameter."""

    @staticmethod
    def forward(ctx, x, grads, *params):
        ctx.grads = grads
        return x.sum() * 0

    @staticmethod
    def backward(ctx, _):
        return (None, None, *ctx.grads)


class GradientModel(nn.Module):
    """Parameters of the given shapes whose gradients are fixed N(0, 1e-3) tensors."""

    def __init__(self, model_shapes, device, seed: int):
        super().__init__()
        gen = torch.Generator(device=device).manual_seed(seed)
        self.weights = nn.ParameterList(nn.Parameter(torch.zeros(s, device=device))
                                        for s in model_shapes)
        self.grads = [torch.randn(s, generator=gen, device=device) * 1e-3
                      for s in model_shapes]

    def forward(self, x):
        return _StoredGradients.apply(x, self.grads, *self.weights)


def timed_hook(totals: dict):
    def wrapped(state, bucket):
        start = time.perf_counter()
        fut = hook(state, bucket)
        totals["host_s"] += time.perf_counter() - start
        totals["calls"] += 1
        return fut
    return wrapped


def iteration_rows(rank, world_size, backend, device, models, methods, dry, iters, out):
    """Plain DDP and every method's hook: one row per (model, method), appended to `out`
    by rank 0 with its ratio to plain DDP."""
    rows = []
    x = torch.ones(1, device=device)
    for model in models:
        model_shapes = shapes(model, dry)
        for method in (DDP_BASELINE, *methods):
            net = GradientModel(model_shapes, device, seed=rank)
            ddp = DDP(net, bucket_cap_mb=BUCKET_CAP / 2**20)
            totals = {"host_s": 0.0, "calls": 0}
            if method != DDP_BASELINE:
                state = build_state(method, start_iter=0, telemetry_limit=0)
                state.track_parameters(net)
                ddp.register_comm_hook(state, timed_hook(totals))

            def step():
                ddp.zero_grad(set_to_none=False)
                ddp(x).backward()

            for _ in range(3):
                step()
            sync(device)
            walls = []
            totals.update(host_s=0.0, calls=0)
            for _ in range(iters):
                start = time.perf_counter()
                step()
                sync(device)
                walls.append(time.perf_counter() - start)
            host_s, calls = totals["host_s"] / iters, totals["calls"] / iters
            kernels = kernel_seconds(step, device, max(2, iters // 4))
            rows.append({"backend": backend, "world_size": world_size, "model": model,
                         "method": method, "buckets": calls,
                         "iter_ms": round(statistics.median(walls) * 1e3, 3),
                         "iter_spread_ms": round((max(walls) - min(walls)) * 1e3, 3),
                         "hook_host_ms": round(host_s * 1e3, 3),
                         "kernel_ms": round(kernels * 1e3, 3)})
            if rank == 0:
                print(rows[-1], flush=True)
            del ddp, net
            if device.type == "cuda":
                torch.cuda.empty_cache()
    if rank == 0:
        writer = Writer(out)
        for row in with_baseline(rows):
            writer.add(row)
    return rows


def with_baseline(rows):
    """Each row with its ratio to plain DDP of the same model and backend."""
    base = {(r["backend"], r["model"]): r for r in rows if r["method"] == DDP_BASELINE}
    for r in rows:
        b = base[(r["backend"], r["model"])]
        yield {**r, "vs_ddp": round(r["iter_ms"] / b["iter_ms"], 3),
               "hook_kernel_ms": round(r["kernel_ms"] - b["kernel_ms"], 3)}


def _worker(rank, world_size, backend, init, args, methods):
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world_size)
    try:
        models = MODELS if world_size == 1 and not args.dry_run else ("resnet50",)
        iters = args.iters if world_size == 1 else args.gloo_iters
        iteration_rows(rank, world_size, backend, device, models, methods, args.dry_run,
                       iters, os.path.join(args.out, "iterations.csv"))
    finally:
        end_process_group()  # the hooked DDPs freed first


def run_group(world_size: int, backend: str, args, methods) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{os.path.join(tmp, 'store')}"
        if world_size == 1:
            _worker(0, 1, backend, init, args, methods)
        else:
            processes.start(_worker, world_size, world_size, backend, init, args, methods)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for bucket_costs.csv, iterations.csv")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes, interpreter")
    ap.add_argument("--world-size", type=int, default=8,
                    help="ranks a bucket is priced for (all-gather decodes; default 8)")
    ap.add_argument("--reps", type=int, default=20, help="timed calls per bucket (default 20)")
    ap.add_argument("--iters", type=int, default=20,
                    help="timed iterations, world size 1 (default 20)")
    ap.add_argument("--gloo-iters", type=int, default=10,
                    help="timed iterations, 2 gloo ranks (default 10)")
    ap.add_argument("--methods", default="", help="comma-separated (default: every method)")
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        ap.error("no CUDA device: give --dry-run to run on the CPU")
    if args.dry_run:
        args.reps, args.iters, args.gloo_iters = 2, 2, 2
    os.makedirs(args.out, exist_ok=True)
    device = torch.device("cuda" if cuda else "cpu")
    methods = args.methods.split(",") if args.methods else list(gradcomp.names())
    if cuda and not torch.cuda.is_bf16_supported():
        methods = [m for m in methods if m not in SKIP]
    buckets = Writer(os.path.join(args.out, "bucket_costs.csv"))
    with open(os.path.join(args.out, "host_profile.txt"), "w") as profiles:
        for model in MODELS:
            bucket_shapes = largest_bucket(shapes(model, args.dry_run), BUCKET_CAP)
            for method in methods:
                profile = model == MODELS[0] and method in PROFILED
                row = bucket_row(model, method, bucket_shapes, args.world_size, device,
                                 args.reps, profiles if profile else None)
                buckets.add(row)
                print(row, flush=True)
    run_group(1, "nccl" if cuda else "gloo", args, methods)
    run_group(2, "gloo", args, methods)
    return 0


if __name__ == "__main__":
    sys.exit(main())
