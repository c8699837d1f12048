"""The performance model of one FSDP2 (`fully_shard`) iteration, with FSDP's own reduce-scatter
or gradcomp's compressed one (`gradcomp.fsdp`). `gradcomp validate --parallelism fsdp` holds
it against FSDP2 training (`testbed.validate_fsdp`).

Units: the profile's gradients, in backward order, grouped into FSDP units of about `unit_mb`
(a unit closes when it reaches the size; in practice one unit per block), or into units of
the given `unit_sizes` (parameters per FSDP module, backward order: consecutive gradients).
A unit's forward time is its share of the profile's forward time by parameter count; its
backward time is the profile's, from the ready time of its last gradient; forward, backward
and optimizer are the profile's times the network's `compute_slowdown`.

Three resources, each serving its work in issue order: *compute* (each unit's forward and
backward), *codec* (encode and decode of compressed reduce-scatters) and *comm* (all-gathers
of parameters and reduce-scatters of gradients, one at a time, sharing the network):

* forward, units in forward order: the all-gather of unit u + 1 is issued when unit u's
  forward starts (FSDP2 prefetches one unit); unit u's forward starts when its parameters are
  gathered and the previous forward is done;
* backward, units in backward order: each unit's parameters are gathered again
  (`reshard_after_forward`), the next unit's prefetched when a unit's backward starts; when a
  unit's backward ends its gradient is reduce-scattered: encode -> exchange -> decode. With
  `blocking` the next unit's backward waits for that (FSDP calls a reduce-scatter with
  `async_op=False`: on a CPU with gloo the backward thread waits for it).

Without `overlap` (FSDP on a CPU: there are no streams, and FSDP2 all-gathers with
``async_op=False`` unless told otherwise), every collective runs in the compute thread: a
unit's all-gather starts when the previous unit's compute ends, and compute waits for it and
for each reduce-scatter (`blocking` implied).
Costs, alpha-beta (`Network.cost`: `collectives.costs`, whose two-tier forms a cluster of
nodes takes; flat here): all-gather of a unit of S parameter bytes ``(p-1) alpha + (p-1)/p
S/B``; FSDP's reduce-scatter (method ``none``) of its S gradient bytes ``(p-1) alpha +
(p-1)/p S/B`` plus (p-1) adds of S/p bytes; a compressed reduce-scatter is an all-to-all of
the p chunks' payloads, ``(p-1) alpha + (p-1) w/B`` with w the wire bytes of one chunk of n/p
values, after an encode of the n values and before a decode of p payloads of n/p values (the
method's fitted `a + b n` per application). Reduce-scatter and all-to-all take their own
latency and bandwidth where the network has them (`Network.prices`: a measured sweep of
them), else the all-gather's (a ring reduce-scatter moves what a ring all-gather does).

Output (`FSDPPrediction`): t_iter = end of the last backward or decode + optimizer;
exposed communication = t_iter - optimizer - (forward + backward compute);
speedup = t_iter(FSDP's own) / t_iter(method).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from ...checks import check_bool, check_number
from ..profiles.profiles import Profile, load_profile
from .bucketing import MIB
from .methods import MethodCost, resolve
from .network import Network


@dataclass
class FSDPPrediction:
    """The modelled FSDP iteration; times in seconds; `wire_bytes` one worker sends per
    iteration (all-gathers and reduce-scatters), `rs_wire_bytes` of those the reduce-scatters'."""

    method: str
    workers: int
    bandwidth_bps: float
    t_iter_s: float
    forward_end_s: float
    backward_end_s: float
    exposed_comm_s: float
    speedup: float
    wire_bytes: float
    rs_wire_bytes: float
    unit_times: dict = field(repr=False)

    @property
    def units(self) -> pd.DataFrame:
        """One row per unit (backward order): sizes and stage times."""
        return pd.DataFrame(self.unit_times)


def units_of(profile: Profile, unit_mb: float, unit_sizes=None) -> list[list[int]]:
    """Gradient indices (backward order) per unit: a unit closes when it reaches `unit_mb`,
    or, with `unit_sizes` (parameters per unit, backward order), when it holds its size."""
    check_number(unit_mb, "unit_mb", 0, above=True)
    if unit_sizes is not None:
        return _units_by_size(profile, [int(n) for n in unit_sizes])
    units, current, size = [], [], 0
    for i, numel in enumerate(profile.sizes):
        current.append(i)
        size += numel * profile.dtype_bytes
        if size >= unit_mb * MIB:
            units.append(current)
            current, size = [], 0
    return units + ([current] if current else [])


def _units_by_size(profile: Profile, sizes: list[int]) -> list[list[int]]:
    units, start = [], 0
    for size in sizes:
        end, total = start, 0
        while total < size and end < len(profile.sizes):
            total, end = total + profile.sizes[end], end + 1
        if total != size or size <= 0:
            raise ValueError(f"unit_sizes={sizes!r} is not allowed for profile "
                             f"{profile.name!r}: its gradients (backward order, "
                             f"{list(profile.sizes)}) do not fall into units of these sizes")
        units.append(list(range(start, end)))
        start = end
    if start != len(profile.sizes):
        raise ValueError(f"unit_sizes={sizes!r} is not allowed for profile {profile.name!r}: "
                         f"they hold {sum(sizes)} of its {profile.numel} parameters")
    return units


