"""The testbed's collectives timed against its rates (`gradcomp testbed --check`), and the
per-tier collective sweep of a two-tier testbed (`tier_sweep`, run in it as
``python -m gradcomp.evaluation.testbed.ratecheck``).

* `rate_check`: 2 workers, an all-reduce of 4 MiB at the rate against the ring's time;
* `tier_check`: a `NodeTestbed`; an all-reduce inside node 0 (its G ranks, over the loopback:
  no rate limit) and one across the nodes (local rank 0 of every node, over the shaped links),
  each alone, the other ranks idle; the first against the time the link rate would imply (it
  must be far below), the second against the ring's time at the rate;
* `tier_sweep` (on every rank of a two-tier testbed): per tier ("intra": a group per node,
  "inter": a group per local rank, the ranks of one local rank across the nodes; "ring": one
  group of every rank, the flat layout's ring, which crosses each node's link once per
  direction), collective and payload, the slowest rank's median time, every group of the tier
  at once (as the hierarchical hook runs them: the G groups across nodes share each node's
  link) or only the first (``--first-only``), each call after `after_compute_ms` of compute as
  in training; `tier_network` fits them into the model's network.
  Rows: tier, groups ("all" / "first"), collective, nbytes, world_size (the group's size),
  concurrent_groups, time_s, time_spread_s, and the environment; `fit_collectives` fits a
  tier's rows like `benches.collective`'s.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from functools import partial

import pandas as pd

from ...checks import check_choice
from ..common.forkserver import WITHOUT_DDP
from ..common.units import parse_rate
from ..model.fit import fit_collectives
from ..model.network import Network
from .nodes import NodeTestbed
from .testbed import Testbed

TIER_KEYS = ("tier", "groups", "collective", "nbytes", "world_size")
TIERS = ("intra", "inter", "ring")
CHECK_BYTES = 4 * 2**20


def allreduce_time(testbed: Testbed, nbytes: int = CHECK_BYTES, repeats: int = 3) -> float:
    """The least seconds of `repeats` all-reduces of `nbytes` per worker (gloo) across the
    testbed: what the link takes (other work on the machine only adds time to a repeat; the
    median of 5 under a busy machine's load came out 15.6% over the rate's time at 100 Mbit/s,
    under 15% when quiet)."""
    with tempfile.TemporaryDirectory() as tmp:
        table = os.path.join(tmp, "allreduce.csv")
        testbed.run([sys.executable, "-m", "gradcomp.evaluation.benches.collective", "--out",
                     table, "--backend", "gloo", "--collectives", "allreduce", "--sizes",
                     str(nbytes), "--repeats", str(repeats), "--warmup", "1"], timeout=300)
        return float(pd.read_csv(table)["time_min_s"].iloc[0])


def expected_allreduce_s(nbytes: float, workers: int, rate_bps: float) -> float:
    """What the link rate implies for a ring all-reduce: 2(p-1)/p * S / B (gloo's ring for
    2 workers sends each half of the payload once each way)."""
    return 2 * (workers - 1) / workers * nbytes * 8 / rate_bps


def rate_check(rate="100mbit", nbytes: int = CHECK_BYTES, workers: int = 2) -> dict:
    """An all-reduce of `nbytes` at `rate` (the least of 5 repeats) against the rate's time."""
    rate_bps = parse_rate(rate, "rate")
    with Testbed(workers, rate_bps) as testbed:
        testbed.preload = WITHOUT_DDP  # collectives alone
        measured = allreduce_time(testbed, nbytes, repeats=5)
    expected = expected_allreduce_s(nbytes, workers, rate_bps)
    return {"rate_bps": rate_bps, "nbytes": nbytes, "workers": workers,
            "measured_s": measured, "expected_s": expected,
            "rel_error": (measured - expected) / expected}


def run_tier_sweep(testbed: NodeTestbed, out, sizes, collectives=("allreduce",),
                   repeats: int = 5, warmup: int = 1, after_compute_ms: float = 0.0,
                   first_only: bool = False, timeout: float = 900,
                   tiers=("intra", "inter")) -> pd.DataFrame:
    """`tier_sweep` of `tiers` on every rank of `testbed`, appending to the table `out`; its
    rows."""
    testbed.run([sys.executable, "-m", "gradcomp.evaluation.testbed.ratecheck", "--out",
                 str(out), "--sizes", ",".join(map(str, sizes)), "--collectives",
                 ",".join(collectives), "--tiers", ",".join(tiers),
                 "--repeats", str(repeats), "--warmup", str(warmup),
                 "--after-compute-ms", repr(after_compute_ms),
                 *(["--first-only"] if first_only else [])], timeout=timeout)
    return pd.read_csv(out)


def tier_check(nodes: int = 2, gpus_per_node: int = 2, rate="100mbit",
               nbytes: int = CHECK_BYTES) -> dict:
    """An all-reduce of `nbytes` inside node 0 and one across the nodes (module docstring),
    median of 5, against what the link rate implies."""
    rate_bps = parse_rate(rate, "rate")
    with NodeTestbed(nodes, gpus_per_node, rate_bps) as testbed, \
            tempfile.TemporaryDirectory() as tmp:
        testbed.preload = WITHOUT_DDP  # collectives alone
        rows = run_tier_sweep(testbed, os.path.join(tmp, "tiers.csv"), [nbytes], repeats=5,
                              first_only=True, timeout=300).set_index("tier")
    result = {"rate_bps": rate_bps, "nbytes": nbytes, "nodes": nodes,
              "gpus_per_node": gpus_per_node}
    for tier, workers in (("intra", gpus_per_node), ("inter", nodes)):
        measured = float(rows.loc[tier, "time_s"])
        expected = expected_allreduce_s(nbytes, workers, rate_bps)
        result[tier] = {"workers": workers, "measured_s": measured,
                        "at_link_rate_s": expected, "rel_error": (measured - expected) / expected}
    return result


