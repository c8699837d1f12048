"""Advice: rank compression methods by predicted iteration time on the user's network, and say
plainly whether compression is worth it.

Encode / decode costs come from a measured compress-bench table when given (`costs`, columns
method, numel, encode_s, decode_s; fitted per method by `fit.fit_codec`); methods missing from
it, and all methods when no table is given, get the stated memory-bound floors of
`methods.assumed_costs` (20 us per application plus the bytes moved at 800 GB/s), which
flatter slow kernels such as top-k: measure before trusting a close call.
The ranking is by time per iteration only; the effect of compression on convergence is not
modelled.
"""
from __future__ import annotations

import math

import pandas as pd

from ..compressors import names
from .fit import as_costs
from .methods import MethodCost, resolve
from .network import Network
from .profiles import load_profile
from .timeline import predict

WORTH = 0.05  # a method is worth it when it saves at least this fraction of the iteration


def advise(profile, workers: int, bandwidth, methods=None, costs=None,
           bucketing="ddp", latency_s: float = 0.0, efficiency: float = 1.0,
           contention: float = 1.0) -> pd.DataFrame:
    """One row per method (default: every registered gradcomp method with its defaults, and
    `none` always), fastest first: predicted t_iter, SF, speedup vs none, compression, the
    per-iteration encode + decode time and where the costs came from."""
    profile = load_profile(profile)
    network = Network(workers, bandwidth, latency_s, efficiency)
    fitted = as_costs(costs)
    chosen = list(names() if methods is None else methods)
    if not any(m == "none" or getattr(m, "name", None) == "none" for m in chosen):
        chosen.insert(0, "none")
    base = predict(profile, network, "none", bucketing, contention).t_iter_s
    rows = []
    for m in chosen:
        method = resolve(m, fitted)
        origin = ("given" if isinstance(m, (MethodCost, int, float)) else
                  "none" if m == "none" else "fitted" if m in fitted else "assumed")
        pred = predict(profile, network, method, bucketing, contention, base)
        times = pred.bucket_times
        codec = sum(e - s for s, e in zip(times["encode_start_s"], times["encode_end_s"]))
        codec += sum(e - s for s, e in zip(times["decode_start_s"], times["decode_end_s"]))
        rows.append({"method": method.name, "aggregation": method.aggregation,
                     "t_iter_s": pred.t_iter_s, "sf": pred.sf, "speedup": pred.speedup,
                     "compression": pred.compression, "exposed_comm_s": pred.exposed_comm_s,
                     "codec_s": codec, "costs": origin, "bucketing": pred.bucketing,
                     "workers": pred.workers, "bandwidth_bps": pred.bandwidth_bps})
    table = pd.DataFrame(rows).sort_values("t_iter_s", kind="stable").reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    return table


def verdict(table: pd.DataFrame, worth: float = WORTH) -> str:
    """A plain answer from an `advise` table: is compression worth it, and by how much."""
    none = table[table["method"] == "none"].iloc[0]
    best = table.iloc[0]
    system = f"uncompressed {'DDP' if none['bucketing'] == 'ddp' else 'Horovod'}"
    if best["method"] == "none":
        runner = table.iloc[1] if len(table) > 1 else None
        tail = "" if runner is None else (
            f"; the closest, {runner['method']}, would be "
            f"{(runner['t_iter_s'] / none['t_iter_s'] - 1):.1%} slower")
        return f"No: no method beats {system} (SF {none['sf']:.2f}){tail}."
    saving = 1 - best["t_iter_s"] / none["t_iter_s"]
    if saving < worth:
        return (f"No: {system} already reaches SF {none['sf']:.2f}; the best method, "
                f"{best['method']}, would save {saving:.1%} of the iteration time.")
    ratio = "" if not math.isfinite(best["compression"]) else \
        f", {best['compression']:.3g}x less traffic"
    return (f"Yes: {best['method']} is {best['speedup']:.2f}x faster than {system} (SF "
            f"{none['sf']:.2f} -> {best['sf']:.2f}{ratio}). Time per iteration only; "
            f"convergence is not modelled.")
