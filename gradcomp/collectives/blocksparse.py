"""Block-sparse all-reduce, after OmniReduce (Fei et al., SIGCOMM 2021): only blocks that some
rank holds non-zero travel.

    block_sparse_all_reduce(tensor, block_size=256)   # sums across ranks, in place

The flat tensor is cut into blocks of `block_size` elements (the last may be shorter), and
three rounds follow:

1. bitmaps: every rank marks its non-zero blocks (NaN and +-Inf count as non-zero, so NaN
   stays NaN) with one bit per block, and one all-gather gives every rank every bitmap;
2. reduce-scatter: block j belongs to rank ``j % p`` (round-robin, so that clustered non-zero
   blocks still spread over all owners); every rank sends the non-zero blocks it holds of each
   other owner's shard to that owner, in one `all_to_all_single` with uneven splits, and each
   owner sums them with its own, in rank order, into its shard of the union of non-zero blocks;
3. all-gather: every owner sends its summed shard to every other rank (again one
   `all_to_all_single`), and every rank writes the union back; blocks that no rank holds are
   zero already.

Collectives: `all_gather_single` (formerly `all_gather_into_tensor`) for the bitmaps and
`all_to_all_single` for the blocks, which both gloo (CPU tensors) and NCCL support in torch
2.13. Round 3 is an all-to-all rather than an all-gather because shards differ in size (gloo
has no uneven all-gather) and because gloo's all-gather was 3-4x slower than its all-to-all on
the same bytes here (2 local ranks, 32 MiB each). The result equals the dense all-reduce up to
the order of the additions.

Dense fallback: after round 1 every rank knows the same bitmaps, so every rank takes the same
decision: with ``mode="auto"`` rounds 2 and 3 give way to one dense ring all-reduce unless the
alpha-beta model below predicts them faster. All ranks must pass the same `mode`,
`latency_s` and `bandwidth_bps`, and tensors of the same size and dtype, as for any
all-reduce.

Cost model (p ranks, latency alpha, bandwidth B bytes/s): round 1 costs
``(p-1) alpha + (p-1) M / B`` for bitmaps of M bytes; round 2 ``(p-1) alpha + X / B``, X the
most bytes one rank sends or receives (upstream: its own non-zero blocks outside its shard;
downstream at the owner: the other ranks' blocks of its shard); round 3 ``(p-1) alpha + (p-1)
U / B``, U the largest owner's shard of the union. Dense ring all-reduce of S bytes: ``2(p-1)
alpha + 2(p-1)/p S / B``. The traffic expected at given densities, and the local work, are in
the performance model (`gradcomp.evaluation.model.blocksparse`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..checks import check_int

MODES = ("auto", "sparse", "dense")
DEFAULT_BLOCK_SIZE = 256  # OmniReduce's default
# The defaults of `gradcomp whatif` (10 Gbit/s, no latency): with no latency the choice only
# compares bytes, whatever the bandwidth. Pass measured values (`gradcomp bench collective`).
DEFAULT_LATENCY_S = 0.0
DEFAULT_BANDWIDTH_BPS = 10e9


@dataclass(frozen=True)
class Traffic:
    """Bytes of the three rounds: one rank's bitmap, the most bytes one rank sends or receives
    in the reduce-scatter, and the largest owner's shard in the all-gather."""

    bitmap_bytes: float
    exchange_bytes: float
    shard_bytes: float


def dense_seconds(workers: int, nbytes: float, latency_s: float, bytes_per_s: float) -> float:
    """Ring all-reduce of `nbytes` per rank (no reduction cost)."""
    p = workers
    if p == 1 or nbytes <= 0:
        return 0.0
    return 2 * (p - 1) * latency_s + 2 * (p - 1) / p * nbytes / bytes_per_s


def sparse_seconds(workers: int, traffic: Traffic, latency_s: float, bytes_per_s: float,
                   bitmaps: bool = True) -> float:
    """Rounds 2 and 3 of `traffic` (none when the shard is empty), plus round 1 if `bitmaps`."""
    p = workers
    if p == 1:
        return 0.0
    t = 0.0
    if bitmaps:
        t += (p - 1) * latency_s + (p - 1) * traffic.bitmap_bytes / bytes_per_s
    if traffic.shard_bytes > 0:
        t += 2 * (p - 1) * latency_s + traffic.exchange_bytes / bytes_per_s
        t += (p - 1) * traffic.shard_bytes / bytes_per_s
    return t


@dataclass
class Exchange:
    """What one block-sparse all-reduce did (`tensor` holds the sum once it is done)."""

    tensor: torch.Tensor
    workers: int
    block_size: int
    blocks: int
    own_blocks: int = 0  # this rank's non-zero blocks
    union_blocks: int = 0  # blocks non-zero on some rank
    dense: bool = False  # the dense fallback was taken
    bytes_sent: int = 0  # by this rank: bitmap, blocks sent to other owners, its shard
    predicted_sparse_s: float = math.nan  # rounds 2 and 3
    predicted_dense_s: float = math.nan


