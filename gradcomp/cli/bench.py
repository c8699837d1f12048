"""`gradcomp bench compress|collective|train|converge`: the measurements, as tidy tables."""
from pathlib import Path

from ..evaluation.benches import blocksparse as bench_blocksparse
from ..evaluation.benches import collective as bench_collective
from ..evaluation.benches import compress as bench_compress
from ..evaluation.benches import converge
from ..evaluation.benches import train as bench_train
from ..evaluation.benches.tasks import TASKS
from .common import DEVICE, default_of, emit, given, positive_int, split, table

QUICK_BLOCKSPARSE_NUMEL = 1 << 20  # --blocksparse --quick: float32 elements per worker
QUICK_TRAIN_ITERATIONS = 3  # train --quick


def add_bench(sub) -> None:
    be = sub.add_parser("bench", help="measure: compress (encode/decode cost), collective "
                        "(all-reduce/all-gather/broadcast), train (DDP iterations per hook), "
                        "converge (iterations to a target accuracy, with and without error "
                        "feedback)")
    be.add_argument("what", choices=("compress", "collective", "train", "converge"))
    be.add_argument("--out", help="CSV (or .parquet) to append rows to; resumed if it exists")
    be.add_argument("--methods", help="comma-separated methods (default: all)")
    be.add_argument("--collectives", help="collective: comma-separated, of allreduce, "
                    "allgather, broadcast, forest (the forest all-reduce executor; default: "
                    "the first three)")
    be.add_argument("--workers", type=positive_int,
                    default=default_of(bench_collective.bench_collective, "world_size"),
                    help="local worker processes")
    be.add_argument("--device", default=DEVICE)
    be.add_argument("--repeats", type=positive_int, help="timed repeats / iterations")
    be.add_argument("--quick", action="store_true", help="CI-sized sweep")
    be.add_argument("--blocksparse", action="store_true", help="collective: sweep the "
                    "block-sparse all-reduce over block densities (plot beside --out)")
    be.add_argument("--densities", help="--blocksparse: comma-separated fractions of non-zero "
                    "blocks (default 0.001 ... 1)")
    be.add_argument("--block-size", type=positive_int,
                    default=default_of(bench_blocksparse.bench_block_sparse, "block_size"),
                    help="--blocksparse: elements per block")
    be.add_argument("--numel", type=positive_int, help="--blocksparse: float32 elements per "
                    "worker (default 16M, --quick 1M)")
    be.add_argument("--task", choices=TASKS, default=default_of(converge.bench_converge, "task"),
                    help="converge: the built-in task (teacher: generated; digits: "
                    "scikit-learn's bundled images)")
    be.add_argument("--metric", choices=converge.METRICS,
                    default=default_of(converge.bench_converge, "metric"),
                    help="converge: test accuracy >= target, or test loss <= target")
    be.add_argument("--target", type=float, help="converge: the target (default: the "
                    "task's accuracy target)")
    be.add_argument("--seeds", type=positive_int, help="converge: seeds 0..N-1 (default "
                    f"{converge.FULL['seeds']}; --quick {converge.QUICK['seeds']})")
    be.add_argument("--max-iters", type=positive_int, help="converge: iteration budget "
                    f"(default {converge.FULL['max_iters']}; --quick "
                    f"{converge.QUICK['max_iters']})")
    be.add_argument("--json", action="store_true", help="print machine-readable JSON")
    be.set_defaults(run=_bench)


def _bench(args) -> None:
    """Unset --repeats, --numel, ...: the bench function's own default."""
    progress = not args.json
    if args.what == "compress":
        frame = bench_compress.bench_compress(
            split(args.methods), bench_compress.quick_sizes() if args.quick else None,
            device=args.device, out=args.out, progress=progress, **given(repeats=args.repeats))
        columns = ["method", "numel", "bytes_sent", "ratio", "rel_error", "encode_s", "decode_s"]
    elif args.what == "collective" and args.blocksparse:
        frame = bench_blocksparse.bench_block_sparse(
            args.workers, densities=split(args.densities) or
            (bench_blocksparse.quick_densities() if args.quick else None),
            block_size=args.block_size, out=args.out, progress=progress,
            **given(numel=args.numel or (QUICK_BLOCKSPARSE_NUMEL if args.quick else None),
                    repeats=args.repeats))
        if args.out:
            from ..evaluation.report import plots  # matplotlib: only when drawing

            plots.block_sparse_sweep(frame, Path(args.out).with_suffix(".png"))
        columns = ["mode", "density", "union_density", "bytes_sent", "time_s", "predicted_s"]
    elif args.what == "collective":
        frame = bench_collective.bench_collective(
            args.workers, sizes=bench_collective.quick_sizes() if args.quick else None,
            out=args.out, progress=progress,
            **given(repeats=args.repeats, collectives=split(args.collectives)))
        columns = ["collective", "world_size", "size_bytes", "time_s", "algbw_GBps",
                   "busbw_GBps", "matches_allreduce"]
    elif args.what == "converge":
        size = converge.QUICK if args.quick else converge.FULL
        frame = converge.bench_converge(
            split(args.methods), task=args.task, target=args.target, metric=args.metric,
            seeds=args.seeds or size["seeds"], max_iters=args.max_iters or size["max_iters"],
            eval_every=size["eval_every"], world_size=args.workers, out=args.out,
            progress=progress)
        columns = ["method", "options", "error_feedback", "seed", "reached",
                   "iterations_to_target", "final_accuracy", "bytes_sent_per_iter"]
    else:
        frame = bench_train.bench_train(
            split(args.methods), args.workers, out=args.out, progress=progress,
            **given(iterations=QUICK_TRAIN_ITERATIONS if args.quick else args.repeats))
        columns = ["method", "world_size", "t_iter_s", "bytes_sent", "bytes_original"]
    shown = [c for c in columns if c in frame.columns]
    emit(args, frame.to_dict("records"), table(frame, shown))
