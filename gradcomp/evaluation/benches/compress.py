"""The compress benchmark: encode / decode time, bytes on the wire and error of every method
over a range of gradient sizes, one tidy row per (method, options, size), appended to a
`ResultTable` as measured so that an interrupted sweep resumes where it stopped.

Measured to survive load on a shared machine (`measure_cases`): a block of methods at once,
their sizes and repeats interleaved round-robin, so that a burst of load disturbs one sample
of many points rather than every sample of one; then a point far off the line through its
method's other points (a burst that outlasted the interleaving) is measured again, a bounded
number of times.

Columns: those of `measure_codec` (method, options, aggregation, numel, dtype,
bytes_original, bytes_sent, ratio, rel_error, encode_s, decode_s, encode_spread_s,
decode_spread_s, repeats, attempts, threads, device) and the environment columns of
`env.environment`.
"""
from __future__ import annotations

import contextlib
import json
import statistics
import sys
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from ...checks import check_device, check_int
from ...compressors import Compressor, compressor, names
from ..common.env import environment
from ..common.store import as_table
from ..common.timing import Clock, timed
from ..model.fit import OUTLIER, robust_line

RESNET50_NUMEL = 25_600_000  # `gradcomp compressors`: a ResNet-50-sized gradient
KEY_COLUMNS = ("method", "options", "numel", "dtype", "device", "device_name")
BLOCK = 4  # methods measured together, their sizes and repeats interleaved
REMEASURE = 2  # times a point far off its method's line is measured again, at most


def default_methods() -> list[tuple[str, dict]]:
    """Every registered method with its default options."""
    return [(name, {}) for name in names()]


@dataclass
class _Point:
    """One (method, options, size) being measured: its compressor, gradient and the
    (encode, decode) seconds of each attempt's timed calls."""

    name: str
    comp: Compressor
    grad: torch.Tensor
    attempts: list = field(default_factory=list)

    @property
    def method(self) -> tuple[str, str]:
        """(name, options as stored): the line this point belongs to."""
        return self.name, json.dumps(self.comp.options(), sort_keys=True)

    def best(self, phase: int) -> list[float]:
        """The timed calls of the attempt of the smallest median in `phase` (0: encode, 1:
        decode): load only adds time, so that is the least disturbed attempt."""
        return min(([t[phase] for t in a] for a in self.attempts), key=statistics.median)


def _rounds(points: list[_Point], clock: Clock, repeats: int, warmup: int) -> None:
    """`warmup` untimed then `repeats` timed rounds, each one encode and one decode of every
    point in turn; the timed calls become each point's next attempt."""
    for point in points:
        point.attempts.append([])
    for i in range(warmup + repeats):
        for point in points:
            encode_s, payload = timed(lambda: point.comp.compress(point.grad, key="bench"),
                                      clock)
            decode_s, _ = timed(lambda: point.comp.decompress(payload), clock)
            if i >= warmup:
                point.attempts[-1].append((encode_s, decode_s))