def block_sparse_all_reduce(tensor: torch.Tensor, block_size: int = DEFAULT_BLOCK_SIZE,
                            group=None, *, async_op: bool = False, mode: str = "auto",
                            latency_s: float = DEFAULT_LATENCY_S,
                            bandwidth_bps: float = DEFAULT_BANDWIDTH_BPS):
    """Sum `tensor` across the ranks of `group` in place, sending only non-zero blocks
    (module docstring). Returns the `Exchange`, or with `async_op` a Future of it.

    mode: "auto" (sparse unless the cost model, with `latency_s` and `bandwidth_bps` in
    bit/s, prefers the dense all-reduce), "sparse" or "dense" (forced).
    async_op on gloo with CPU tensors chains the rounds in the futures' callbacks: issue no
    other collective on `group` until the future completes (give it a group of its own, e.g.
    `dist.new_group()`). Elsewhere (NCCL, CUDA tensors) the rounds are issued in this call,
    each once the previous one has completed, and the future is already complete (the
    bitmaps are read on the host in any case). Tested on gloo; NCCL supports the same
    collectives but was not available to test.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    check_int(block_size, "block_size", 1)
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not allowed: choose one of "
                         f"{', '.join(map(repr, MODES))}")
    if not (isinstance(latency_s, (int, float)) and math.isfinite(latency_s)
            and latency_s >= 0):
        raise ValueError(f"latency_s={latency_s!r} is not allowed: it must be a finite number "
                         ">= 0")
    if not (isinstance(bandwidth_bps, (int, float)) and math.isfinite(bandwidth_bps)
            and bandwidth_bps > 0):
        raise ValueError(f"bandwidth_bps={bandwidth_bps!r} is not allowed: it must be a "
                         "finite number > 0 (bit/s)")
    group = group if group is not None else dist.group.WORLD
    rounds = _rounds(tensor, block_size, group, mode, float(latency_s), bandwidth_bps / 8)
    chain = (async_op and tensor.device.type == "cpu"
             and dist.get_backend(group) == "gloo")
    if chain:
        return _chained(rounds)
    exchange = _waiting(rounds)
    if not async_op:
        return exchange
    done = torch.futures.Future()
    done.set_result(exchange)
    return done


# torch 2.13 renamed all_gather_into_tensor (the old name warns).
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _waiting(rounds) -> Exchange:
    """Run the rounds, waiting for each collective."""
    try:
        fut = next(rounds)
        while True:
            fut.wait()  # raises if the collective failed
            fut = rounds.send(None)
    except StopIteration as stop:
        return stop.value


def _chained(rounds) -> torch.futures.Future:
    """Run the rounds, each issued from the previous collective's callback."""
    done = torch.futures.Future()

    def advance(fut):
        try:
            if fut is not None:
                fut.value()  # raises if the collective failed
            nxt = rounds.send(None)
        except StopIteration as stop:
            done.set_result(stop.value)
            return
        except Exception as exc:  # noqa: BLE001 - handed on through the future
            done.set_exception(exc)
            return
        nxt.then(advance)

    advance(None)
    return done


def _pack_bits(flags: torch.Tensor) -> torch.Tensor:
    """Bool flags -> uint8, eight flags per byte (least significant bit first)."""
    pad = (-flags.numel()) % 8
    bits = torch.nn.functional.pad(flags.to(torch.uint8), (0, pad)).view(-1, 8)
    weights = torch.tensor([1 << i for i in range(8)], dtype=torch.uint8, device=flags.device)
    return (bits * weights).sum(1, dtype=torch.uint8)


def _unpack_bits(packed: torch.Tensor, count: int) -> torch.Tensor:
    """The inverse of `_pack_bits` along the last dimension: (..., bytes) -> (..., count)."""
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    bits = (packed.unsqueeze(-1) >> shifts) & 1
    return bits.flatten(-2)[..., :count].bool()


@dataclass
class _Plan:
    """What every rank derives alike from the gathered bitmaps."""

    bits: torch.Tensor  # (p, blocks) bool, CPU
    counts: torch.Tensor  # (p, p): blocks rank i holds of owner o's shard
    shards: list  # per owner: its union blocks, ascending
    traffic: Traffic


def _plan(bits: torch.Tensor, block_bytes: int, bitmap_bytes: int) -> _Plan:
    p, blocks = bits.shape
    owner = torch.arange(blocks) % p
    counts = torch.stack([torch.bincount(owner[b], minlength=p) for b in bits])
    union = bits.any(0)
    shards = [(union & (owner == o)).nonzero().squeeze(1) for o in range(p)]
    own = counts.diagonal()
    sent = counts.sum(1) - own
    received = counts.sum(0) - own
    exchange = int(torch.maximum(sent, received).max()) * block_bytes
    shard = max(len(s) for s in shards) * block_bytes
    return _Plan(bits, counts, shards, Traffic(bitmap_bytes, exchange, shard))


