"""The compress benchmark: encode / decode time, bytes on the wire and error of every method
over a range of gradient sizes, one tidy row per (method, options, size), appended to a
`ResultTable` as measured so that an interrupted sweep resumes where it stopped.

Columns: those of `measure_codec` (method, options, aggregation, numel, dtype,
bytes_original, bytes_sent, ratio, rel_error, encode_s, decode_s, encode_spread_s,
decode_spread_s, repeats, device) and the environment columns of `env.environment`.
"""
from __future__ import annotations

import json
import sys

import pandas as pd
import torch
from tqdm import tqdm

from ...checks import check_device, check_int
from ...compressors import compressor, names
from ..common.env import environment
from ..common.store import as_table
from ..common.timing import median_seconds

RESNET50_NUMEL = 25_600_000  # `gradcomp compressors`: a ResNet-50-sized gradient
KEY_COLUMNS = ("method", "options", "numel", "dtype", "device", "device_name")


def default_methods() -> list[tuple[str, dict]]:
    """Every registered method with its default options."""
    return [(name, {}) for name in names()]


def measure_codec(name: str, options: dict, numel: int, device="cpu", dtype=torch.float32,
                  repeats: int = 3, warmup: int = 1, seed: int = 0) -> dict:
    """Time compress and decompress of a Gaussian gradient of `numel` values; report bytes on
    the wire, the compression ratio and the relative error ||g - D(C(g))|| / ||g||."""
    check_int(numel, "numel", 1)
    check_int(repeats, "repeats", 1)
    check_int(warmup, "warmup", 0)
    device = check_device(device)
    gen = torch.Generator(device=device).manual_seed(seed)
    grad = torch.randn(numel, generator=gen, device=device, dtype=torch.float32).to(dtype)
    comp = compressor(name, **options)
    payload = comp.compress(grad, key="bench")
    encode_s, encode_spread = median_seconds(lambda: comp.compress(grad, key="bench"), device,
                                             repeats, warmup)
    decode_s, decode_spread = median_seconds(lambda: comp.decompress(payload), device,
                                             repeats, warmup)
    out = comp.decompress(payload).double()
    ref = grad.double()
    rel_error = ((ref - out).norm() / ref.norm()).item() if numel else 0.0
    original = numel * grad.element_size()
    return {
        "method": name, "options": json.dumps(comp.options(), sort_keys=True),
        "aggregation": comp.aggregation, "numel": numel,
        "dtype": _dtype_name(dtype), "bytes_original": original,
        "bytes_sent": payload.nbytes,
        "ratio": original / payload.nbytes if payload.nbytes else float("inf"),
        "rel_error": rel_error, "encode_s": encode_s, "decode_s": decode_s,
        "encode_spread_s": encode_spread, "decode_spread_s": decode_spread,
        "repeats": repeats, "device": str(device),
    }


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
                   repeats: int = 5, warmup: int = 1, out=None,
                   progress: bool = False) -> pd.DataFrame:
    """Measure every (method, options) of `methods` (see `method_cases`) at every size of
    `sizes` (elements; default `default_sizes()`), median of `repeats` after `warmup`;
    rows already in `out` (a path or ResultTable) are skipped. Returns the rows of this sweep
    (measured now or before)."""
    sizes = default_sizes() if sizes is None else list(sizes)
    if not sizes or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes):
        raise ValueError(f"sizes={sizes!r} is not allowed: give positive integers (elements)")
    check_int(repeats, "repeats", 1)
    check_int(warmup, "warmup", 0)
    device = check_device(device)
    table = as_table(out, KEY_COLUMNS)
    env = environment(device=device)
    cases = [(name, options, numel, key)
             for name, options in method_cases(methods)
             for numel, key in zip(sizes, case_keys(name, options, sizes, device, dtype,
                                                    env["device_name"]))]
    done = table.done_keys() if table else set()
    todo = [c for c in cases if table is None or table.key(c[3]) not in done]
    rows = []
    for name, options, numel, _ in tqdm(todo, desc="compress bench", disable=not progress,
                                        file=sys.stderr):
        row = {**measure_codec(name, options, numel, device, dtype, repeats, warmup),
               **environment(device=device)}
        if table:
            table.append(row)
        rows.append(row)
    if table is None:
        return pd.DataFrame(rows)
    return table.frame(keys={table.key(c[3]) for c in cases})
