"""`gradcomp bench compress|collective|train|converge`: the measurements, as tidy tables."""
from pathlib import Path

from ..evaluation.benches import blocksparse as bench_blocksparse
from ..evaluation.benches import collective as bench_collective
from ..evaluation.benches import compress as bench_compress
from ..evaluation.benches import converge
from ..evaluation.benches import train as bench_train
from ..evaluation.benches import train_fsdp
from ..evaluation.common.env import is_rank_zero, under_torchrun
from ..evaluation.workloads.contract import AUTOCAST
from ..evaluation.workloads.load import BUILTIN
from ..evaluation.model.methods import parse_methods
from .common import (DEVICE, default_of, device, emit, given, number, positive_int, rate,
                     split, table)

QUICK_BLOCKSPARSE_NUMEL = 1 << 20  # --blocksparse --quick: float32 elements per worker
QUICK_TRAIN_ITERATIONS = 3  # train --quick


def add_bench(be) -> None:
    be.add_argument("what", choices=("compress", "collective", "train", "converge"))
    be.add_argument("--out", help="CSV (or .parquet) to append rows to; resumed if it exists")
    be.add_argument("--methods", help="comma-separated methods (default: all; train "
                    "--parallelism fsdp: fsdp (FSDP's own reduce-scatter) or a gradcomp.fsdp "
                    "method, default " + ",".join(train_fsdp.DEFAULT_METHODS) + "); train and "
                    "converge: each with options as name:key=value,... and DiLoCo variants "
                    "beside them, e.g. none,topk:ratio=0.01,diloco:H=50,method=int8")
    be.add_argument("--parallelism", choices=("ddp", "fsdp"), help="train: ddp (default), or "
                    "fsdp: fully_shard on each Linear and the root, gradcomp.fsdp.register "
                    "per method")
    be.add_argument("--collectives", help="collective: comma-separated, of allreduce, "
                    "allgather, broadcast, reducescatter, alltoall (FSDP's), forest (the forest "
                    "all-reduce executor; default: the first three)")
    be.add_argument("--bandwidth", type=rate, help="collective: the line rate the rows are "
                    "measured at (a NIC's, a testbed's), recorded for `gradcomp fit --tiers`")
    be.add_argument("--workers", type=positive_int, help="local worker processes (default 2; "
                    "under torchrun: its processes)")
    be.add_argument("--device", type=device, help=f"compress: the device (default {DEVICE})")
    be.add_argument("--repeats", type=positive_int, help="timed repeats / iterations")
    be.add_argument("--min-timed-seconds", type=number("min_timed_seconds", minimum=0),
                    help="train: time budget, each run times at least --repeats iterations "
                    "and at least this many seconds, counted from the warm-up's iteration time "
                    "(default 0: --repeats only)")
    be.add_argument("--quick", action="store_true", help="CI-sized sweep")
    be.add_argument("--blocksparse", action="store_true", help="collective: sweep the "
                    "block-sparse all-reduce over block densities (plot beside --out)")
    be.add_argument("--densities", help="--blocksparse: comma-separated fractions of non-zero "
                    "blocks (default 0.001 ... 1)")
    be.add_argument("--block-size", type=positive_int, help="--blocksparse: elements per block "
                    f"(default {default_of(bench_blocksparse.bench_block_sparse, 'block_size')})")
    be.add_argument("--numel", type=positive_int, help="--blocksparse: float32 elements per "
                    "worker (default 16M, --quick 1M)")
    be.add_argument("--model", help="train: the workload, a built-in ("
                    + ", ".join(BUILTIN) + "), MODULE:FACTORY or path/to/file.py:FACTORY "
                    "returning a gradcomp.Workload (default "
                    f"{default_of(bench_train.bench_train, 'model')})")
    be.add_argument("--task", help="converge: the workload, as --model (built-in tasks: "
                    "teacher, generated; digits, scikit-learn's bundled images; default "
                    f"{default_of(converge.bench_converge, 'task')})")
    be.add_argument("--batch-size", type=positive_int, help="train, converge: per worker, "
                    "passed to a factory that takes batch_size (default: the factory's)")
    be.add_argument("--bucket-cap-mb", type=number("bucket_cap_mb", minimum=0, above=True),
                    help="train: DDP's bucket cap, MB (default "
                    f"{default_of(bench_train.bench_train, 'bucket_cap_mb'):g})")
    be.add_argument("--profile-out", help="train: also measure the workload's profile (rank 0, "
                    "the others waiting) and save it here (.json), for advise --measured")
    be.add_argument("--hook-out", help="train: also measure what each method's hook computes "
                    "per bucket, at the workload's bucket sizes (every worker at once), and "
                    "append it here (.csv), for advise --measured --costs")
    be.add_argument("--autocast", choices=AUTOCAST, help="train: forward and loss under bf16 "
                    "autocast (default none)")
    be.add_argument("--metric", choices=converge.METRICS,
                    help="converge: accuracy >= target, or loss <= target (default: the "
                    "workload's metric)")
    be.add_argument("--target", type=float, help="converge: the target (default: the "
                    "workload's target)")
    be.add_argument("--seeds", type=positive_int, help="converge: seeds 0..N-1 (default "
                    f"{converge.FULL['seeds']}; --quick {converge.QUICK['seeds']})")
    be.add_argument("--max-iters", type=positive_int, help="converge: iteration budget "
                    f"(default {converge.FULL['max_iters']}; --quick "
                    f"{converge.QUICK['max_iters']})")
    be.add_argument("--json", action="store_true", help="print machine-readable JSON")
    be.set_defaults(run=_bench)


