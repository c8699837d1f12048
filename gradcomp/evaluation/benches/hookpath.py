"""The hook-path benchmark: what gradcomp's DDP hook computes for one bucket, phase by phase,
on this device, without the network. The method's own communicator
(`gradcomp.comm.communicators.build`, as the hook builds it) encodes a bucket as the hook
does (`Communicator.start`, as its `average` calls it: compression with error feedback, the
division by the world size, packing for an all-gather, PowerSGD's P = M Q on the tensors'
own matrices), then decodes (`Communicator.end`) what the exchange would deliver: for an
all-gather `world_size` payloads (this rank's, copied into the communicator's receive
buffers; the aggregation decodes and combines them all), for an all-reduce the summed wire
tensors (this rank's), and writes the average back into the bucket. PowerSGD's work between
its rounds (orthogonalise P, Q = M^T P) is timed on its own (``middle_s``). `compress`
prices one compress and one decompress of a flat tensor; this prices what the hook really
does per bucket.

Memory as in training: between two hook calls, backward and the exchange pass through
memory, so every timed phase starts after a scratch buffer of `EVICT_FACTOR` x the bucket's
bytes (at least `EVICT_MIN_BYTES`) was written (`evict`; a loop that calls the codec back to
back finds its data in the caches and its buffers reused, and runs faster than the hook does
in training).

With `slowest_rank` (every rank of a process group runs the same sweep at once, as the
workers compute side by side in training): each phase starts after a barrier and its time is
the slowest rank's, since the collective after it waits for that rank.

What the bucket holds matters: a workload's gradients (`workload_gradient`: one backward
pass, the tensors of its largest DDP bucket, each rank its own batch) cost several codecs more
than Gaussian noise does (top-k's sampled threshold keeps more candidates; PowerSGD multiplies
the parameters' own matrices, not one square one), so the benches behind a prediction use them;
without one, a bucket is N(0, 1) noise in one `matrix_shape` tensor.

Columns: method, options, aggregation, communicator (its class), numel, data ("randn" or the
workload gradient's `source`, e.g. "mlp gradient, batch 64, 25 MB buckets"), tensors (how
many tensors the bucket holds), world_size, dtype, device, encode_s, middle_s (NaN but for
two-round methods), decode_s (the whole bucket's decode: all `world_size` payloads), their
spreads, repeats, slowest_rank, and the environment columns.
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from functools import partial

import pandas as pd
import torch
import torch.distributed as dist
from tqdm import tqdm

from ... import diloco
from ...checks import check_device, check_int
from ...comm.communicators import AllGather, Bucket, DenseAllReduce, TwoRounds, build
from ...comm.ranks import Ranks
from ...compressors import compressor
from ..common.env import environment
from ..common.store import as_table
from ..common.timing import Clock
from ..model.bucketing import DDP
from ..profiles.profiles import Profile
from ..workloads.load import describe, load_workload
from .compress import method_cases

KEY_COLUMNS = ("method", "options", "numel", "data", "world_size", "dtype", "device",
               "device_name")
NOISE = "randn"
EVICT_FACTOR = 4
EVICT_MIN_BYTES = 64 << 20
PHASES = ("encode", "middle", "decode")
HOOK_SIZE_STEPS = 6


def matrix_shape(numel: int) -> tuple[int, int]:
    """The bucket's one tensor: rows x cols = numel, rows the largest divisor of numel not
    above its square root (square for even powers of two)."""
    check_int(numel, "numel", 1)
    rows = math.isqrt(numel)
    while numel % rows:
        rows -= 1
    return rows, numel // rows


@dataclass(frozen=True)
class BucketGradient:
    """A bucket as training hands it to the hook: gradient `values` laid end to end, the
    `shapes` of the tensors they fill, and where they came from (`source`)."""

    values: torch.Tensor
    shapes: tuple[torch.Size, ...]
    source: str

    def prefix(self, numel: int) -> tuple[torch.Tensor, list[torch.Size]]:
        """The first `numel` values (1 <= numel <= all) and the shapes of the tensors they
        fill: those wholly inside, then what is left of the next one as a `matrix_shape`
        tensor (a bucket of `numel` values of this workload)."""
        check_int(numel, "numel", 1, self.values.numel())
        shapes, filled = [], 0
        for shape in self.shapes:
            if filled + shape.numel() > numel:
                break
            shapes.append(shape)
            filled += shape.numel()
        if filled < numel:
            shapes.append(torch.Size(matrix_shape(numel - filled)))
        return self.values[:numel], shapes


def gradient_source(model: str, batch_size: int | None, bucket_cap_mb: float) -> str:
    """The `data` of a bench of `model`'s gradients at `batch_size` (as `describe` resolves
    it: None only for a workload whose inputs hold no tensor) in buckets of
    `bucket_cap_mb`."""
    batch = "" if batch_size is None else f", batch {batch_size}"
    return f"{model} gradient{batch}, {bucket_cap_mb:g} MB buckets"


def workload_gradient(model: str, batch_size: int | None, bucket_cap_mb: float,
                      rank: int = 0) -> BucketGradient:
    """The gradients of `model`'s largest DDP bucket at `bucket_cap_mb` after one forward and
    backward pass of its freshly built model on rank `rank`'s first batch (float32, CPU);
    `batch_size` None: the workload's own."""
    workload, batch_size = describe(model, "model", batch_size)
    inputs, targets = workload.batch(rank, 0, "cpu")
    workload.loss(workload.model(inputs), targets).backward()
    params = _bucket_order(workload.model)
    bucket = [params[i] for i in _largest_bucket(params, bucket_cap_mb)]
    values = torch.cat([p.grad.detach().reshape(-1).float() if p.grad is not None
                        else torch.zeros(p.numel()) for p in bucket])
    return BucketGradient(values, tuple(p.shape for p in bucket),
                          gradient_source(model, batch_size, bucket_cap_mb))


