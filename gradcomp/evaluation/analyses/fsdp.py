"""What-if and advice on the FSDP timeline (`model.fsdp.predict_fsdp`): one FSDP2 iteration of
a profile with FSDP's own reduce-scatter ("none") or a compressed one (`gradcomp.fsdp`), ranked
by predicted iteration time against FSDP's own reduce-scatter. Time per iteration only:
convergence is not modelled. The timeline here overlaps collectives with compute (streams, as on
GPUs); it is validated against measurements only without that overlap (`gradcomp validate
--parallelism fsdp`, FSDP2 on CPUs with gloo).

`costs`: encode / decode costs as for `whatif.sweep` ({method: fits}; None: the assumed floors).
"""
from __future__ import annotations

import pandas as pd

from ...fsdp import METHODS
from ..model.fit import as_costs
from ..model.fsdp import predict_fsdp
from ..model.methods import resolve
from ..model.network import Network
from ..profiles.profiles import load_profile

WORTH = 0.05  # a method is worth it when it saves at least this fraction of the iteration
TIMELINE = ("FSDP timeline (fully_shard, one unit prefetched; modelled: validated against "
            "measured FSDP2 iterations only on CPUs, where collectives do not overlap compute)")


def check_fsdp_method(method: str) -> str:
    """`method` if the FSDP timeline models it (`gradcomp.fsdp.METHODS`), else a ValueError."""
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not allowed with FSDP: choose one of "
                         f"{', '.join(METHODS)} (none: FSDP's own reduce-scatter)")
    return method


def whatif_fsdp(profile, workers: int, bandwidth, method: str = "none",
                latency_s: float = 0.0, costs=None, baseline=None, tiers=None) -> dict:
    """One row: the modelled FSDP iteration of `method` (one of `gradcomp.fsdp.METHODS`) and
    its speedup and reduce-scatter bytes against FSDP's own reduce-scatter (`baseline`: its
    prediction, if known); `tiers`: the cluster's two-tier `Network` fields."""
    check_fsdp_method(method)
    profile = load_profile(profile)
    network = Network(workers, bandwidth, latency_s, **(tiers or {}))
    if baseline is None:
        baseline = predict_fsdp(profile, network, "none")
    pred = predict_fsdp(profile, network, resolve(method, as_costs(costs)),
                        baseline_s=baseline.t_iter_s)
    return {"parallelism": "fsdp", "profile": profile.name, "method": method,
            "workers": workers, "bandwidth_bps": network.bandwidth_bps,
            "t_iter_s": pred.t_iter_s, "speedup": pred.speedup,
            "exposed_comm_s": pred.exposed_comm_s, "rs_wire_bytes": pred.rs_wire_bytes,
            "rs_compression": baseline.rs_wire_bytes / pred.rs_wire_bytes
            if pred.rs_wire_bytes else float("inf"), "wire_bytes": pred.wire_bytes}


def advise_fsdp(profile, workers: int, bandwidth, methods=None, latency_s: float = 0.0,
                costs=None, tiers=None) -> pd.DataFrame:
    """One row per method (default: every `gradcomp.fsdp.METHODS`; "none", FSDP's own
    reduce-scatter, always), fastest first, with column `rank`."""
    chosen = list(dict.fromkeys(["none", *(METHODS if methods is None else methods)]))
    profile = load_profile(profile)
    network = Network(workers, bandwidth, latency_s, **(tiers or {}))
    baseline = predict_fsdp(profile, network, "none")
    rows = [whatif_fsdp(profile, workers, bandwidth, m, latency_s, costs, baseline, tiers)
            for m in chosen]
    table = pd.DataFrame(rows).sort_values("t_iter_s", kind="stable").reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    return table


def fsdp_verdict(table: pd.DataFrame, worth: float = WORTH) -> str:
    """A plain answer from an `advise_fsdp` table."""
    none = table[table["method"] == "none"].iloc[0]
    best = table.iloc[0]
    own = "FSDP's own reduce-scatter"
    if best["method"] == "none":
        return f"No: no method beats {own} ({none['t_iter_s'] * 1e3:.1f} ms per iteration)."
    saving = 1 - best["t_iter_s"] / none["t_iter_s"]
    if saving < worth:
        return (f"No: the best method, {best['method']}, would save {saving:.1%} of the "
                f"iteration time over {own}.")
    return (f"Yes: {best['method']} is {best['speedup']:.2f}x faster than {own} "
            f"({none['t_iter_s'] * 1e3:.1f} -> {best['t_iter_s'] * 1e3:.1f} ms per iteration, "
            f"{best['rs_compression']:.3g}x less reduce-scatter traffic). Time per iteration "
            "only; convergence is not modelled.")