def tier_network(tiers: pd.DataFrame, nodes: int, g: int, rate_bps: float,
                 layout: str = "hierarchical") -> Network:
    """The model's two-tier network from a tier sweep, as `layout` runs its collectives
    (`validate_tiers`' docstring). Flat: the "ring" tier's fits, one flow per direction
    crossing each node's link (the local-rank rings' all-gathers ran at 66-80% of the rate on
    the two-tier sweep of 2026-11-28, the flat ring's at about 94% in training); a sweep
    without it (measured before it was timed) prices flat like hierarchical."""
    rows = tiers[tiers["groups"] == "all"]

    def fit(tier: str) -> dict:
        return fit_collectives(rows[rows["tier"] == tier])

    def finite(bps: float) -> float:
        return bps if math.isfinite(bps) else 1e15  # a slope of 0: no bandwidth term

    # the G rings across the nodes share each node's link; the flat ring alone crosses it
    flat = layout == "flat" and (rows["tier"] == "ring").any()
    across, share = (fit("ring"), 1) if flat else (fit("inter"), g)
    inside = fit("intra")["allreduce"].params
    return Network(nodes * g, rate_bps,
                   {c: max(f.params["alpha_s"], 0.0) for c, f in across.items()},
                   {c: share * finite(f.params["bandwidth_bps"]) / rate_bps
                    for c, f in across.items()},
                   gpus_per_node=g, intra_bandwidth_bps=finite(inside["bandwidth_bps"]),
                   intra_latency_s=max(inside["alpha_s"], 0.0), algorithm="ring")


def tier_sweep(sizes, collectives, repeats: int, warmup: int, after_compute_s: float,
               first_only: bool, tiers=("intra", "inter")) -> list[dict]:
    """On every rank of a two-tier process group (torchrun's LOCAL_WORLD_SIZE ranks per
    node): the module docstring's rows of `tiers` (every rank returns them)."""
    import torch
    import torch.distributed as dist

    from ..benches.collective import collective_op
    from ..common.timing import compute_for, slowest_rank_times

    g, world = int(os.environ["LOCAL_WORLD_SIZE"]), dist.get_world_size()
    if world % g or world == g:
        raise ValueError(f"LOCAL_WORLD_SIZE={g} is not allowed with WORLD_SIZE={world}: the "
                         "tiers need several whole nodes")
    nodes, (node, local) = world // g, divmod(dist.get_rank(), g)
    device = torch.device("cpu")
    groups = {"intra": [dist.new_group(list(range(n * g, (n + 1) * g))) for n in range(nodes)],
              "inter": [dist.new_group(list(range(k, world, g))) for k in range(g)],
              "ring": [dist.group.WORLD]}
    lead_in = partial(compute_for, after_compute_s, device) if after_compute_s > 0 else None
    rows = []
    for tier in tiers:
        mine = {"intra": node, "inter": local, "ring": 0}[tier]
        group = groups[tier][mine]
        size = dist.get_world_size(group)
        active = mine == 0 or not first_only
        for collective in collectives:
            for nbytes in sizes:
                op = collective_op(collective, nbytes, device, group)
                times, _ = slowest_rank_times(op if active else (lambda: None), device,
                                              repeats, warmup, lead_in=lead_in)
                rows.append({"tier": tier, "groups": "first" if first_only else "all",
                             "collective": collective, "nbytes": nbytes, "world_size": size,
                             "concurrent_groups": 1 if first_only else len(groups[tier]),
                             "time_s": times.median().item(),
                             "time_spread_s": (times.max() - times.min()).item(),
                             "repeats": repeats, "warmup": warmup,
                             "after_compute_s": after_compute_s})
    return rows


def main(argv=None) -> int:
    """In every rank of a two-tier testbed: `tier_sweep`; rank 0 appends to --out."""
    import torch.distributed as dist

    from ..common.env import environment, init_from_env
    from ..common.store import ResultTable

    args = argparse.ArgumentParser(description=main.__doc__)
    args.add_argument("--out", required=True)
    args.add_argument("--sizes", required=True, help="comma-separated bytes per rank")
    args.add_argument("--collectives", default="allreduce")
    args.add_argument("--tiers", default="intra,inter", help=f"of {','.join(TIERS)}")
    args.add_argument("--repeats", type=int, default=5)
    args.add_argument("--warmup", type=int, default=1)
    args.add_argument("--after-compute-ms", type=float, default=0.0)
    args.add_argument("--first-only", action="store_true")
    a = args.parse_args(argv)
    tiers = [check_choice(t, "--tiers", TIERS) for t in a.tiers.split(",")]
    init_from_env("gloo")
    try:
        rows = tier_sweep([int(n) for n in a.sizes.split(",")], a.collectives.split(","),
                          a.repeats, a.warmup, a.after_compute_ms / 1e3, a.first_only, tiers)
        if dist.get_rank() == 0:
            table = ResultTable(a.out, TIER_KEYS)
            env = environment("gloo", dist.get_world_size())
            for row in rows:
                table.append({**row, **{k: v for k, v in env.items() if k not in row}})
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

