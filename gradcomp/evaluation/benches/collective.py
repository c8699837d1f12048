"""The collective benchmark: all-reduce, all-gather and broadcast time against message size
across local worker processes (gloo on CPU; NCCL with one GPU per process), and the fitted
latency alpha and bandwidth of each collective (`fit.fit_collectives`).

Per collective and size: `warmup` untimed calls, then `repeats` timed calls, each after a
barrier with the device synchronised; a call's time is the slowest rank's, and the row holds
the median over the repeats and their spread (max - min). Reported as nccl-tests does, and
with the payload the performance model uses:

* nbytes: one worker's payload S (the input of every collective; what `fit_collectives` and
  `network` take);
* size_bytes: nccl-tests' size: the output buffer (p * S) for all-gather, S otherwise;
* time_s (median), time_spread_s (max - min), time_mean_s, time_min_s; algbw_GBps = size_bytes / time_s / 1e9;
* busbw_GBps = algbw_GBps * factor: 2(p-1)/p for all-reduce, (p-1)/p for all-gather,
  reduce-scatter and all-to-all, 1 for broadcast (from rank 0);
* collectives ``reducescatter`` (`reduce_scatter_tensor` of S bytes, S/p kept) and
  ``alltoall`` (`all_to_all_single` of S bytes, S/p to each rank), FSDP's (not by default;
  the sizes rounded down to multiples of 4p bytes);
* collective ``forest`` (not by default): the forest all-reduce (`collectives.forest`) of a forest
  packed for equal links between all workers (local workers have no slower pairs), with
  `matches_allreduce`: whether it gave dist.all_reduce's result on integer-valued data; its
  time against ``allreduce`` is the executor's overhead, not a topology's speedup;
* after_compute_s: with it > 0 every rank computes that long (untimed) after the barrier and
  before each call, as training computes before it calls a collective: on this 2-core VM a
  collective right after compute took ~4 ms where back-to-back calls took 0.15-0.8 ms (its
  threads and the peer's are scheduled anew), which the alpha of a training model must hold;
* bandwidth_bps: the line rate the rows were measured at, as given (a testbed's shaped rate,
  a NIC's; NaN when not given, e.g. loopback), for `analyses.cluster_fit.fit_tiers`'s
  efficiency = busbw / line rate;
* collective, count (float32 elements per worker), dtype, repeats, warmup, device and the
  environment columns (world_size, backend, ...).

The block-sparse all-reduce's density sweep (`gradcomp bench collective --blocksparse`) is in
`benches.blocksparse`.

Spawned: `bench_collective(world_size=2)`. Under torchrun (``torchrun ... -m gradcomp.cli bench
collective ...``, or ``-m gradcomp.evaluation.benches.collective --out coll.csv``) every rank
joins torchrun's group and rank 0 writes the table.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from functools import partial

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
from tqdm import tqdm

from ...checks import check_int
from ...collectives import forest_all_reduce, pack_forest
from ..common.env import (check_backend, environment, init_from_env, launch, local_device,
                          under_torchrun, workers)
from ..common.store import ResultTable, as_table
from ..common.timing import compute_for, slowest_rank_times
from ..common.units import parse_rate
from ..model.fit import fit_collectives, summary
from ..model.network import COLLECTIVES

KEY_COLUMNS = ("collective", "nbytes", "world_size", "backend", "device_name")
BUS_FACTOR = {"allreduce": lambda p: 2 * (p - 1) / p, "allgather": lambda p: (p - 1) / p,
              "broadcast": lambda p: 1.0, "forest": lambda p: 2 * (p - 1) / p,
              "reducescatter": lambda p: (p - 1) / p, "alltoall": lambda p: (p - 1) / p}
MEASURED = COLLECTIVES + ("forest",)
DEFAULT_COLLECTIVES = ("allreduce", "allgather", "broadcast")


#: Compute before each call where a sweep stands for training's collectives (`gradcomp run`,
#: `validate`): right after compute a collective here costs ~4 ms more than back to back.
AFTER_COMPUTE_MS = 20.0


def default_sizes() -> list[int]:
    """Per-worker payloads of 4 B, 64 B, 1 KiB, ... 64 MiB (powers of 16)."""
    return [2**k for k in range(2, 27, 4)]


def quick_sizes() -> list[int]:
    """Per-worker payloads of 4 B, 64 B, ... 4 MiB."""
    return [2**k for k in range(2, 23, 4)]


def _gather(out: torch.Tensor, x: torch.Tensor, group=None) -> None:
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, x, group=group)


def _reduce_scatter(out: torch.Tensor, x: torch.Tensor, group=None) -> None:
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    scatter(out, x, group=group)


def collective_op(collective: str, nbytes: int, device: torch.device, group=None):
    """A call of `collective` (of `COLLECTIVES`) on a fresh payload of `nbytes` per rank in
    `group` (None: every rank; broadcast from its first rank)."""
    p = dist.get_world_size(group)
    count = nbytes // 4
    x = torch.zeros(count, device=device)
    if collective == "allgather":
        return partial(_gather, torch.empty(count * p, device=device), x, group)
    if collective == "reducescatter":
        return partial(_reduce_scatter, torch.empty(count // p, device=device), x, group)
    if collective == "alltoall":
        return partial(dist.all_to_all_single, torch.empty_like(x), x, group=group)
    if collective == "broadcast":
        src = 0 if group is None else dist.get_global_rank(group, 0)
        return partial(dist.broadcast, x, src, group=group)
    return partial(dist.all_reduce, x, group=group)


def measure_collective(collective: str, nbytes: int, repeats: int, warmup: int,
                       device: torch.device, after_compute_s: float = 0.0) -> dict:
    """One row (without environment columns); call on every rank of the process group."""
    p, count = dist.get_world_size(), nbytes // 4
    extra = {}
    if collective == "forest":
        forest = pack_forest(np.ones((p, p)))
        op = partial(forest_all_reduce, torch.zeros(count, device=device), forest)
        extra["matches_allreduce"] = _forest_matches(forest, count, device)
    else:
        op = collective_op(collective, nbytes, device)
    lead_in = partial(compute_for, after_compute_s, device) if after_compute_s > 0 else None
    times, _ = slowest_rank_times(op, device, repeats, warmup, lead_in=lead_in)
    time_s, spread = times.median().item(), (times.max() - times.min()).item()
    size = nbytes * p if collective == "allgather" else nbytes
    algbw = size / time_s / 1e9
    return {"collective": collective, "nbytes": nbytes, "size_bytes": size, "count": count,
            "dtype": "float32", "time_s": time_s,
            "time_spread_s": spread, "time_mean_s": times.mean().item(),
            "time_min_s": times.min().item(), "algbw_GBps": algbw,
            "busbw_GBps": algbw * BUS_FACTOR[collective](p), "repeats": repeats,
            "warmup": warmup, "after_compute_s": after_compute_s, "device": device.type,
            **extra}


def _forest_matches(forest, count: int, device) -> bool:
    """Whether the forest all-reduce of random integers equals dist.all_reduce on every rank."""
    gen = torch.Generator().manual_seed(dist.get_rank())
    x = torch.randint(-1000, 1000, (count,), generator=gen).float().to(device)
    expected = x.clone()
    dist.all_reduce(expected)
    same = torch.tensor(float(torch.equal(forest_all_reduce(x, forest), expected)),
                        device=device)
    dist.all_reduce(same, op=dist.ReduceOp.MIN)
    return bool(same.item())


def run_cases(cases, repeats: int, warmup: int, table: ResultTable, backend: str,
              progress: bool = False, after_compute_s: float = 0.0,
              bandwidth_bps: float = math.nan) -> None:
    """Measure (collective, nbytes) `cases` on every rank; rank 0 appends the rows, with the
    line rate `bandwidth_bps` (bits/s; NaN: not known)."""
    device = local_device(backend)
    rank = dist.get_rank()
    for collective, nbytes in tqdm(cases, desc="collective bench", file=sys.stderr,
                                   disable=not progress or rank != 0):
        row = measure_collective(collective, nbytes, repeats, warmup, device, after_compute_s)
        if rank == 0:
            table.append({**row, "bandwidth_bps": bandwidth_bps,
                          **environment(backend, dist.get_world_size(), device)})


def _cases(collectives, sizes, world_size: int = 1) -> list[tuple[str, int]]:
    """(collective, bytes) to measure; reduce-scatter and all-to-all split a payload in
    `world_size` equal parts, so they take `sizes` rounded down to multiples of 4 `world_size`
    bytes (those smaller left out)."""
    for c in collectives:
        if c not in MEASURED:
            raise ValueError(f"collective {c!r} is not allowed: choose among "
                             f"{', '.join(map(repr, MEASURED))}")
    if not sizes or any(isinstance(n, bool) or not isinstance(n, int) or n < 4 or n % 4
                        for n in sizes):
        raise ValueError(f"sizes={sizes!r} is not allowed: give payload bytes per worker, "
                         "multiples of 4 (float32 elements)")
    unit = 4 * world_size
    split = list(dict.fromkeys(n - n % unit for n in sizes if n >= unit))
    return [(c, n) for c in collectives
            for n in (split if c in ("reducescatter", "alltoall") else sizes)]


def collective_key(table, collective, nbytes, world_size, backend, device_name):
    """The key in `table` of one measurement."""
    return table.key({"collective": collective, "nbytes": nbytes, "world_size": world_size,
                      "backend": backend, "device_name": device_name})


def bench_collective(world_size: int | None = None, backend: str | None = None, sizes=None,
                     repeats: int = 10, warmup: int = 3, collectives=DEFAULT_COLLECTIVES, out=None,
                     progress: bool = False, after_compute_s: float = 0.0,
                     bandwidth_bps=None) -> pd.DataFrame:
    """Measure `collectives` at every per-worker payload of `sizes` (bytes; default
    `default_sizes()`) across `world_size` local processes (None: 2) that it spawns, or under
    torchrun on its processes (`backend`: NCCL when each process can have a GPU, else gloo).
    Rows already in `out` (a path or ResultTable) are skipped; `after_compute_s`: compute
    before each call (module docstring); `bandwidth_bps`: the line rate to record (e.g.
    "1gbit"; None: not known). Returns the rows of this sweep (measured now or before)."""
    world_size = workers(world_size)
    backend = check_backend(backend, world_size)
    check_int(repeats, "repeats", 1)
    check_int(warmup, "warmup", 0)
    rate = math.nan if bandwidth_bps is None else parse_rate(bandwidth_bps, "bandwidth_bps")
    cases = _cases(collectives, default_sizes() if sizes is None else list(sizes), world_size)
    with tempfile.TemporaryDirectory() as tmp:
        table = as_table(out, KEY_COLUMNS) or ResultTable(os.path.join(tmp, "rows.csv"),
                                                          KEY_COLUMNS)
        device_name = environment(device="cuda:0" if backend == "nccl" else "cpu")["device_name"]
        keys = {collective_key(table, c, n, world_size, backend, device_name): (c, n)
                for c, n in cases}
        done = table.done_keys()
        todo = [case for key, case in keys.items() if key not in done]
        if todo or under_torchrun():
            launch(run_cases, world_size, backend, todo, repeats, warmup, table, backend,
                   progress, after_compute_s, rate)
        return table.frame(keys=set(keys))


def collective_fit(table: pd.DataFrame) -> pd.DataFrame:
    """Per collective: alpha_s, beta_s_per_byte, bandwidth_bps (bits/s), r2, n, rmse of the
    alpha-beta fit (`fit.fit_collectives`) to a collective-bench table (forest rows left out)."""
    return summary(fit_collectives(table[table["collective"].isin(COLLECTIVES)]))


def main(argv=None) -> int:
    """Under torchrun: every rank measures, rank 0 appends to --out and prints the fit."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--out", required=True, help="result table (.csv or .parquet)")
    args.add_argument("--backend", choices=("gloo", "nccl"), default=None)
    args.add_argument("--quick", action="store_true", help="sizes up to 4 MiB")
    args.add_argument("--repeats", type=int, default=10)
    args.add_argument("--warmup", type=int, default=3)
    args.add_argument("--sizes", default=None,
                      help="comma-separated payload bytes per worker (default: the sweep)")
    args.add_argument("--collectives", default=",".join(DEFAULT_COLLECTIVES),
                      help=f"comma-separated, of {', '.join(MEASURED)}")
    args.add_argument("--after-compute-ms", type=float, default=0.0,
                      help="compute this long on every rank before each call (as training)")
    args.add_argument("--bandwidth", default=None, help="line rate to record, e.g. 1gbit")
    a = args.parse_args(argv)
    if not a.after_compute_ms >= 0:
        args.error(f"--after-compute-ms={a.after_compute_ms!r} is not allowed: give ms >= 0")
    backend = init_from_env(a.backend)
    try:
        table = ResultTable(a.out, KEY_COLUMNS)
        sizes = [int(n) for n in a.sizes.split(",")] if a.sizes else \
            quick_sizes() if a.quick else default_sizes()
        cases = _cases(a.collectives.split(","), sizes, dist.get_world_size())
        device_name = environment(device=local_device(backend))["device_name"]
        p = dist.get_world_size()
        keys = {collective_key(table, c, n, p, backend, device_name): (c, n) for c, n in cases}
        todo = [None]
        if dist.get_rank() == 0:
            done = table.done_keys()
            todo = [[case for key, case in keys.items() if key not in done]]
        dist.broadcast_object_list(todo, src=0)
        run_cases(todo[0], a.repeats, a.warmup, table, backend, progress=True,
                  after_compute_s=a.after_compute_ms / 1e3,
                  bandwidth_bps=math.nan if a.bandwidth is None else parse_rate(a.bandwidth))
        if dist.get_rank() == 0 and len(set(sizes)) > 1:  # a fit needs two sizes
            print(collective_fit(table.frame(keys=set(keys))).to_string(index=False))
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
