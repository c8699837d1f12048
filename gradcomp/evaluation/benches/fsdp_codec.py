"""The FSDP codec benchmark: what gradcomp's compressed reduce-scatter (`gradcomp.fsdp.alltoall`)
computes for one FSDP unit's flat gradient, phase by phase, on this device, without the network:

* encode: each of the `world_size` chunks compressed (the method as `gradcomp.fsdp.register`
  builds it, error feedback included) and the payloads laid end to end for the all-to-all;
* decode: the `world_size` payloads an owner receives (this rank's own, as the exchange would
  deliver them) decoded and summed in float32.

Memory as in training (`hookpath`): each timed phase starts after a scratch buffer evicted
the caches. With `slowest_rank` (every rank of the process group runs the sweep at once, as
the workers compute side by side in training) each phase starts after a barrier and its time
is the slowest rank's.

Columns: method, options, numel (the flat gradient, a multiple of `world_size`), data
("randn": the gradient is N(0, 1) noise), world_size, dtype, device, encode_s, decode_s
(all `world_size` payloads), their spreads, repeats, slowest_rank, and the environment
columns. `fit.fsdp_codec_costs` fits the model's costs.
"""
from __future__ import annotations

import json
from functools import partial

import pandas as pd
import torch
import torch.distributed as dist

from ...checks import check_int
from ...compressors import compressor
from ...fsdp import alltoall
from ..common.env import environment
from ..common.store import as_table
from ..common.timing import Clock
from .compress import method_cases
from .hookpath import KEY_COLUMNS, NOISE, case_keys, dtype_name, evict, measure_cases

PHASES = ("encode", "decode")


def measure_fsdp_codec(name: str, options: dict, numel: int, world_size: int,
                       repeats: int = 5, warmup: int = 1, seed: int = 0,
                       slowest_rank: bool = False) -> dict:
    """Median seconds of the encode and decode (module docstring) of a float32 flat gradient
    of `numel` values among `world_size` ranks, on the CPU."""
    check_int(world_size, "world_size", 1)
    check_int(numel, "numel", world_size)
    if numel % world_size:
        raise ValueError(f"numel={numel} is not allowed: FSDP pads the flat gradient to a "
                         f"multiple of the {world_size} ranks")
    comp = compressor(name, **options)
    comp.set_rank(0)
    flat = torch.randn(numel, generator=torch.Generator().manual_seed(seed))
    clock = Clock(torch.device("cpu"))

    def timed(fn, *args):
        evict(numel * 4, flat.device)
        if slowest_rank:
            dist.barrier()
        start = clock.mark()
        out = fn(*args)
        return clock.seconds(start, clock.mark()), out

    times = {phase: [] for phase in PHASES}
    for i in range(warmup + repeats):
        encode_s, (payloads, send) = timed(alltoall.encode_chunks, comp, flat, world_size, 0)
        decode_s, _ = timed(alltoall.decode_sum, comp, send.clone(), payloads[0], world_size)
        seconds = torch.tensor([encode_s, decode_s], dtype=torch.float64)
        if slowest_rank:
            dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        if i >= warmup:
            for phase, t in zip(PHASES, seconds.tolist()):
                times[phase].append(t)
    row = {"method": name, "options": json.dumps(comp.options(), sort_keys=True),
           "numel": numel, "data": NOISE, "world_size": world_size,
           "dtype": dtype_name(torch.float32),
           "device": "cpu"}
    for phase, values in times.items():
        series = pd.Series(values, dtype=float)
        row[f"{phase}_s"] = float(series.median())
        row[f"{phase}_spread_s"] = float(series.max() - series.min())
    return {**row, "repeats": repeats, "slowest_rank": slowest_rank}


def bench_fsdp_codec(methods, sizes, world_size: int, repeats: int = 5, warmup: int = 1,
                     out=None, slowest_rank: bool = False) -> pd.DataFrame:
    """`measure_fsdp_codec` of every (method, options) of `methods` (names or pairs) at every
    size of `sizes` (elements); rows already in `out` (a path or ResultTable) are skipped.
    `slowest_rank`: call it on every rank of the default process group, `out` on rank 0 only
    (which says what to skip). Returns this sweep's rows (measured now or before)."""
    table = as_table(out, KEY_COLUMNS)
    env = environment(world_size=world_size)
    cases = [(name, options, numel, key) for name, options in method_cases(methods)
             for numel, key in zip(sizes, case_keys(name, options, sizes, world_size, "cpu",
                                                    torch.float32, env["device_name"]))]
    measure = partial(measure_fsdp_codec, world_size=world_size, repeats=repeats,
                      warmup=warmup, slowest_rank=slowest_rank)
    return measure_cases(cases, table, measure, env, slowest_rank)
