"""`gradcomp testbed` (run a command in a bandwidth-limited local testbed) and `gradcomp
validate` (the performance model against DDP runs in it)."""
import argparse

from ..evaluation.testbed import nodes, ratecheck, testbed
from ..evaluation.testbed import validate_fsdp
from ..evaluation.model.timeline import LAYOUTS
from ..evaluation.testbed.regret import advice_regret, auto_regret
from ..evaluation.testbed.slowdown import slowdown_line
from ..evaluation.testbed.validate import (DEFAULT_METHODS, DEFAULT_RATES, HOOK_REPEATS,
                                           HOOK_WARMUP, TRAIN_REPEATS, summarize,
                                           validate_sweep)
from ..evaluation.testbed.validate_tiers import summarize_layouts, validate_two_tier
from ..evaluation.common.units import format_rate
from .common import (PARALLELISM, default_of, emit, exits_on, method_texts, number,
                     positive_int, rate, split, table)

FAILURES = (testbed.TestbedUnavailable, testbed.JobFailed, TimeoutError)  # end the command


def add_testbed(tb) -> None:
    tb.add_argument("--workers", type=positive_int,
                    default=default_of(testbed.run_command, "workers"), help="namespaces (ranks)")
    tb.add_argument("--nodes", type=positive_int, help="two tiers: this many namespaces "
                    "(nodes) joined by the shaped links, each holding --gpus-per-node ranks "
                    "that talk over its loopback (no rate limit); instead of --workers")
    tb.add_argument("--gpus-per-node", type=positive_int, help="ranks per node (with --nodes; "
                    f"default {default_of(nodes.run_on_nodes, 'gpus_per_node')})")
    tb.add_argument("--per-node", action="store_true", help="with --nodes: start the command "
                    "once per node (a launcher: torchrun reads NODE_RANK, NNODES, the master "
                    "from PET_* variables) instead of once per rank")
    tb.add_argument("--rate", type=rate, default=rate(default_of(testbed.run_command, "rate")),
                    help="every link's rate: 100mbit, 1gbit, 2.5gbit, ...")
    tb.add_argument("--rates", help="comma-separated rate per worker's link (heterogeneous)")
    tb.add_argument("--topology", choices=testbed.TOPOLOGIES,
                    default=default_of(testbed.run_command, "topology"),
                    help="a bridge joining every namespace, or one link between 2")
    tb.add_argument("--threads", type=positive_int,
                    default=default_of(testbed.run_command, "threads"),
                    help="OMP_NUM_THREADS of each worker")
    tb.add_argument("--timeout", type=float, help="seconds before the job is stopped")
    tb.add_argument("--cleanup", action="store_true", help="remove what killed runs left")
    tb.add_argument("--check", action="store_true", help="time an all-reduce of 4 MiB at "
                    "--rate against what the rate implies (with --nodes: one inside a node "
                    "and one across the nodes)")
    tb.add_argument("--json", action="store_true", help="print machine-readable JSON")
    tb.add_argument("command", nargs=argparse.REMAINDER,
                    help="-- COMMAND... run in each namespace with RANK, WORLD_SIZE, "
                    "MASTER_ADDR, MASTER_PORT, GLOO_SOCKET_IFNAME set")
    tb.set_defaults(run=_testbed)