def _bucket_order(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters whose gradients DDP communicates, in the order it buckets them."""
    return [p for p in module.parameters() if p.requires_grad][::-1]


def _largest_bucket(params, bucket_cap_mb: float) -> list[int]:
    """The indices into `params` (`_bucket_order`) of the largest bucket DDP forms at
    `bucket_cap_mb` (`model.bucketing.DDP`)."""
    grads = Profile("buckets", [p.numel() for p in params], [0.0] * len(params), 0.0, 0.0, 0.0,
                    params[0].element_size())
    buckets = DDP(bucket_cap_mb, first_bucket_mb=bucket_cap_mb).assign(grads)
    return list(max(buckets, key=lambda b: sum(grads.sizes[i] for i in b.params)).params)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def evict(nbytes: int, device) -> None:
    """Write a scratch buffer of `EVICT_FACTOR` x `nbytes` (at least `EVICT_MIN_BYTES`): the
    caches then hold what training would leave there. The buffer is this process's one per
    device (`_scratch`), not a fresh allocation per call, whose page faults cost more than
    the write (about 80 ms per 64 MiB on a CPU)."""
    _scratch(max(EVICT_MIN_BYTES, EVICT_FACTOR * nbytes) // 4, device).fill_(1.0)


_SCRATCH: dict[torch.device, torch.Tensor] = {}


def _scratch(numel: int, device) -> torch.Tensor:
    """The first `numel` float32 values of this process's scratch buffer on `device`, which
    grows to the largest `numel` asked for (and is kept for the next call)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    buffer = _SCRATCH.get(device)
    if buffer is None or buffer.numel() < numel:
        _SCRATCH.pop(device, None)  # freed before its successor is allocated
        buffer = _SCRATCH[device] = torch.empty(numel, dtype=torch.float32, device=device)
    return buffer[:numel]


def hook_communicator(name: str, options: dict, bucket: Bucket, world_size: int,
                      min_compression_rate: float = 1.0):
    """(compressor, communicator) the hook uses for `bucket` among `world_size` ranks: the
    method's own, or the uncompressed all-reduce where the method does not make the bucket
    `min_compression_rate` times smaller (as `HookState.communicator_for`, e.g. "none")."""
    comp = compressor(name, **options)
    comp.set_rank(0)
    ranks = Ranks(world_size=world_size)
    communicator = build(comp, ranks)
    if not communicator.pays(bucket, min_compression_rate):
        communicator = DenseAllReduce(ranks)
    return comp, communicator


def run_phases(comp, communicator, bucket: Bucket, world_size: int, timed) -> dict:
    """One bucket through the hook's phases, each called as ``timed(fn, *args)`` (which
    returns (seconds, fn's result)); {phase: seconds} (middle NaN but for two rounds). What
    the exchange would deliver is made outside the timed calls."""
    encode_s, sent = timed(communicator.start, bucket)
    middle_s = math.nan
    if isinstance(communicator, TwoRounds):
        plain, first = sent.wire
        middle_s, second = timed(comp.next_round, sent.context, first.clone())
        received = [plain.clone(), second.clone()]
    elif isinstance(communicator, AllGather):  # into the hook's own receive buffers
        received = communicator.receive_buffers(bucket.index, sent.wire[0].numel(),
                                                sent.wire[0].device)
        for buffer in received:
            buffer.copy_(sent.wire[0])
    else:
        received = [t.clone() for t in sent.wire]
    decode_s, _ = timed(communicator.end, sent, received)
    return {"encode": encode_s, "middle": middle_s, "decode": decode_s}


def measure_hook_path(name: str, options: dict, numel: int, world_size: int = 2,
                      device="cpu", dtype=torch.float32, repeats: int = 5, warmup: int = 1,
                      seed: int = 0, min_compression_rate: float = 1.0,
                      slowest_rank: bool = False,
                      gradient: BucketGradient | None = None) -> dict:
    """Median seconds of the hook's encode, middle (two-round methods) and decode of one
    bucket of `numel` values among `world_size` ranks, through `hook_communicator`
    (`min_compression_rate`: the hook's option; `slowest_rank`: see the module docstring).
    The bucket: `gradient.prefix(numel)`, or N(0, 1) noise (`seed`) in one `matrix_shape`
    tensor."""
    check_int(numel, "numel", 1)
    check_int(world_size, "world_size", 1)
    check_int(repeats, "repeats", 1)
    check_int(warmup, "warmup", 0)
    device = check_device(device)
    if gradient is None:
        shapes = [torch.Size(matrix_shape(numel))]
        gen = torch.Generator(device=device).manual_seed(seed)
        grad = torch.randn(numel, generator=gen, device=device, dtype=torch.float32).to(dtype)
    else:
        values, shapes = gradient.prefix(numel)
        grad = values.to(device=device, dtype=dtype)
    buffer = torch.empty_like(grad)
    bucket = Bucket(buffer, 0, lambda: shapes)
    comp, communicator = hook_communicator(name, options, bucket, world_size,
                                           min_compression_rate)
    nbytes = numel * grad.element_size()
    clock = Clock(device)

    def timed(fn, *args):
        evict(nbytes, device)
        clock.sync()
        if slowest_rank:
            dist.barrier()
        start = clock.mark()
        out = fn(*args)
        end = clock.mark()
        clock.sync()
        return clock.seconds(start, end), out

    times = {phase: [] for phase in PHASES}
    for i in range(warmup + repeats):
        buffer.copy_(grad)
        seconds = run_phases(comp, communicator, bucket, world_size, timed)
        if slowest_rank:
            seconds = _slowest(seconds)
        if i >= warmup:
            for phase in PHASES:
                times[phase].append(seconds[phase])
    aggregation = ("powersgd" if isinstance(communicator, TwoRounds) else "allreduce"
                   if isinstance(communicator, DenseAllReduce) else comp.aggregation)
    row = {"method": name, "options": json.dumps(comp.options(), sort_keys=True),
           "aggregation": aggregation, "communicator": type(communicator).__name__,
           "numel": numel, "data": NOISE if gradient is None else gradient.source,
           "tensors": len(shapes), "world_size": world_size,
           "dtype": dtype_name(dtype), "device": str(device)}
    for phase, values in times.items():
        series = pd.Series(values, dtype=float)
        row[f"{phase}_s"] = float(series.median())
        row[f"{phase}_spread_s"] = float(series.max() - series.min())
    row["repeats"] = repeats
    row["slowest_rank"] = slowest_rank
    return row


def _slowest(seconds: dict) -> dict:
    """Every phase's time on the slowest rank (NaN stays NaN)."""
    times = torch.tensor([seconds[p] for p in PHASES], dtype=torch.float64).nan_to_num(-1.0)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return {p: math.nan if t < 0 else float(t) for p, t in zip(PHASES, times.tolist())}


def bench_hook_path(methods=None, sizes=None, world_size: int = 2, device="cpu",
                    dtype=torch.float32, repeats: int = 5, warmup: int = 1, out=None,
                    progress: bool = False, slowest_rank: bool = False,
                    gradient: BucketGradient | None = None) -> pd.DataFrame:
    """`measure_hook_path` of every (method, options) of `methods` (see
    `compress.method_cases`) at every size of `sizes` (elements; with a `gradient`, its
    prefixes); rows already in `out` (a path or ResultTable) are skipped. Returns this
    sweep's rows (measured now or before). `slowest_rank`: call it on every rank of the
    default process group, `out` on rank 0 only (which says what to skip; every rank
    measures the rest together)."""
    sizes = list(sizes) if sizes is not None else [2**k for k in range(12, 23, 2)]
    if not sizes or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes):
        raise ValueError(f"sizes={sizes!r} is not allowed: give positive integers (elements)")
    if gradient is not None and max(sizes) > gradient.values.numel():
        raise ValueError(f"sizes={sizes!r} is not allowed: the gradient holds "
                         f"{gradient.values.numel()} values")
    device = check_device(device)
    table = as_table(out, KEY_COLUMNS)
    env = environment(world_size=world_size, device=device)  # the ranks priced
    data = NOISE if gradient is None else gradient.source
    cases = [(name, options, numel, key)
             for name, options in method_cases(methods)
             for numel, key in zip(sizes, case_keys(name, options, sizes, world_size, device,
                                                    dtype, env["device_name"], data))]
    measure = partial(measure_hook_path, world_size=world_size, device=device, dtype=dtype,
                      repeats=repeats, warmup=warmup, slowest_rank=slowest_rank,
                      gradient=gradient)
    return measure_cases(cases, table, measure, env, slowest_rank, "hook-path bench",
                         progress)