def _off_the_line(points: list[_Point]) -> list[_Point]:
    """Per method and phase, the points more than `fit.OUTLIER` (relative) off the line
    `fit.robust_line` draws through the method's other points: the worst third at most
    (more points off means the line, not the points, is wrong)."""
    again = {}
    for method in dict.fromkeys(p.method for p in points):
        mine = [p for p in points if p.method == method]
        n = np.array([float(p.grad.numel()) for p in mine])
        if len(set(n)) < 3:
            continue
        for phase in (0, 1):
            y = np.array([statistics.median(p.best(phase)) for p in mine])
            off = []
            for i in range(len(mine)):
                others = np.arange(len(mine)) != i
                fit = robust_line({"method": method[0]}, n[others], y[others])
                line = fit.params["a"] + fit.params["b"] * n[i]
                off.append((abs(y[i] / max(line, 1e-30) - 1), i))
            for rel, i in sorted(off, reverse=True)[: len(mine) // 3]:
                if rel > OUTLIER:
                    again[id(mine[i])] = mine[i]
    return list(again.values())


def measure_cases(cases, device="cpu", dtype=torch.float32, repeats: int = 3,
                  warmup: int = 1, remeasure: int = REMEASURE, seed: int = 0) -> list[dict]:
    """Rows of `measure_codec` for (name, options, numel) `cases` measured together: every
    timed round encodes and decodes each case in turn; then, `remeasure` times at most, the
    cases of `_off_the_line` are measured again (another `warmup` + `repeats` rounds among
    themselves) and each phase keeps its attempt of the smallest median (column
    `attempts`: how many were made)."""
    check_int(repeats, "repeats", 1)
    check_int(warmup, "warmup", 0)
    check_int(remeasure, "remeasure", 0)
    device = check_device(device)
    grads, points = {}, []
    for name, options, numel in cases:
        check_int(numel, "numel", 1)
        if numel not in grads:
            gen = torch.Generator(device=device).manual_seed(seed)
            grads[numel] = torch.randn(numel, generator=gen, device=device,
                                       dtype=torch.float32).to(dtype)
        points.append(_Point(name, compressor(name, **options), grads[numel]))
    clock = Clock(device)
    _rounds(points, clock, repeats, warmup)
    for _ in range(remeasure):
        again = _off_the_line(points)
        if not again:
            break
        _rounds(again, clock, repeats, warmup)
    return [_row(p, repeats, device) for p in points]


def _row(point: _Point, repeats: int, device: torch.device) -> dict:
    comp, grad = point.comp, point.grad
    payload = comp.compress(grad, key="bench")
    out = comp.decompress(payload).double()
    ref = grad.double()
    rel_error = ((ref - out).norm() / ref.norm()).item()
    original = grad.numel() * grad.element_size()
    encode, decode = point.best(0), point.best(1)
    return {
        "method": point.name, "options": json.dumps(comp.options(), sort_keys=True),
        "aggregation": comp.aggregation, "numel": grad.numel(),
        "dtype": _dtype_name(grad.dtype), "bytes_original": original,
        "bytes_sent": payload.nbytes,
        "ratio": original / payload.nbytes if payload.nbytes else float("inf"),
        "rel_error": rel_error, "encode_s": statistics.median(encode),
        "decode_s": statistics.median(decode), "encode_spread_s": max(encode) - min(encode),
        "decode_spread_s": max(decode) - min(decode), "repeats": repeats,
        "attempts": len(point.attempts), "threads": torch.get_num_threads(),
        "device": str(device),
    }


def measure_codec(name: str, options: dict, numel: int, device="cpu", dtype=torch.float32,
                  repeats: int = 3, warmup: int = 1, seed: int = 0) -> dict:
    """Time compress and decompress of a Gaussian gradient of `numel` values (median of
    `repeats` after `warmup`); report bytes on the wire, the compression ratio and the
    relative error ||g - D(C(g))|| / ||g||."""
    return measure_cases([(name, options, numel)], device, dtype, repeats, warmup, 0, seed)[0]


def default_sizes() -> list[int]:
    """2^10, 2^12, ..., 2^26 elements."""
    return [2**k for k in range(10, 27, 2)]


def quick_sizes() -> list[int]:
    """2^10, 2^12, ..., 2^16 elements: a CI-sized sweep."""
    return [2**k for k in range(10, 17, 2)]


def method_cases(methods) -> list[tuple[str, dict]]:
    """(name, options) pairs from None (every registered method with its defaults), or a
    list of names and (name, options) pairs."""
    if methods is None:
        return default_methods()
    if isinstance(methods, str):
        methods = [methods]
    cases = []
    for m in methods:
        name, options = (m, {}) if isinstance(m, str) else (m[0], dict(m[1]))
        cases.append((name, options))
    return cases


def case_keys(name: str, options: dict, sizes, device, dtype, device_name: str) -> list[dict]:
    """The key columns of the measurements of (name, options) at each of `sizes`."""
    built = json.dumps(compressor(name, **options).options(), sort_keys=True)
    return [{"method": name, "options": built, "numel": numel, "dtype": _dtype_name(dtype),
             "device": str(torch.device(device)), "device_name": device_name}
            for numel in sizes]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def bench_compress(methods=None, sizes=None, device="cpu", dtype=torch.float32,
                   repeats: int = 5, warmup: int = 1, out=None, progress: bool = False,
                   remeasure: int = REMEASURE, block: int | None = None,
                   threads: int | None = None) -> pd.DataFrame:
    """Measure every (method, options) of `methods` (see `method_cases`) at every size of
    `sizes` (elements; default `default_sizes()`), median of `repeats` after `warmup`, `block`
    methods at a time (None: `BLOCK`) by `measure_cases` (points off their line measured
    again up to `remeasure` times), with `threads` CPU threads (None: torch's setting); rows
    already in `out` (a path or ResultTable) are skipped, a block's rows appended when it is
    done. Returns the rows of this sweep (measured now or before)."""
    sizes = default_sizes() if sizes is None else list(sizes)
    if not sizes or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes):
        raise ValueError(f"sizes={sizes!r} is not allowed: give positive integers (elements)")
    check_int(repeats, "repeats", 1)
    check_int(warmup, "warmup", 0)
    check_int(remeasure, "remeasure", 0)
    block = BLOCK if block is None else block
    check_int(block, "block", 1)
    if threads is not None:
        check_int(threads, "threads", 1)
    device = check_device(device)
    table = as_table(out, KEY_COLUMNS)
    env = environment(device=device)
    cases = [(name, options, numel, key)
             for name, options in method_cases(methods)
             for numel, key in zip(sizes, case_keys(name, options, sizes, device, dtype,
                                                    env["device_name"]))]
    done = table.done_keys() if table else set()
    todo = [c for c in cases if table is None or table.key(c[3]) not in done]
    methods_todo = list(dict.fromkeys((c[0], c[3]["options"]) for c in todo))
    blocks = [[c for c in todo if (c[0], c[3]["options"]) in methods_todo[i:i + block]]
              for i in range(0, len(methods_todo), block)]
    rows = []
    with tqdm(total=len(todo), desc="compress bench", disable=not progress,
              file=sys.stderr) as bar, _torch_threads(threads):
        for cases_of_block in blocks:
            measured = measure_cases([c[:3] for c in cases_of_block], device, dtype, repeats,
                                     warmup, remeasure)
            for row in measured:
                row = {**row, **environment(device=device)}
                if table:
                    table.append(row)
                rows.append(row)
            bar.update(len(cases_of_block))
    if table is None:
        return pd.DataFrame(rows)
    return table.frame(keys={table.key(c[3]) for c in cases})


@contextlib.contextmanager
def _torch_threads(threads: int | None):
    """torch's CPU threads set to `threads` (None: left alone) inside, restored after."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
