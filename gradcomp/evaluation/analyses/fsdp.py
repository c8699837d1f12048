"""What-if and advice on the FSDP timeline (`model.fsdp.predict_fsdp`): one FSDP2 iteration of
a profile with FSDP's own reduce-scatter ("none") or a compressed one (`gradcomp.fsdp`), ranked
by predicted iteration time against FSDP's own reduce-scatter (`weighed.fsdp_ranking` adds
the intervals, `recommend.recommend_by_iteration` the verdict). Time per iteration only:
convergence is not modelled. The timeline here overlaps collectives with compute (streams, as on
GPUs); it is validated against measurements only without that overlap (`gradcomp validate
--parallelism fsdp`, FSDP2 on CPUs with gloo).

`costs`: encode / decode costs as for `whatif.sweep` ({method: fits}; None: the assumed floors).
"""
from __future__ import annotations

import pandas as pd

from ..model.fit import as_costs
from ..model.fsdp import predict_fsdp
from ..model.methods import resolve
from ..model.network import Network
from ..profiles.profiles import load_profile
from .recommend import sixteen_bit, unsupported

TIMELINE = ("FSDP timeline (fully_shard, one unit prefetched; modelled: validated against "
            "measured FSDP2 iterations only on CPUs, where collectives do not overlap compute)")


def check_fsdp_method(method: str) -> str:
    """`method` if the FSDP timeline models it (`gradcomp.fsdp.METHODS`), else a ValueError."""
    from ...fsdp import METHODS  # torch.distributed.fsdp: imported when FSDP is asked about

    if method not in METHODS:
        raise ValueError(f"method={method!r} is not allowed with FSDP: choose one of "
                         f"{', '.join(METHODS)} (none: FSDP's own reduce-scatter)")
    return method


def whatif_fsdp(profile, workers: int, bandwidth, method: str = "none",
                latency_s: float = 0.0, costs=None, baseline=None, tiers=None,
                efficiency: float = 1.0) -> dict:
    """One row: the modelled FSDP iteration of `method` (one of `gradcomp.fsdp.METHODS`) and
    its speedup and reduce-scatter bytes against FSDP's own reduce-scatter (`baseline`: its
    prediction, if known); `tiers`: the cluster's two-tier `Network` fields, `efficiency`
    its network's."""
    check_fsdp_method(method)
    profile = load_profile(profile)
    network = Network(workers, bandwidth, latency_s, efficiency, **(tiers or {}))
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
                costs=None, tiers=None, efficiency: float = 1.0,
                device: str | None = None) -> pd.DataFrame:
    """One row per method (default: every `gradcomp.fsdp.METHODS`; "none", FSDP's own
    reduce-scatter, and the 16-bit one of `device` always, `recommend.sixteen_bit`; bf16
    never on a GPU without it, `recommend.unsupported`), fastest first, with column `rank`.
    `device`: the GPU the question runs on (None: the profile's)."""
    from ...fsdp import METHODS  # torch.distributed.fsdp: imported when FSDP is asked about

    profile = load_profile(profile)
    device = profile.device if device is None else device
    chosen = [m for m in dict.fromkeys(["none", sixteen_bit(device),
                                        *(METHODS if methods is None else methods)])
              if not unsupported(m, device)]
    network = Network(workers, bandwidth, latency_s, efficiency, **(tiers or {}))
    baseline = predict_fsdp(profile, network, "none")
    rows = [whatif_fsdp(profile, workers, bandwidth, m, latency_s, costs, baseline, tiers,
                        efficiency) for m in chosen]
    table = pd.DataFrame(rows).sort_values("t_iter_s", kind="stable").reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    return table
