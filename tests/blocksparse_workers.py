"""Multi-process cases for the block-sparse all-reduce: each rank returns its results, and the
parent test compares them with the dense all-reduce and across ranks."""
import math

import torch
import torch.distributed as dist

import gradcomp.comm
from ddp_workers import train
from gradcomp.collectives.blocksparse import block_sparse_all_reduce

# (numel, block_size, density); density is the chance that a block is non-zero on a rank.
SHAPES = [(4096, 256, 0.05), (4096, 256, 0.3), (1000, 16, 0.1), (1000, 7, 0.5),
          (1000, 1000, 1.0), (5, 256, 1.0), (333, 1, 0.2), (777, 64, 0.0), (2048, 32, 1.0),
          (1025, 256, 0.5), (64, 3, 0.9), (100_003, 256, 0.02)]
MODES = ("auto", "sparse", "dense")


def _block_sparse(numel, block_size, density, gen, dtype=torch.float32):
    """Integer-valued entries (so every summation order gives the same sum) in random blocks."""
    blocks = -(-numel // block_size)
    keep = (torch.rand(blocks, generator=gen) < density).repeat_interleave(block_size)[:numel]
    values = torch.randint(-8, 9, (numel,), generator=gen).to(dtype)
    return values * keep


def exact_cases(rank, world_size, out_dir):
    """{ranks: cases} for all ranks and, with 4, also for a group of the first 3 (saves a
    spawn); a rank outside the group has None."""
    # Every rank creates every group, in the same order.
    groups = {world_size: (None, dist.new_group(backend="gloo"))}
    if world_size == 4:
        groups[3] = (dist.new_group([0, 1, 2]), dist.new_group([0, 1, 2], backend="gloo"))
    return {size: _exact(rank, group, own) if rank < size else None
            for size, (group, own) in groups.items()}


def _exact(rank, group, own):
    """Every shape x mode, special values and layouts on `group` (asynchronous on `own`, a
    group of the same ranks): (case, result, dense reference, decision) per case."""
    gen = torch.Generator().manual_seed(1000 + rank)
    res = []
    size = dist.get_world_size(group)

    def run(label, x, **kw):
        ref = x.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(ref, group=group)
        ex = block_sparse_all_reduce(x, group=group, **kw)
        res.append({"case": label, "out": x.clone(), "ref": ref, "dense": ex.dense,
                    "union": ex.union_blocks, "own": ex.own_blocks, "sent": ex.bytes_sent})

    for numel, bs, d in SHAPES:
        for mode in MODES:
            run(f"{numel}/{bs}/{d}/{mode}", _block_sparse(numel, bs, d, gen), block_size=bs,
                mode=mode)
    # Random densities and block sizes, drawn alike on every rank (shared seed).
    shared = torch.Generator().manual_seed(7)
    for i in range(12):
        numel = int(torch.randint(1, 5000, (1,), generator=shared))
        bs = int(torch.randint(1, 300, (1,), generator=shared))
        d = float(torch.rand(1, generator=shared))
        run(f"random{i}/{numel}/{bs}/{d:.2f}", _block_sparse(numel, bs, d, gen), block_size=bs)
    # All zero: nothing travels after the bitmaps.
    run("zeros", torch.zeros(1000), block_size=64, mode="sparse")
    # All dense, every element non-zero.
    run("all-dense", torch.randint(1, 9, (3000,), generator=gen).float(), block_size=100,
        mode="sparse")
    # Only one rank holds data.
    run("one-rank", torch.ones(500) * (rank == size - 1), block_size=50, mode="sparse")
    # NaN and Inf: their blocks travel; NaN stays NaN; +Inf + -Inf is NaN as in the dense sum.
    x = torch.zeros(1000)
    x[3] = math.nan if rank == 0 else 0.0
    x[500] = math.inf if rank == 0 else -math.inf
    x[900] = math.inf
    run("nonfinite", x, block_size=64, mode="sparse")
    # Other dtypes, a multi-dimensional and a non-contiguous tensor.
    run("float64", _block_sparse(2000, 40, 0.3, gen, torch.float64), block_size=40,
        mode="sparse")
    run("int64", _block_sparse(2000, 40, 0.3, gen).long(), block_size=40, mode="sparse")
    run("matrix", _block_sparse(600, 17, 0.4, gen).view(20, 30), block_size=17, mode="sparse")
    run("transposed", _block_sparse(600, 17, 0.4, gen).view(20, 30).t(), block_size=17,
        mode="sparse")
    # Asynchronous, chained in callbacks on a group of its own.
    for d in (0.0, 0.2, 1.0):
        x = _block_sparse(3000, 32, d, gen)
        ref = x.clone()
        dist.all_reduce(ref, group=group)
        ex = block_sparse_all_reduce(x, 32, own, async_op=True, mode="sparse").wait()
        res.append({"case": f"async/{d}", "out": x.clone(), "ref": ref, "dense": ex.dense,
                    "union": ex.union_blocks, "own": ex.own_blocks, "sent": ex.bytes_sent})
    return res


HOOK_OPTIONS = {"topk": dict(ratio=0.05, error_feedback=True),
                "threshold": dict(ratio=0.05, error_feedback=True),
                "randomk": dict(ratio=0.1, error_feedback=True)}


def hook_cases(rank, world_size, out_dir):
    """The sparsifying methods through the all-gather / all-reduce path and through the
    block-sparse communicator (chained on bucket groups, and waiting on a custom group)."""
    res = {"exact": _exact(rank, None, dist.new_group(backend="gloo"))}
    every = dist.new_group(list(range(world_size)))
    for name, options in HOOK_OPTIONS.items():
        res[name] = train(rank, name, options, steps=10)
        res[f"{name}_blocksparse"] = train(rank, name, {**options, "communicator":
                                                        "blocksparse", "block_size": 16},
                                           steps=10)
        res[f"{name}_blocksparse_group"] = train(
            rank, name, {**options, "communicator": "blocksparse", "block_size": 16},
            steps=10, process_group=every)
    # A checkpoint records the communicator; loading it into another communicator fails.
    model = torch.nn.Linear(4, 1)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    saved = gradcomp.comm.register(ddp, "topk", ratio=0.5, communicator="blocksparse",
                                   block_size=8).state_dict()
    res["saved"] = {k: saved[k] for k in ("communicator", "block_size")}
    other = gradcomp.comm.register(torch.nn.parallel.DistributedDataParallel(
        torch.nn.Linear(4, 1)), "topk", ratio=0.5)
    try:
        other.load_state_dict(saved)
        res["mismatch"] = None
    except ValueError as exc:
        res["mismatch"] = str(exc)
    return res