def _rounds(tensor: torch.Tensor, bs: int, group, mode: str, latency_s: float,
            bytes_per_s: float):
    """The rounds as a generator: it yields each collective's future and returns the
    Exchange (module docstring)."""
    p = dist.get_world_size(group)
    me = dist.get_rank(group)
    n = tensor.numel()
    blocks = -(-n // bs)
    report = Exchange(tensor, p, bs, blocks)
    if p == 1 or n == 0:
        return report
    device, esize = tensor.device, tensor.element_size()
    flat = tensor.reshape(-1)  # a copy only for a non-contiguous tensor
    if n % bs:
        padded = torch.zeros(blocks * bs, dtype=tensor.dtype, device=device)
        padded[:n] = flat
    else:
        padded = flat
    rows = padded.view(blocks, bs)
    # Two passes without a temporary (8x faster than (rows != 0).any(1) on a CPU); NaN
    # propagates through amax, so NaN blocks travel.
    flags = (rows.amax(1) != 0) | (rows.amin(1) != 0)
    packed = _pack_bits(flags)
    gathered = torch.empty(p * packed.numel(), dtype=torch.uint8, device=device)
    yield _all_gather(gathered, packed, group=group, async_op=True).get_future()

    plan = _plan(_unpack_bits(gathered.view(p, -1).cpu(), blocks), bs * esize, packed.numel())
    report.own_blocks = int(plan.bits[me].sum())
    report.union_blocks = sum(len(s) for s in plan.shards)
    report.predicted_sparse_s = sparse_seconds(p, plan.traffic, latency_s, bytes_per_s,
                                               bitmaps=False)
    report.predicted_dense_s = dense_seconds(p, n * esize, latency_s, bytes_per_s)
    report.dense = mode == "dense" or (
        mode == "auto" and report.predicted_sparse_s >= report.predicted_dense_s)
    if report.dense:
        report.bytes_sent = packed.numel() + n * esize
        yield dist.all_reduce(flat, group=group, async_op=True).get_future()
        return _finish(report, flat, None)
    report.bytes_sent = packed.numel()
    if report.union_blocks == 0:  # every rank holds only zeros
        flat.zero_()
        return _finish(report, flat, None)

    # Round 2: my non-zero blocks of the other owners' shards, grouped by owner, to them.
    owner = torch.arange(blocks) % p
    send_counts, recv_counts = plan.counts[me].clone(), plan.counts[:, me].clone()
    send_counts[me] = recv_counts[me] = 0
    mine = plan.bits[me].nonzero().squeeze(1)
    mine = mine[owner[mine] != me]
    mine = mine[torch.argsort(owner[mine] * blocks + mine)]
    send = rows.index_select(0, mine.to(device)).view(-1)
    recv = torch.empty(int(recv_counts.sum()) * bs, dtype=tensor.dtype, device=device)
    report.bytes_sent += send.numel() * esize
    yield dist.all_to_all_single(recv, send, (recv_counts * bs).tolist(),
                                 (send_counts * bs).tolist(), group=group,
                                 async_op=True).get_future()

    # My shard of the union: the sum, in rank order, of every rank's blocks of it.
    shard = plan.shards[me]
    acc = torch.zeros(len(shard), bs, dtype=tensor.dtype, device=device)
    in_shard = owner == me
    offset = 0
    for source in range(p):
        held = (plan.bits[source] & in_shard).nonzero().squeeze(1)
        if held.numel() == 0:
            continue
        if source == me:
            part = rows.index_select(0, held.to(device))
        else:
            part = recv[offset : offset + held.numel() * bs].view(-1, bs)
            offset += held.numel() * bs
        acc.index_add_(0, torch.searchsorted(shard, held).to(device), part)
    report.bytes_sent += acc.numel() * esize

    # Round 3: my summed shard to every other rank, theirs to me.
    others = [o for o in range(p) if o != me]
    out_splits = [0 if o == me else len(plan.shards[o]) * bs for o in range(p)]
    in_splits = [0 if o == me else acc.numel() for o in range(p)]
    gathered = torch.empty(sum(out_splits), dtype=tensor.dtype, device=device)
    yield dist.all_to_all_single(gathered, acc.view(1, -1).expand(p - 1, -1).reshape(-1),
                                 out_splits, in_splits, group=group,
                                 async_op=True).get_future()

    # Blocks outside the union are zero on every rank, this one included: only the union
    # is written.
    rows.index_copy_(0, torch.cat([plan.shards[o] for o in others]).to(device),
                     gathered.view(-1, bs))
    rows.index_copy_(0, shard.to(device), acc)
    return _finish(report, flat, padded)


def _finish(report: Exchange, flat: torch.Tensor, padded: torch.Tensor | None) -> Exchange:
    """Write the result back into the caller's tensor where the work used a copy."""
    if padded is not None and padded.data_ptr() != flat.data_ptr():
        flat.copy_(padded[: flat.numel()])
    if not report.tensor.is_contiguous():  # then `flat` was reshape's copy
        report.tensor.copy_(flat.view(report.tensor.shape))
    return report