def measure_cases(cases, table, measure, env: dict, slowest_rank: bool, desc: str = "",
                  progress: bool = False) -> pd.DataFrame:
    """`measure(name, options, numel)` of each (name, options, numel, key) of `cases` not
    yet in `table` (a ResultTable or None), each row (with `env`) appended as measured;
    with `slowest_rank` every rank calls this, and rank 0's table says what to skip. The
    rows of every case (measured now or before; this sweep's when `table` is None)."""
    done = table.done_keys() if table else set()
    skip = [table is not None and table.key(c[3]) in done for c in cases]
    if slowest_rank:
        shared = [skip]
        dist.broadcast_object_list(shared, src=0)
        skip = shared[0]
    rows = []
    for (name, options, numel, _), skipped in tqdm(list(zip(cases, skip)), desc=desc,
                                                   file=sys.stderr, disable=not progress):
        if skipped:
            continue
        row = {**measure(name, options, numel), **env}
        if table is not None:
            table.append(row)
        rows.append(row)
    if table is None:
        return pd.DataFrame(rows)
    return table.frame(keys={table.key(c[3]) for c in cases})


def case_keys(name: str, options: dict, sizes, world_size: int, device, dtype,
              device_name: str, data: str = NOISE) -> list[dict]:
    """The key columns of the measurements of (name, options) at each of `sizes` of `data`
    ("randn" or a `BucketGradient.source`)."""
    built = json.dumps(compressor(name, **options).options(), sort_keys=True)
    return [{"method": name, "options": built, "numel": numel, "data": data,
             "world_size": world_size,
             "dtype": dtype_name(dtype), "device": str(torch.device(device)),
             "device_name": device_name} for numel in sizes]


