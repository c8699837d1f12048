#!/usr/bin/env python
"""PowerSGD: gradcomp's `powersgd` DDP hook against torch's `powerSGD_hook` at the same rank,
on the same model and inputs, side by side in one process (world size 1; issue #5's target:
gradcomp at least 1.3x faster).

    # GPU, script mode (hooks timed round-robin; CSV + markdown, ratios printed):
    python benchmarks/bench_powersgd.py --out benchmarks/results/gpu-powersgd
    # pytest-benchmark (CPU: a small model; GPU: the same cases as the script):
    python -m pytest benchmarks/bench_powersgd.py --benchmark-enable --benchmark-only \
        --benchmark-group-by=param:model,param:rank

Cases (every hook starts compressing at iteration 2 and is warmed up past it; warm start and
error feedback on, min_compression_rate 2, epsilon 0, torch's defaults):
* GPU (NCCL): `resnet50`, a ResNet-50 (torchvision's parameter shapes and order, written out
  here) on a batch of images, one full forward + backward per iteration; `resnet50-grads`,
  the same parameters under a forward whose backward only writes a random gradient per
  parameter, so the iteration is DDP plus the hook; ranks 1 and 4. Hooks: `ddp` (DDP's own
  all-reduce), `gradcomp`, `gradcomp-torch` (the same hook with GRADCOMP_KERNELS=0: torch
  orthogonalises), `torch` (powerSGD_hook as shipped: one tensor at a time) and
  `torch-batched` (its batch_tensors_with_same_shape=True).
* CPU (gloo): a small MLP that fits in one DDP bucket (torch's hook waits inside its future
  callbacks, which hangs gloo with several buckets), rank 1.
Script mode also times the orthogonalisation alone on ResNet-50's P matrices (torch's
per-tensor code, gradcomp's torch path per shape, the Triton kernel in one launch).
An iteration ends with a device synchronisation (torch's hook synchronises inside it anyway).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_psgd
from torch.nn.parallel import DistributedDataParallel as DDP

try:
    import gradcomp.comm
except ImportError:  # run from the repository root without PYTHONPATH
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import gradcomp.comm

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda", 0) if CUDA else torch.device("cpu")
BACKEND = "nccl" if CUDA else "gloo"
MODELS = ["resnet50", "resnet50-grads"] if CUDA else ["mlp"]
RANKS = [1, 4] if CUDA else [1]
HOOKS = (["ddp", "gradcomp", "gradcomp-torch", "torch", "torch-batched"] if CUDA
         else ["ddp", "gradcomp", "torch"])
START_ITER = 2
WARMUP = 6  # iterations before timing: past START_ITER, warm start settled, kernels compiled
BATCH, IMAGE = 32, 128  # resnet50 inputs on the GPU


# -- models ----------------------------------------------------------------------------------
class Bottleneck(nn.Module):
    """torchvision's ResNet-50 bottleneck (expansion 4, stride on the 3x3 convolution)."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = 4 * width
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                         nn.BatchNorm2d(cout))
                           if stride != 1 or cin != cout else None)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


def resnet50(num_classes: int = 1000) -> nn.Module:
    """ResNet-50 (He et al., CVPR 2016) with torchvision's parameter shapes and order
    (25,557,032 parameters), so DDP builds the same buckets."""
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = 4 * width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, num_classes)]
    return nn.Sequential(*layers)


class GradientBank(nn.Module):
    """The parameters of `net` (same shapes, same order) with loss = sum_i <p_i, x_i>: the
    backward writes x_i as p_i's gradient and does little else."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.params = nn.ParameterList([nn.Parameter(p.detach().clone())
                                        for p in net.parameters()])

    def forward(self, xs):
        return sum((p * x).sum() for p, x in zip(self.params, xs))


def build(model: str):
    """(module, inputs, loss function) on DEVICE, the same for every hook."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    if model == "resnet50":
        net = resnet50().to(DEVICE)
        x = torch.randn(BATCH, 3, IMAGE, IMAGE, generator=gen).to(DEVICE)
        y = torch.randint(0, 1000, (BATCH,), generator=gen).to(DEVICE)
        return net, (x,), lambda out: F.cross_entropy(out, y)
    if model == "resnet50-grads":
        net = GradientBank(resnet50()).to(DEVICE)
        xs = [torch.randn(p.shape, generator=gen).to(DEVICE) for p in net.parameters()]
        return net, (xs,), lambda out: out
    if model == "mlp":
        net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                            nn.Linear(128, 10)).to(DEVICE)
        x = torch.randn(32, 64, generator=gen).to(DEVICE)
        return net, (x,), lambda out: out.square().mean()
    raise ValueError(f"model={model!r} is not allowed: choose one of 'resnet50', "
                     "'resnet50-grads', 'mlp'")


