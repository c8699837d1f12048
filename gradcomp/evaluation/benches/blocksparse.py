"""The density sweep of the block-sparse all-reduce (`gradcomp bench collective --blocksparse`):
measured time against the fraction of non-zero blocks, beside the dense all-reduce and the
cost model's prediction.

Every rank holds `numel` float32 values whose blocks are non-zero independently with
probability `density` (a pattern of its own, so about 1 - (1-d)^p of the blocks are non-zero
on some rank). Per density: `warmup` untimed and `repeats` timed calls of
`block_sparse_all_reduce(mode="sparse")`, each on a fresh copy of the input after a barrier;
a call's time is the slowest rank's; the row holds the median and the spread (max - min). The
dense all-reduce (`dist.all_reduce`) of the same tensor is timed the same way (mode "dense",
density 1).

The prediction (`predicted_s`) is the cost model of `gradcomp.collectives.blocksparse` for the
traffic `model.blocksparse` expects at the asked density and the independent union
1 - (1-d)^p, with latency and bandwidth calibrated in the same processes on the data moves of
the sparse rounds: alpha from an all-to-all of 4 bytes per peer, ``(p-1) alpha``; bandwidth
from an all-to-all of S/p bytes per peer, ``(p-1) alpha + (p-1) (S/p) / B``. Dense rows are
predicted by the ring formula with the same alpha and B. Local work is added to the sparse
prediction: `model.blocksparse.local_bytes` priced at the memory rate of this process,
calibrated as the tensor's size over the time of one read pass (`amax` over its blocks); the
dense all-reduce's own reductions are not modelled.

Rows: mode, density, block_density and union_density (measured: mean over ranks of the
non-zero block fraction, and the union's), numel, nbytes, block_size, bytes_sent (rank 0, one
call), time_s, time_spread_s, predicted_s, latency_s, bandwidth_bps, memory_bytes_per_s,
repeats, warmup and the environment columns.
"""
from __future__ import annotations

import os
import sys
import tempfile

import pandas as pd
import torch
import torch.distributed as dist
from tqdm import tqdm

from ...checks import check_int
from ...collectives import block_sparse_all_reduce, blocksparse
from ..common.env import check_backend, environment, local_device, spawn
from ..common.store import ResultTable, as_table
from ..common.timing import slowest_rank_seconds
from ..model.blocksparse import expected_traffic, local_bytes, union_density

KEY_COLUMNS = ("mode", "density", "numel", "block_size", "world_size", "backend",
               "device_name")


def default_densities() -> list[float]:
    return [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]


def quick_densities() -> list[float]:
    return [0.001, 0.01, 0.1, 1.0]