def predict_fsdp(profile, network: Network, method="none", unit_mb: float = 25.0,
                 blocking: bool = False, baseline_s: float | None = None,
                 unit_sizes=None, overlap: bool = True) -> FSDPPrediction:
    """Model one FSDP iteration of `profile` (a Profile or name) on `network` with `method`
    ("none": FSDP's own reduce-scatter; else a method `resolve` takes whose payload has a fixed
    size: casts, quantizers, top-k, random-k). `baseline_s`: t_iter of "none", if known;
    `unit_sizes` and `overlap`: see the module docstring."""
    profile = load_profile(profile)
    method = resolve(method)
    check_bool(blocking, "blocking")
    check_bool(overlap, "overlap")
    if method.aggregation not in ("allreduce", "allgather"):
        raise ValueError(f"method={method.name!r} is not allowed for FSDP: its reduce-scatter "
                         "takes methods with fixed-size payloads (none, bf16, fp16, int8, "
                         "int4, topk, randomk)")
    units = units_of(profile, unit_mb, unit_sizes)
    pred = _simulate(profile, network, method, units, blocking, overlap)
    if baseline_s is None:
        baseline_s = pred.t_iter_s if method.name == "none" else _simulate(
            profile, network, resolve("none"), units, blocking, overlap).t_iter_s
    pred.speedup = baseline_s / pred.t_iter_s
    return pred


def _all_gather(network: Network, nbytes: float) -> float:
    """The all-gather of a unit of `nbytes` in all (each worker holds 1/p of it)."""
    return network.cost("allgather", nbytes / network.workers)


def _exchange(network: Network, collective: str, nbytes: float, add_time) -> float:
    """A reduce-scatter or all-to-all of `nbytes` per worker: by its own latency and
    bandwidth where the network has them, else the all-gather's."""
    priced_as = collective if network.prices(collective) else "allgather"
    return network.cost(collective, nbytes, add_time, priced_as=priced_as)


def _reduce_scatter(profile: Profile, network: Network, method: MethodCost, numel: int):
    """(encode s, exchange s, decode s, bytes sent) of one unit's gradient of `numel` values."""
    p = network.workers
    raw = numel * profile.dtype_bytes
    if p == 1:
        return 0.0, 0.0, 0.0, 0.0
    if method.name == "none":
        return (0.0, _exchange(network, "reducescatter", raw, profile.add_time), 0.0,
                raw * (p - 1) / p)
    chunk = math.ceil(numel / p)
    wire = method.wire([(chunk,)], profile.dtype_bytes)[0]
    exchange = _exchange(network, "alltoall", p * wire, profile.add_time)
    encode = method.encode_s([(numel,)])
    decode = p * method.decode_s([(chunk,)])
    return encode, exchange, decode, (p - 1) * wire


def _simulate(profile: Profile, network: Network, method: MethodCost, units, blocking: bool,
              overlap: bool):
    total = sum(profile.sizes) or 1
    numel = [sum(profile.sizes[i] for i in u) for u in units]
    ready = [0.0] + [profile.ready_s[u[-1]] for u in units]
    slow = network.compute_slowdown
    backward = [(b - a) * slow for a, b in zip(ready, ready[1:])]
    backward[-1] += max(0.0, profile.backward_s - ready[-1]) * slow
    forward = [profile.forward_s * slow * n / total for n in numel]
    gather = [_all_gather(network, n * profile.dtype_bytes) for n in numel]
    m = len(units)
    comm = compute = codec = 0.0

    def on_comm(earliest, seconds):
        nonlocal comm
        comm = max(comm, earliest) + seconds
        return comm

    blocking = blocking or not overlap

    def prefetch(start, end, seconds):  # the next unit's all-gather, issued at start (overlap)
        return on_comm(start if overlap else end, seconds)

    # Forward, units in forward order (the reverse of backward order).
    gathered = {m - 1: on_comm(0.0, gather[m - 1])}
    for u in reversed(range(m)):
        start = max(compute, gathered[u])
        if u > 0:
            gathered[u - 1] = prefetch(start, start + forward[u], gather[u - 1])
        compute = start + forward[u]
    forward_end = compute
    # Backward, units in backward order: gather again, compute, reduce-scatter.
    regathered = {0: on_comm(forward_end, gather[0])}
    rows = {k: [] for k in ("unit", "params", "numel", "backward_start_s", "backward_end_s",
                            "rs_start_s", "rs_end_s", "rs_bytes")}
    rs_bytes = 0.0
    end = forward_end
    for u in range(m):
        start = max(compute, regathered[u])
        compute = start + backward[u]
        if u + 1 < m and overlap:
            regathered[u + 1] = on_comm(start, gather[u + 1])
        enc, exchange, dec, sent = _reduce_scatter(profile, network, method, numel[u])
        codec = max(codec, compute) + enc
        exchanged = on_comm(codec, exchange)
        codec = max(codec, exchanged) + dec
        end = max(end, codec, compute)
        if blocking:
            compute = codec
        if u + 1 < m and not overlap:
            regathered[u + 1] = on_comm(compute, gather[u + 1])
        rs_bytes += sent
        for key, value in zip(rows, (u, len(units[u]), numel[u], start, start + backward[u],
                                     start + backward[u], codec, sent)):
            rows[key].append(value)
    t_iter = end + profile.optimizer_s * slow
    work = profile.forward_s * slow + sum(backward)
    all_gathers = 2 * sum(n * profile.dtype_bytes for n in numel) * (network.workers - 1) \
        / network.workers
    return FSDPPrediction(method.name, network.workers, network.bandwidth_bps, t_iter,
                          forward_end, compute, max(0.0, end - work), math.nan,
                          all_gathers + rs_bytes, rs_bytes, rows)