# -- hooks and timing ------------------------------------------------------------------------
@contextlib.contextmanager
def process_group():
    """A world-size-1 group of BACKEND in this process: the default group (created here if
    none exists), else a new group beside it. Yields the group to pass (None: default).
    On the CPU, torch runs one intra-op thread meanwhile: its OpenMP threads beside gloo's on
    a small CI machine made single iterations stall for ~100 ms."""
    threads = torch.get_num_threads()
    if not CUDA:
        torch.set_num_threads(1)
    try:
        with _group() as group:
            yield group
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def _group():
    if dist.is_initialized():
        yield None if dist.get_backend() == BACKEND else dist.new_group(backend=BACKEND)
        return
    with tempfile.TemporaryDirectory() as tmp:
        if CUDA:
            torch.cuda.set_device(DEVICE)
        dist.init_process_group(BACKEND, init_method=f"file://{os.path.join(tmp, 'store')}",
                                rank=0, world_size=1)
        try:
            yield None
        finally:
            dist.destroy_process_group()


class Case:
    """One model under one hook, ready to step: `step()` runs one DDP iteration."""

    def __init__(self, model: str, rank: int, hook: str, group):
        net, self.inputs, self.loss = build(model)
        self.ddp = DDP(net, device_ids=[DEVICE.index] if CUDA else None, process_group=group)
        self.hook = hook
        if hook in ("torch", "torch-batched"):
            state = torch_psgd.PowerSGDState(
                process_group=group, matrix_approximation_rank=rank,
                start_powerSGD_iter=START_ITER, min_compression_rate=2, random_seed=0,
                batch_tensors_with_same_shape=hook == "torch-batched")
            self.ddp.register_comm_hook(state, torch_psgd.powerSGD_hook)
        elif hook in ("gradcomp", "gradcomp-torch"):
            gradcomp.comm.register(self.ddp, "powersgd", process_group=group, rank=rank,
                                   start_iter=START_ITER, min_compression_rate=2,
                                   telemetry_limit=0)
        elif hook != "ddp":
            raise ValueError(f"hook={hook!r} is not allowed: choose one of {HOOKS}")

    def step(self):
        with _kernels_off(self.hook == "gradcomp-torch"):
            self.ddp.zero_grad(set_to_none=False)
            self.loss(self.ddp(*self.inputs)).backward()
            if CUDA:
                torch.cuda.synchronize(DEVICE)

    def warm_up(self, iterations: int = WARMUP):
        for _ in range(iterations):
            self.step()

    def grads_finite(self) -> bool:
        return all(p.grad is not None and bool(torch.isfinite(p.grad).all())
                   for p in self.ddp.parameters())


@contextlib.contextmanager
def _kernels_off(off: bool):
    """GRADCOMP_KERNELS=0 inside (gradcomp's compressors take their torch code)."""
    old = os.environ.get("GRADCOMP_KERNELS")
    if off:
        os.environ["GRADCOMP_KERNELS"] = "0"
    try:
        yield
    finally:
        if off and old is None:
            del os.environ["GRADCOMP_KERNELS"]
        elif off:
            os.environ["GRADCOMP_KERNELS"] = old


def _free():
    gc.collect()
    if CUDA:
        torch.cuda.empty_cache()


# -- pytest-benchmark ------------------------------------------------------------------------
_MEANS: dict = {}


@pytest.fixture(scope="module")
def group():
    with process_group() as g:
        yield g
    for (model, rank), means in sorted(_MEANS.items()):
        if "gradcomp" in means and "torch" in means:
            print(f"\n{model} rank {rank}: torch powerSGD_hook / gradcomp = "
                  f"{means['torch'] / means['gradcomp']:.2f}x "
                  + " ".join(f"{h}={t * 1e3:.2f}ms" for h, t in means.items()))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("hook", HOOKS)
def test_iteration(benchmark, group, model, rank, hook):
    case = Case(model, rank, hook, group)
    case.warm_up()
    benchmark.pedantic(case.step, rounds=20 if CUDA else 5, iterations=1, warmup_rounds=1)
    assert case.grads_finite()
    if benchmark.stats is not None:  # None under --benchmark-disable
        _MEANS.setdefault((model, rank), {})[hook] = benchmark.stats.stats.median
    del case
    _free()