# Which measurement each option is for ("blocksparse": collective --blocksparse); the others
# take none of it, and giving it there is an error rather than a silent no-op.
# "fsdp": train --parallelism fsdp.
USED_BY = {"methods": ("compress", "train", "fsdp", "converge"),
           "collectives": ("collective",), "bandwidth": ("collective",),
           "workers": ("collective", "blocksparse", "train", "fsdp", "converge"),
           "device": ("compress",),
           "repeats": ("compress", "collective", "blocksparse", "train", "fsdp"),
           "densities": ("blocksparse",), "block_size": ("blocksparse",),
           "numel": ("blocksparse",), "model": ("train", "fsdp"),
           "batch_size": ("train", "fsdp", "converge"), "parallelism": ("train", "fsdp"),
           "bucket_cap_mb": ("train",), "autocast": ("train",), "profile_out": ("train",),
           "hook_out": ("train",), "min_timed_seconds": ("train",),
           "task": ("converge",), "metric": ("converge",),
           "target": ("converge",), "seeds": ("converge",), "max_iters": ("converge",),
           "blocksparse": ("blocksparse",)}


def _bench(args) -> None:
    """Unset --repeats, --numel, ...: the bench function's own default."""
    what = "blocksparse" if args.blocksparse and args.what == "collective" else args.what
    fsdp = args.what == "train" and args.parallelism == "fsdp"
    what = "fsdp" if fsdp else what
    labels = {"blocksparse": "collective --blocksparse", "fsdp": "train --parallelism fsdp",
              "train": "train (DDP)" if fsdp else "train"}
    for name, used in USED_BY.items():
        if getattr(args, name) not in (None, False) and what not in used:
            raise ValueError(f"--{name.replace('_', '-')} is not allowed with `bench "
                             f"{args.what}{' --parallelism fsdp' if fsdp else ''}`: it is for "
                             "bench " + ", ".join(labels.get(u, u) for u in used))
    if fsdp and under_torchrun():
        raise ValueError("--parallelism fsdp is not allowed under torchrun: bench train "
                         "--parallelism fsdp spawns its --workers processes itself")
    progress = not args.json
    if args.what == "compress":
        frame = bench_compress.bench_compress(
            split(args.methods), bench_compress.quick_sizes() if args.quick else None,
            device=args.device or DEVICE, out=args.out, progress=progress,
            **given(repeats=args.repeats))
        columns = ["method", "numel", "bytes_sent", "ratio", "rel_error", "encode_s", "decode_s"]
    elif args.what == "collective" and args.blocksparse:
        frame = bench_blocksparse.bench_block_sparse(
            densities=split(args.densities) or
            (bench_blocksparse.quick_densities() if args.quick else None),
            out=args.out, progress=progress,
            **given(world_size=args.workers, block_size=args.block_size,
                    numel=args.numel or (QUICK_BLOCKSPARSE_NUMEL if args.quick else None),
                    repeats=args.repeats))
        if args.out:
            from ..evaluation.report import plots  # matplotlib: only when drawing

            plots.block_sparse_sweep(frame, Path(args.out).with_suffix(".png"))
        columns = ["mode", "density", "union_density", "bytes_sent", "time_s", "predicted_s"]
    elif args.what == "collective":
        frame = bench_collective.bench_collective(
            sizes=bench_collective.quick_sizes() if args.quick else None,
            out=args.out, progress=progress,
            **given(world_size=args.workers, repeats=args.repeats,
                    collectives=split(args.collectives), bandwidth_bps=args.bandwidth))
        columns = ["collective", "world_size", "size_bytes", "time_s", "algbw_GBps",
                   "busbw_GBps", "matches_allreduce"]
    elif args.what == "converge":
        size = converge.QUICK if args.quick else converge.FULL
        frame = converge.bench_converge(
            _with_options(args.methods), target=args.target, seeds=args.seeds or size["seeds"],
            max_iters=args.max_iters or size["max_iters"], eval_every=size["eval_every"],
            out=args.out, progress=progress,
            **given(task=args.task, metric=args.metric, world_size=args.workers,
                    batch_size=args.batch_size))
        columns = ["method", "options", "error_feedback", "seed", "reached",
                   "iterations_to_target", "final_accuracy", "bytes_sent_per_iter"]
    elif fsdp:
        frame = train_fsdp.bench_train_fsdp(
            split(args.methods), out=args.out,
            **given(world_size=args.workers, model=args.model, batch_size=args.batch_size,
                    iterations=QUICK_TRAIN_ITERATIONS if args.quick else args.repeats))
        columns = ["method", "world_size", "t_iter_s", "bytes_sent", "bytes_original", "ratio"]
    else:
        frame = bench_train.bench_train(
            _with_options(args.methods), out=args.out, progress=progress,
            **given(world_size=args.workers, model=args.model, batch_size=args.batch_size,
                    bucket_cap_mb=args.bucket_cap_mb, autocast=args.autocast,
                    profile_out=args.profile_out, hook_out=args.hook_out,
                    min_timed_s=args.min_timed_seconds,
                    iterations=QUICK_TRAIN_ITERATIONS if args.quick else args.repeats))
        columns = ["method", "world_size", "t_iter_s", "bytes_sent", "bytes_original",
                   "auto_choices"]
    if not is_rank_zero():  # under torchrun rank 0 reports
        return
    shown = [c for c in columns if c in frame.columns]
    emit(args, frame.to_dict("records"), table(frame, shown))


def _with_options(text):
    """--methods of train and converge: (name, options) pairs; None when not given."""
    return parse_methods(text) if text else None
