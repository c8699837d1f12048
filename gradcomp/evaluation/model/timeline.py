"""The end-to-end performance model of one data-parallel training iteration.

Inputs: a `Profile`, a `Network`, a `MethodCost` and a bucketing policy (`DDP`, `Horovod`).
Timeline: every bucket is a chain of stages, run on two streams, each first-come first-served
(ties by bucket order): a *codec* stream (encode, decode, PowerSGD's middle step) and a *comm*
stream (collectives):

* all-reduce methods: encode -> all-reduce -> decode;
* all-gather methods: encode -> all-gather -> decode of the p received payloads;
* ``blocksparse``: encode (and decode of the own payload) -> block-sparse all-reduce ->
  write back (`Network.block_sparse_cost`, blocks from the method's `BlockSparsity`);
* ``powersgd``: the encode (P = M Q) -> all-reduce of the plain pieces and P -> the middle
  (orthogonalise P, Q = M^T P; without a measured `MethodCost.middle`, half the encode on
  each side) -> all-reduce of Q -> decode.

A bucket's first stage is queued when its last gradient is ready; each later stage when the
previous one ends. So communication starts when the bucket is encoded and the previous
communication is done. Contention: while backward and a codec stage run at the same time, each
progresses at rate 1/k (k = `contention` >= 1; k = 1: no contention, k = 2: they share the
device evenly), so a codec stage of cost c that overlaps backward for its whole length takes
k*c and delays the rest of backward by (k-1)*c; gradient ready times move with backward.

Layouts: ``flat`` (the hook's collectives over all ranks, as above) or ``hierarchical`` (a
hook that compresses only between nodes, `Network.node_tiers`): per bucket an uncompressed
ring reduce-scatter inside the node, then the method's chain above on the rank's 1/G shard
(its tensors' whole rows as matrices, the rest as vectors, as the hook cuts them; the
slowest local rank's) across the nodes among the ranks of its local rank,
then a ring all-gather of the shard inside the node.

Compute slowdown: a distributed worker's forward, backward (so the gradient ready times) and
optimizer take the profile's times `Network.compute_slowdown` (>= 1), for every method,
`none` included; the single worker's t_iter_single is not slowed.

DiLoCo variants (`MethodCost.diloco`): an inner step is the single worker's iteration, plus
each fragment's outer exchange once per H steps, exposed except for the `delay` inner steps it
overlaps (`_diloco`); `bucket_times` then holds one row per fragment.

Output (`Prediction`): t_iter = forward + max(end of backward, end of the last stage) +
finalize (DDP's copy of the buckets into the gradients, `Profile.finalize_s`) + optimizer;
exposed communication = max(0, end of the last stage - end of backward); SF = t_iter_single
/ t_iter; speedup = t_iter(none) / t_iter(method) on the same network; per bucket its stages'
times, its codec seconds (every codec stage, `codec_seconds`) and those after backward ended
(`busy_s`: the iteration's compute and codec time).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import pandas as pd
import torch

from ...checks import check_choice
from ...comm.hierarchical.inside import shard_shapes
from ...compressors.powersgd import square_view
from ..profiles.profiles import Profile, load_profile
from ...diloco import bounds
from .bucketing import bucketing_policy
from .methods import MethodCost, resolve
from .network import Network

_EPS = 1e-15


@dataclass
class Prediction:
    """The modelled iteration; times in seconds, `wire_bytes` sent per worker per iteration
    (all rounds), `buckets` one row per bucket."""

    method: str
    workers: int
    bandwidth_bps: float
    bucketing: str
    t_iter_s: float
    t_iter_single_s: float
    backward_end_s: float
    exposed_comm_s: float
    sf: float
    speedup: float
    wire_bytes: float
    raw_bytes: int
    bucket_times: dict = field(repr=False)

    @property
    def buckets(self) -> pd.DataFrame:
        """One row per bucket: its gradients, sizes and stage times (seconds)."""
        return pd.DataFrame(self.bucket_times)

    @property
    def compression(self) -> float:
        """Raw gradient bytes / wire bytes."""
        return self.raw_bytes / self.wire_bytes if self.wire_bytes else math.inf

    def as_row(self) -> dict:
        """The scalar fields, for a tidy DataFrame row."""
        row = {k: v for k, v in self.__dict__.items() if k != "bucket_times"}
        row["compression"] = self.compression
        return row


LAYOUTS = ("flat", "hierarchical")


def predict(profile, network: Network, method="none", bucketing="ddp",
            contention: float = 1.0, baseline_s: float | None = None,
            layout: str = "flat") -> Prediction:
    """Model one iteration of `profile` (a Profile or name) with `method` (a MethodCost or
    anything `methods.resolve` takes) in `layout` (`LAYOUTS`, module docstring).
    `baseline_s`: t_iter of `none` on this network and layout, if already known (otherwise
    computed for the speedup)."""
    check_choice(layout, "layout", LAYOUTS)
    profile = load_profile(profile)
    method = resolve(method)
    policy = bucketing_policy(bucketing)
    pred = _diloco(profile, network, method) if method.diloco is not None else \
        _simulate(profile, network, method, policy, contention, layout)
    if baseline_s is None:
        baseline_s = pred.t_iter_s if method.name == "none" else _simulate(
            profile, network, resolve("none"), policy, contention, layout).t_iter_s
    pred.speedup = baseline_s / pred.t_iter_s
    return pred


def _matrix_shapes(profile: Profile) -> tuple:
    if profile.shapes is not None:
        return profile.shapes
    return tuple(square_view(n) for n in profile.sizes)


def _stages(method: MethodCost, network: Network, profile: Profile, shapes) -> list:
    """(stream, seconds) for one bucket, and its wire bytes."""
    rounds = method.wire(shapes, profile.dtype_bytes)
    enc, dec = method.encode_s(shapes), method.decode_s(shapes)

    def reduce(nbytes):
        return network.cost("allreduce", nbytes, profile.add_time)

    if method.aggregation == "allgather":
        chain = [("codec", enc), ("comm", network.cost("allgather", rounds[0])),
                 ("codec", network.workers * dec)]
    elif method.aggregation == "blocksparse":
        blocks = method.blocks
        seconds, sent = network.block_sparse_cost(
            sum(math.prod(s) for s in shapes), profile.dtype_bytes, blocks.block_size,
            blocks.worker_density(), blocks.union(network.workers), profile.add_time)
        return [("codec", enc), ("comm", seconds), ("codec", dec)], sent
    elif method.aggregation == "powersgd":
        first, middle = (enc, method.middle_s(shapes)) if method.middle else (enc / 2, enc / 2)
        chain = [("codec", first), ("comm", reduce(rounds[0])), ("codec", middle),
                 ("comm", reduce(rounds[1])), ("codec", dec)]
    else:
        chain = [("codec", enc), ("comm", reduce(rounds[0])), ("codec", dec)]
    return chain, sum(rounds)


def _hierarchical_stages(method: MethodCost, network: Network, profile: Profile,
                         shapes) -> tuple[list, float]:
    """`_stages` of the hierarchical layout (module docstring): the slowest local rank's
    chain across nodes, its shard's tensors cut as the hook cuts them (`shard_shapes`); the
    bytes a rank sends on both tiers."""
    inside, across = network.node_tiers()
    g = network.gpus_per_node
    numel = sum(math.prod(s) for s in shapes)
    nbytes, size = numel * profile.dtype_bytes, -(-numel // g)
    tensors = [torch.Size(s) for s in shapes]
    chain, sent = max((_stages(method, across, profile,
                               tuple(tuple(p) for p in shard_shapes(tensors, k * size,
                                                                    (k + 1) * size)))
                       for k in range(g)), key=lambda c: sum(t for _, t in c[0]))
    return ([("comm", inside.cost("reducescatter", nbytes, profile.add_time)), *chain,
             ("comm", inside.cost("allgather", nbytes / g))],
            sent + 2 * (g - 1) / g * nbytes)


def _simulate(profile: Profile, network: Network, method: MethodCost, policy,
              contention: float, layout: str = "flat") -> Prediction:
    if not (isinstance(contention, (int, float)) and math.isfinite(contention)
            and contention >= 1):
        raise ValueError(f"contention={contention!r} is not allowed: it must be a number >= 1")
    buckets = policy.assign(profile)
    shapes = _matrix_shapes(profile)
    chains, wire = [], []
    for b in buckets:
        stages = _hierarchical_stages if layout == "hierarchical" else _stages
        chain, nbytes = stages(method, network, profile, [shapes[i] for i in b.params])
        chains.append(chain)
        wire.append(nbytes)
    slow = network.compute_slowdown
    start, end, released, bwd_end = _run([b.ready_s * slow for b in buckets], chains,
                                         profile.backward_s * slow, contention)
    last = max((e[-1] for e in end), default=0.0)
    t_iter = (profile.forward_s + profile.optimizer_s) * slow + max(bwd_end, last) \
        + profile.finalize_s
    comm = [[i for i, (kind, _) in enumerate(chain) if kind == "comm"] for chain in chains]
    times = {
        "bucket": list(range(len(buckets))),
        "params": [len(b.params) for b in buckets],
        "numel": [sum(profile.sizes[i] for i in b.params) for b in buckets],
        "wire_bytes": wire, "ready_s": released,
        "encode_start_s": [s[0] for s in start], "encode_end_s": [e[0] for e in end],
        "comm_start_s": [s[c[0]] for s, c in zip(start, comm)],
        "comm_end_s": [e[c[-1]] for e, c in zip(end, comm)],
        "decode_start_s": [s[-1] for s in start], "decode_end_s": [e[-1] for e in end],
        "codec_s": [sum(e - s for (kind, _), s, e in zip(chain, st, en) if kind == "codec")
                    for chain, st, en in zip(chains, start, end)],
        "codec_after_backward_s": [
            sum(max(0.0, e - max(s, bwd_end)) for (kind, _), s, e in zip(chain, st, en)
                if kind == "codec") for chain, st, en in zip(chains, start, end)]}
    return Prediction(method.name, network.workers, network.bandwidth_bps,
                      type(policy).__name__.lower(), t_iter, profile.t_iter_single, bwd_end,
                      max(0.0, last - bwd_end), profile.t_iter_single / t_iter, math.nan,
                      sum(wire), profile.nbytes, times)


def _diloco(profile: Profile, network: Network, method: MethodCost) -> Prediction:
    """One inner step of the DiLoCo variant `method.diloco`, averaged over its H steps: the
    single worker's iteration (no DDP, no compute slowdown), plus, per fragment synced once
    per H steps, what its outer exchange leaves exposed: the encode (on the training stream),
    the collective(s) and decode less the `delay` inner steps they overlap, and an outer
    optimizer step (priced as the profile's optimizer step)."""
    variant = method.diloco
    shapes = _matrix_shapes(profile)
    compute = profile.t_iter_single
    rows = {"fragment": [], "numel": [], "wire_bytes": [], "encode_s": [], "exchange_s": [],
            "exposed_s": [], "codec_per_step_s": []}
    for i, (a, b) in enumerate(bounds(list(profile.sizes), variant.fragments)):
        chain, nbytes = _stages(method, network, profile, list(shapes[a:b]))
        rest = sum(seconds for _, seconds in chain[1:])  # collectives and decode
        exposed = chain[0][1] + max(0.0, rest - variant.delay * compute) + profile.optimizer_s
        codec = (chain[0][1] + chain[-1][1]) / variant.H
        for key, value in zip(rows, (i, sum(profile.sizes[a:b]), nbytes, chain[0][1], rest,
                                     exposed, codec)):
            rows[key].append(value)
    exposed = sum(rows["exposed_s"]) / variant.H
    t_iter = compute + exposed
    return Prediction(method.name, network.workers, network.bandwidth_bps, "diloco", t_iter,
                      compute, profile.forward_s + profile.backward_s, exposed,
                      compute / t_iter, math.nan, sum(rows["wire_bytes"]) / variant.H,
                      profile.nbytes, rows)


def busy_s(pred: Prediction) -> float:
    """The seconds of a per-step method's iteration a worker computes (forward, backward,
    optimizer, finalize) or runs its codec, rather than waiting on a collective: t_iter less
    the exposed communication, plus the codec stages within it."""
    if pred.bucketing == "diloco":
        raise ValueError(f"method={pred.method!r}: a DiLoCo variant's inner steps do not wait "
                         "on collectives; busy_s prices per-step methods")
    return pred.t_iter_s - pred.exposed_comm_s + sum(pred.bucket_times["codec_after_backward_s"])


def codec_seconds(pred: Prediction) -> float:
    """Codec seconds per iteration: every codec stage (encode, PowerSGD's middle, decode; a
    DiLoCo variant's encode and decode per inner step)."""
    times = pred.bucket_times
    return sum(times["codec_per_step_s"] if "codec_per_step_s" in times else times["codec_s"])


def _run(ready, chains, backward_s, k):
    """Event simulation of the two streams and backward (see the module docstring).

    Returns per-bucket stage start and end times, the times buckets became ready, and the end
    of backward."""
    n = len(chains)
    start = [[0.0] * len(c) for c in chains]
    end = [[0.0] * len(c) for c in chains]
    released = [0.0] * n
    queue = {"codec": [], "comm": []}
    busy = {"codec": None, "comm": None}  # [bucket, stage, remaining seconds of work]
    t, work, nxt, bwd_end = 0.0, 0.0, 0, None
    while True:
        while nxt < n and ready[nxt] <= work + _EPS:
            released[nxt] = t
            heapq.heappush(queue[chains[nxt][0][0]], (t, nxt, 0))
            nxt += 1
        if bwd_end is None and work >= backward_s - _EPS:
            bwd_end = t
        for kind in busy:
            if busy[kind] is None and queue[kind]:
                _, b, s = heapq.heappop(queue[kind])
                start[b][s] = t
                busy[kind] = [b, s, chains[b][s][1]]
        running_bwd = bwd_end is None
        if not (running_bwd or busy["codec"] or busy["comm"]):
            return start, end, released, bwd_end
        shared = k if running_bwd and busy["codec"] else 1.0  # slowdown of codec and backward
        slow = {"codec": shared, "comm": 1.0}
        steps = {kind: job[2] * slow[kind] for kind, job in busy.items() if job}
        if running_bwd:
            target = min(ready[nxt] if nxt < n else math.inf, backward_s)
            steps["backward"] = (target - work) * shared
        kind_first = min(steps, key=steps.get)
        dt = max(steps[kind_first], 0.0)
        t += dt
        if running_bwd:
            work = target if kind_first == "backward" else work + dt / shared
        for kind, job in busy.items():
            if job is None:
                continue
            job[2] = 0.0 if kind == kind_first else job[2] - dt / slow[kind]
            if job[2] <= _EPS:
                b, s, _ = job
                end[b][s] = t
                busy[kind] = None
                if s + 1 < len(chains[b]):
                    heapq.heappush(queue[chains[b][s + 1][0]], (t, b, s + 1))