def block_sparse_input(numel: int, block_size: int, density: float,
                       generator: torch.Generator) -> torch.Tensor:
    """Normal values in blocks that are non-zero with probability `density`."""
    blocks = -(-numel // block_size)
    keep = torch.rand(blocks, generator=generator) < density
    return torch.randn(numel, generator=generator) * keep.repeat_interleave(block_size)[:numel]


def calibrate(nbytes: int, repeats: int, device) -> tuple[float, float, float]:
    """(alpha seconds, B bytes/s, memory bytes/s) from all-to-alls of 4 and `nbytes` / p
    bytes per peer, and a read pass over `nbytes`."""
    p = dist.get_world_size()

    def all_to_all_time(count):
        x = torch.zeros(count * p, device=device)
        out = torch.empty(count * p, device=device)
        return slowest_rank_seconds(lambda: dist.all_to_all_single(out, x), device, repeats, 1)[0]

    alpha = all_to_all_time(1) / (p - 1)
    big = max(1, nbytes // 4 // p)
    rest = all_to_all_time(big) - (p - 1) * alpha
    rows = torch.zeros(max(1, nbytes // 1024), 256, device=device)
    scan = slowest_rank_seconds(lambda: rows.amax(1), device, repeats, 1)[0]
    return alpha, (p - 1) * big * 4 / max(rest, 1e-9), rows.numel() * 4 / scan


def run_sweep(cases, numel: int, block_size: int, repeats: int, warmup: int,
              table: ResultTable, backend: str, progress: bool = False) -> None:
    """Measure (mode, density) `cases` on every rank; rank 0 appends the rows."""
    device = local_device(backend)
    rank, p = dist.get_rank(), dist.get_world_size()
    nbytes = numel * 4
    alpha, bw, memory = calibrate(nbytes, repeats, device)
    work = torch.empty(numel, device=device)
    for mode, density in tqdm(cases, desc="block-sparse sweep", file=sys.stderr,
                              disable=not progress or rank != 0):
        gen = torch.Generator().manual_seed(1000 * rank + round(density * 1e6))
        source = block_sparse_input(numel, block_size, density, gen).to(device)
        if mode == "dense":
            def call():
                dist.all_reduce(work)
        else:
            def call():
                return block_sparse_all_reduce(work, block_size, mode="sparse")
        time_s, spread, ex = slowest_rank_seconds(call, device, repeats, warmup,
                                                   reset=lambda: work.copy_(source))
        blocks = -(-numel // block_size)
        flags = torch.zeros(blocks * block_size, dtype=torch.bool, device=device)
        flags[:numel] = source != 0
        own = flags.view(blocks, block_size).any(1).sum().to(torch.float64)
        dist.all_reduce(own)
        union = union_density(density, p)
        if mode == "dense":
            predicted = blocksparse.dense_seconds(p, nbytes, alpha, bw)
        else:
            traffic = expected_traffic(p, numel, 4, block_size, density, union)
            predicted = blocksparse.sparse_seconds(p, traffic, alpha, bw) + \
                local_bytes(p, numel, 4, density, union) / memory
        if rank == 0:
            table.append({"mode": mode, "density": density,
                          "block_density": own.item() / p / blocks,
                          "union_density": ex.union_blocks / blocks if ex else float("nan"),
                          "numel": numel, "nbytes": nbytes, "block_size": block_size,
                          "bytes_sent": ex.bytes_sent if ex else nbytes, "time_s": time_s,
                          "time_spread_s": spread, "predicted_s": predicted,
                          "latency_s": alpha, "bandwidth_bps": bw * 8,
                          "memory_bytes_per_s": memory, "repeats": repeats,
                          "warmup": warmup, "device": device.type,
                          **environment(backend, p, device)})


def _fractions(values) -> list[float]:
    """Densities as floats (numbers or their text, as the command line gives them)."""
    values = list(values)
    try:
        out = [float(v) for v in values if not isinstance(v, bool)]
    except (TypeError, ValueError):
        out = []
    if not out or len(out) != len(values) or not all(0 < d <= 1 for d in out):
        raise ValueError(f"densities={values!r} is not allowed: give fractions in (0, 1]")
    return out


def bench_block_sparse(world_size: int = 2, backend: str | None = None,
                       numel: int = 1 << 24, densities=None,
                       block_size: int = blocksparse.DEFAULT_BLOCK_SIZE,
                       repeats: int = 5, warmup: int = 1, out=None,
                       progress: bool = False) -> pd.DataFrame:
    """Sweep the block-sparse all-reduce over `densities` (fractions of non-zero blocks, as
    numbers or text; default `default_densities()`) and time the dense all-reduce, across
    `world_size` local processes that it spawns. Rows already in `out` (a path or
    ResultTable) are skipped (`report.plots.block_sparse_sweep` draws them). Returns the rows
    of this sweep."""
    backend = check_backend(backend, world_size)
    if world_size < 2:
        raise ValueError(f"world_size={world_size!r} is not allowed: the sweep needs >= 2 "
                         "workers")
    check_int(numel, "numel", 1)
    check_int(block_size, "block_size", 1)
    check_int(repeats, "repeats", 1)
    check_int(warmup, "warmup", 0)
    densities = default_densities() if densities is None else _fractions(densities)
    cases = [("sparse", d) for d in densities] + [("dense", 1.0)]
    with tempfile.TemporaryDirectory() as tmp:
        table = as_table(out, KEY_COLUMNS) or ResultTable(os.path.join(tmp, "rows.csv"),
                                                          KEY_COLUMNS)
        device_name = environment(device="cuda:0" if backend == "nccl" else "cpu")["device_name"]
        keys = {table.key({"mode": m, "density": d, "numel": numel, "block_size": block_size,
                           "world_size": world_size, "backend": backend,
                           "device_name": device_name}): (m, d) for m, d in cases}
        done = table.done_keys()
        todo = [case for key, case in keys.items() if key not in done]
        if todo:
            spawn(run_sweep, world_size, backend, todo, numel, block_size, repeats, warmup,
                  table, backend, progress)
        return table.frame(keys=set(keys))