def add_validate(va) -> None:
    va.add_argument("--parallelism", choices=PARALLELISM, default="ddp",
                    help="ddp (default: the DDP timeline) or fsdp (the FSDP timeline against "
                    "FSDP2 training, fully_shard on each Linear and the root)")
    va.add_argument("--rates", default=",".join(DEFAULT_RATES), help="comma-separated rates")
    va.add_argument("--methods", help="comma-separated methods (ddp: default "
                    f"{','.join(DEFAULT_METHODS)}, 'ddp' being DDP's own all-reduce; fsdp: "
                    f"default {','.join(validate_fsdp.DEFAULT_METHODS)}, of "
                    f"{', '.join(validate_fsdp.METHODS)}, 'fsdp' being FSDP's own "
                    "reduce-scatter)")
    va.add_argument("--model", default=default_of(validate_sweep, "model"),
                    help="the workload: a built-in (mlp, tiny, cnn, gpt, ...), MODULE:FACTORY "
                    "or path/to/file.py:FACTORY returning a gradcomp.Workload")
    va.add_argument("--iterations", type=positive_int,
                    help="timed iterations per method and rate (default "
                    f"{default_of(validate_sweep, 'iterations')}, with --parallelism fsdp "
                    f"{default_of(validate_fsdp.validate_fsdp_sweep, 'iterations')})")
    va.add_argument("--hook-repeats", type=positive_int,
                    help="timed repeats of each hook-path cost (with --parallelism fsdp: codec "
                    f"cost), each after as many untimed ones, at most {HOOK_WARMUP} (fsdp: "
                    f"{validate_fsdp.CODEC_WARMUP}) (default {HOOK_REPEATS}, with --parallelism "
                    f"fsdp {validate_fsdp.CODEC_REPEATS}); fewer: a quicker, noisier "
                    "validation")
    va.add_argument("--train-repeats", type=positive_int,
                    help="training runs per method and rate, measured interleaved (every "
                    "method once per pass, each pass in another order); the least disturbed "
                    f"(least median iteration time) is used, every run kept (default "
                    f"{TRAIN_REPEATS}; not with --parallelism fsdp); re-predicting a folder "
                    "measured with fewer measures the missing runs")
    va.add_argument("--min-timed-seconds", type=number("min_timed_seconds", minimum=0),
                    help="time budget: each training run times at least --iterations "
                    "iterations and at least this many seconds (the iteration time estimated "
                    "from its warm-up; auto's after its exploration); the train tables' "
                    "iterations column says how many were timed (default "
                    f"{default_of(validate_sweep, 'min_timed_s'):g}; 0: --iterations only; not "
                    "with --parallelism fsdp)")
    va.add_argument("--nodes", type=positive_int, help="two tiers: this many nodes of "
                    "--gpus-per-node ranks in the testbed, each method measured in both "
                    "layouts (flat, hierarchical) and predicted by the two-tier model")
    va.add_argument("--gpus-per-node", type=positive_int, help="ranks per node (with --nodes; "
                    f"default {default_of(validate_two_tier, 'gpus_per_node')})")
    va.add_argument("--layouts", default=",".join(LAYOUTS), help="with --nodes: comma-"
                    "separated layouts of " + ", ".join(LAYOUTS) + " (hierarchical: the hook "
                    "that compresses only between nodes)")
    va.add_argument("--out", help="results folder (default: results/validate-<timestamp>); "
                    "an existing one is resumed")
    va.add_argument("--json", action="store_true", help="print machine-readable JSON")
    va.set_defaults(run=_validate)


def _testbed(args) -> None:
    with exits_on("testbed", *FAILURES):
        if args.cleanup:
            removed = testbed.cleanup_stale()
            emit(args, {"removed": removed}, f"removed {len(removed)} stale testbed run(s)"
                 + "".join(f"\n  {run}" for run in removed))
            return
        if args.nodes is None and (args.gpus_per_node is not None or args.per_node):
            raise ValueError("--gpus-per-node and --per-node are not allowed without --nodes: "
                             "give --nodes N for a two-tier testbed")
        two_tier = dict(nodes=args.nodes, gpus_per_node=args.gpus_per_node or default_of(
            nodes.run_on_nodes, "gpus_per_node"))
        if args.check and args.nodes is not None:
            row = ratecheck.tier_check(**two_tier, rate=args.rate)
            emit(args, row, tier_check_text(row))
            return
        if args.check:
            row = ratecheck.rate_check(args.rate)
            emit(args, row, f"all-reduce of {row['nbytes']:,} bytes at {args.rate:g} bit/s: "
                 f"{row['measured_s'] * 1e3:.1f} ms measured, {row['expected_s'] * 1e3:.1f} ms "
                 f"expected from the rate ({row['rel_error']:+.1%})")
            return
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if args.nodes is not None:
            results = nodes.run_on_nodes(command, **two_tier, rate=args.rate,
                                         rates=split(args.rates), topology=args.topology,
                                         threads=args.threads, timeout=args.timeout,
                                         per_node=args.per_node)
        else:
            results = testbed.run_command(command, args.workers, args.rate, split(args.rates),
                                          args.topology, args.threads, args.timeout)
        label = "node" if args.per_node else "rank"
        emit(args, [r.__dict__ for r in results],
             "\n".join(f"[{label} {r.rank}] {line}" for r in results
                       for line in (r.stdout + r.stderr).splitlines()))