def hook_sizes(model: str, batch_size: int | None, bucket_cap_mb: float) -> list[int]:
    """The bucket sizes (elements) the hook-path bench prices `model` at: its largest DDP
    bucket (`model.bucketing.DDP` at `bucket_cap_mb`, the gradients in reverse parameter
    order) and that size / 4, / 16, ... (`HOOK_SIZE_STEPS` sizes; those under 256 elements
    left out, but for the largest two).
    Not powers of two: those are the best case of several codecs (random-k's permutation
    walks once per position at 4^m elements and up to 4 times just above; int8 pads to its
    blocks), and dividing by 4 keeps where a size falls between two powers of 4."""
    params = _bucket_order(load_workload(model, "model", batch_size=batch_size).model)
    return quarter_sizes(sum(params[i].numel() for i in _largest_bucket(params, bucket_cap_mb)))


def quarter_sizes(largest: int) -> list[int]:
    """`largest` and largest / 4, / 16, ... (`hook_sizes`), ascending."""
    sizes = [max(1, largest // 4**j) for j in range(HOOK_SIZE_STEPS)]
    return sorted({n for j, n in enumerate(sizes) if n >= 256 or j < 2})


def hook_methods(methods) -> list[tuple[str, dict]]:
    """The (method, options) whose hook path prices training runs of `methods` (names or
    (name, options) pairs): "ddp" (DDP's own all-reduce, which divides its buckets by the
    world size as the hook's uncompressed path does) by "none", a DiLoCo variant by its
    outer method (its exchange is one bucket of it, `diloco.outer_case`); "auto" is left out
    (it is not predicted from the hook path)."""
    cases = []
    for name, options in method_cases(list(methods)):
        case = (("none", {}) if name == "ddp" else diloco.outer_case(options)
                if name == diloco.NAME else (name, options))
        if name != "auto" and case not in cases:
            cases.append(case)
    return cases


def hook_path_pending(out, methods, sizes, world_size: int, device="cpu",
                      data: str = NOISE) -> bool:
    """Whether the table `out` lacks a row `bench_hook_path(methods, sizes, world_size,
    device)` of `data` would measure."""
    table = as_table(out, KEY_COLUMNS)
    device_name = environment(world_size=world_size, device=device)["device_name"]
    done = table.done_keys()
    return any(table.key(key) not in done for name, options in method_cases(methods)
               for key in case_keys(name, options, sizes, world_size, device, torch.float32,
                                    device_name, data))