# -- script mode -----------------------------------------------------------------------------
def time_hooks(model: str, rank: int, hooks, group, rounds: int, block: int = 5) -> dict:
    """Seconds per iteration of each hook: hooks built side by side, warmed up, then timed
    round-robin in blocks of `block` iterations (so drifts in clock or load hit all alike)."""
    cases = {h: Case(model, rank, h, group) for h in hooks}
    for case in cases.values():
        case.warm_up()
    times = {h: [] for h in hooks}
    for _ in range(-(-rounds // block)):
        for h, case in cases.items():
            for _ in range(block):
                t0 = time.perf_counter()
                case.step()
                times[h].append(time.perf_counter() - t0)
    assert all(case.grads_finite() for case in cases.values()), "non-finite gradients"
    del cases
    _free()
    return times


def _ortho_timings(rank: int, reps: int = 50) -> dict:
    """Milliseconds to orthogonalise all of ResNet-50's P matrices once (every compressed
    weight, grouped by shape as gradcomp groups them), with each implementation."""
    from gradcomp import kernels
    from gradcomp.compressors import powersgd
    from gradcomp.kernels.orthogonal import reference as orthogonalize

    comp = gradcomp.compressor("powersgd", rank=rank)
    lay = comp.layout([p.shape for p in resnet50().parameters()])
    shapes = lay.low_rank_shapes(0)
    gen = torch.Generator().manual_seed(2)
    flat = torch.randn(sum(b * n * r for b, n, r in shapes), generator=gen).to(DEVICE)

    def views(buf):
        return list(powersgd._split(buf, range(len(shapes)), shapes).values())

    def torch_hook(buf):  # torch's powerSGD_hook: one (1, n, r) matrix at a time
        for v in views(buf):
            for m in v.split(1):
                torch_psgd._orthogonalize(m, 0)

    impls = {"torch-per-tensor": torch_hook,
             "gradcomp-torch-per-shape": lambda buf: [orthogonalize.orthogonalize_torch(v, 0.0)
                                                      for v in views(buf)],
             "gradcomp-triton-one-launch": lambda buf: kernels.orthogonalize_(buf, 0.0,
                                                                              shapes=shapes)}
    out = {}
    for name, fn in impls.items():
        bufs = [flat.clone() for _ in range(reps + 3)]
        for b in bufs[:3]:
            fn(b)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for b in bufs[3:]:
            fn(b)
        end.record()
        end.synchronize()
        out[name] = start.elapsed_time(end) / reps
    out["matrices"] = sum(b for b, _, _ in shapes)
    return out


def _env() -> dict:
    import triton

    return {"device": torch.cuda.get_device_name(DEVICE) if CUDA else platform.processor(),
            "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version(),
            "backend": BACKEND, "world_size": 1, "batch": BATCH, "image": IMAGE,
            "start_iter": START_ITER, "warmup": WARMUP}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for powersgd_hooks.csv, "
                    "orthogonalize.csv, powersgd.md and env.json")
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--ranks", nargs="+", type=int, default=RANKS)
    ap.add_argument("--hooks", nargs="+", default=HOOKS)
    ap.add_argument("--rounds", type=int, default=30, help="timed iterations per hook")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    env = _env()
    with open(os.path.join(args.out, "env.json"), "w") as f:
        json.dump(env, f, indent=1)
    md = [f"# PowerSGD hooks, {env['device']} ({BACKEND}, world size 1)", "",
          "| model | rank | hook | median ms | p20 | p80 | torch / this | hook cost ms |",
          "|---|---:|---|---:|---:|---:|---:|---:|"]
    path = os.path.join(args.out, "powersgd_hooks.csv")
    with process_group() as group, open(path, "w", newline="") as f:
        writer = None
        for model in args.models:
            for rank in args.ranks:
                times = time_hooks(model, rank, args.hooks, group, args.rounds)
                med = {h: statistics.median(t) for h, t in times.items()}
                for h, t in times.items():
                    q = statistics.quantiles(t, n=5) if len(t) > 1 else [t[0]] * 4
                    row = dict(env, model=model, rank=rank, hook=h, rounds=len(t),
                               median_s=med[h], p20_s=q[0], p80_s=q[3])
                    if writer is None:
                        writer = csv.DictWriter(f, fieldnames=list(row))
                        writer.writeheader()
                    writer.writerow(row)
                    f.flush()
                    ratio = med["torch"] / med[h] if "torch" in med else float("nan")
                    cost = med[h] - med["ddp"] if "ddp" in med else float("nan")
                    md.append(f"| {model} | {rank} | {h} | {med[h] * 1e3:.2f} | "
                              f"{q[0] * 1e3:.2f} | {q[3] * 1e3:.2f} | {ratio:.2f} | "
                              f"{cost * 1e3:.2f} |")
                    print(md[-1], flush=True)
    md += ["", "torch / this: torch powerSGD_hook's median iteration over this hook's. "
           "hook cost: median iteration minus DDP's own all-reduce iteration."]
    if CUDA:
        md += ["", "## Orthogonalising all of ResNet-50's P matrices once (ms, CUDA events)",
               "", "| rank | matrices | torch per tensor | gradcomp torch per shape | "
               "gradcomp Triton, one launch |", "|---:|---:|---:|---:|---:|"]
        with open(os.path.join(args.out, "orthogonalize.csv"), "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["rank", "implementation", "ms", "matrices"])
            for rank in args.ranks:
                t = _ortho_timings(rank)
                for name in ("torch-per-tensor", "gradcomp-torch-per-shape",
                             "gradcomp-triton-one-launch"):
                    writer.writerow([rank, name, t[name], t["matrices"]])
                md.append(f"| {rank} | {t['matrices']} | {t['torch-per-tensor']:.3f} | "
                          f"{t['gradcomp-torch-per-shape']:.3f} | "
                          f"{t['gradcomp-triton-one-launch']:.3f} |")
                print(md[-1], flush=True)
    with open(os.path.join(args.out, "powersgd.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