def tier_check_text(row: dict) -> str:
    """`ratecheck.tier_check`'s result in two lines."""
    intra, inter = row["intra"], row["inter"]
    return (f"all-reduce of {row['nbytes']:,} bytes inside a node ({intra['workers']} ranks, "
            f"loopback): {intra['measured_s'] * 1e3:.1f} ms; the link rate would take "
            f"{intra['at_link_rate_s'] * 1e3:.1f} ms\n"
            f"all-reduce across {inter['workers']} nodes at {format_rate(row['rate_bps'])}: "
            f"{inter['measured_s'] * 1e3:.1f} ms measured, {inter['at_link_rate_s'] * 1e3:.1f}"
            f" ms expected from the rate ({inter['rel_error']:+.1%})")


def _validate(args) -> None:
    import time

    out = args.out or f"results/validate-{time.strftime('%Y%m%d-%H%M%S')}"
    fsdp = args.parallelism == "fsdp"
    methods = ((method_texts(args.methods) or []) if args.methods is not None else
               validate_fsdp.DEFAULT_METHODS if fsdp else DEFAULT_METHODS)
    sweep = validate_fsdp.validate_fsdp_sweep if fsdp else validate_sweep
    options = {k: v for k, v in (("iterations", args.iterations),
                                 ("hook_repeats", args.hook_repeats),
                                 ("train_repeats", args.train_repeats),
                                 ("min_timed_s", args.min_timed_seconds)) if v is not None}
    for option, value in (("--train-repeats", args.train_repeats),
                          ("--min-timed-seconds", args.min_timed_seconds)):
        if fsdp and value is not None:
            raise ValueError(f"{option} is not allowed with --parallelism fsdp: FSDP's "
                             "validation measures each run once, --iterations long")
    if args.nodes is not None:
        if fsdp:
            raise ValueError("--nodes is not allowed with --parallelism fsdp: two-tier "
                             "validation runs DDP")
        sweep = validate_two_tier
        options.update(nodes=args.nodes, layouts=split(args.layouts),
                       gpus_per_node=args.gpus_per_node
                       or default_of(validate_two_tier, "gpus_per_node"))
    elif args.gpus_per_node is not None:
        raise ValueError("--gpus-per-node is not allowed without --nodes: give --nodes N")
    with exits_on("validate", *FAILURES):
        rows = sweep(out, args.rates.split(","), methods, args.model, progress=not args.json,
                     **options)
    summary = summarize_layouts(rows) if args.nodes is not None else summarize(rows)
    regret = {k: v.to_dict("records") for k, v in
              (("regret", advice_regret(rows)), ("auto_regret", auto_regret(rows)))}
    columns = ["rate", "layout", "method", "measured", "predicted", "rel_error"]
    emit(args, {"results": out, "rows": rows.to_dict("records"),
                "summary": summary.to_dict("records"), **regret},
         table(rows, [c for c in columns if c in rows]) + "\n\n"
         + table(summary, summary.columns)
         + ("\n\n" + slowdown_line(rows) if "compute_slowdown" in rows else "")
         + f"\n\nresults in {out}")
