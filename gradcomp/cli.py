"""The `gradcomp` command: it parses options and calls the library, nothing more."""
import argparse
import json
import sys

import torch


def _compressors(args) -> None:
    from tabulate import tabulate
    from tqdm import tqdm

    from .evaluation.benches.compress import default_methods, measure_codec

    rows = []
    for name, options in tqdm(default_methods(), desc="compressing", disable=args.json,
                              file=sys.stderr):
        rows.append(measure_codec(name, options, args.numel, args.device, repeats=args.repeats))
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    table = [[r["method"], _short(json.loads(r["options"])), r["aggregation"], f"{r['bytes_sent']:,}",
              f"{r['ratio']:.1f}x", f"{r['rel_error']:.3g}", f"{r['encode_s'] * 1e3:.3g}",
              f"{r['decode_s'] * 1e3:.3g}"] for r in rows]
    print(f"{args.numel:,} float32 values ({args.numel * 4:,} bytes) on {args.device}, "
          f"median of {args.repeats}:")
    print(tabulate(table, headers=["method", "options", "aggregation", "bytes on wire",
                                   "ratio", "rel. error", "encode ms", "decode ms"]))


def _emit(args, payload, text: str) -> None:
    """Print `payload` as JSON with --json, else the human-readable `text`."""
    if args.json:
        print(json.dumps(payload, indent=1, default=float))
    else:
        print(text)


def _table(frame, columns) -> str:
    from tabulate import tabulate

    return tabulate(frame[list(columns)], headers="keys", showindex=False, floatfmt=".4g")


def _whatif(args) -> None:
    from .evaluation.analyses import whatif
    from .evaluation.common.units import format_rate

    on = dict(topology=args.topology, algorithm=args.algorithm) if args.topology else {}
    workers, latency = _network_defaults(args)
    common = dict(bucketing=args.bucketing, latency_s=latency)
    if args.sweep and on:
        raise ValueError("--sweep is not allowed with --topology: the sweep varies one "
                         "bandwidth for all links; scale the topology file instead")
    if args.sweep:
        frame = whatif.sweep(args.profile, workers=workers, methods=[args.method],
                             ratios=[args.compression] if args.compression else (), **common)
        _emit(args, frame.to_dict("records"),
              _table(frame, ["workers", "bandwidth_bps", "method", "ratio", "t_iter_s", "sf",
                             "speedup"]))
        return
    pred = whatif.scenario(args.profile, workers, args.bandwidth, args.method,
                           ratio=args.compression, **common, **on)
    need = whatif.required_compression(args.profile, workers, args.bandwidth,
                                       target_sf=args.target_sf, **common, **on)
    row = {**pred.as_row(), "required_compression": need.ratio,
           "required_compression_reason": need.reason, "target_sf": args.target_sf}
    lines = [f"{args.profile} on {pred.workers} workers at {format_rate(args.bandwidth)} "
             f"({args.bucketing} bucketing), method {pred.method}"
             + (f", topology {args.topology}, {args.algorithm} all-reduce" if on else "") + ":",
             f"  iteration {pred.t_iter_s * 1e3:.1f} ms, scaling factor {pred.sf:.3f}, "
             f"speedup vs none {pred.speedup:.2f}x",
             f"  compression needed for SF {args.target_sf}: "
             + (f"{need.ratio:.3g}x" if need.ratio != float("inf") else f"unreachable ({need.reason})")]
    if args.method != "none" and not on:
        even = whatif.break_even_bandwidth(args.profile, workers, args.method, **common)
        row["break_even_bandwidth_bps"] = even
        lines.append(f"  {args.method} beats none below {format_rate(even)}"
                     if 0 < even < float("inf") else
                     f"  {args.method} {'always' if even else 'never'} beats none")
    _emit(args, row, "\n".join(lines))


def _advise(args) -> None:
    import pandas as pd

    from .evaluation.analyses.advise import advise, verdict
    from .evaluation.analyses.time_to_accuracy import TTA_COLUMNS

    costs = pd.read_csv(args.costs) if args.costs else None
    methods = args.methods.split(",") if args.methods else None
    convergence = pd.read_csv(args.convergence) if args.convergence else None
    workers, latency = _network_defaults(args)
    table = advise(args.profile, workers, args.bandwidth, methods=methods, costs=costs,
                   bucketing=args.bucketing, latency_s=latency, convergence=convergence,
                   task=args.task, target=args.target, topology=args.topology,
                   algorithms=args.algorithms.split(",") if args.algorithms else None)
    answer = verdict(table)
    columns = TTA_COLUMNS if convergence is not None else [
        "rank", "method", *(["algorithm"] if args.topology else []), "t_iter_s", "sf",
        "speedup", "compression", "codec_s", "costs"]
    _emit(args, {"verdict": answer, "ranking": table.to_dict("records")},
          _table(table, columns) + "\n\n" + answer)


def _network_defaults(args) -> tuple:
    """whatif / advise: (workers, latency); unset, they are 8 and 0 s, or with --topology
    None, so that a topology file's own values apply."""
    if args.topology:
        return args.workers, args.latency
    return (8 if args.workers is None else args.workers,
            0.0 if args.latency is None else args.latency)


def _profile(args) -> None:
    import importlib

    from .evaluation import measure_profile, save_profile

    module_name, _, factory = args.factory.partition(":")
    if not factory:
        raise SystemExit(f"gradcomp profile: expected MODULE:FACTORY, got {args.factory!r}")
    model = getattr(importlib.import_module(module_name), factory)().to(args.device)
    shape = [int(d) for d in args.input_shape.split(",")]
    inputs = torch.randn(shape, device=args.device)
    profile = measure_profile(model, inputs, repeats=args.repeats, name=args.name or factory)
    path = save_profile(profile, args.out)
    _emit(args, {"path": str(path), "params": profile.numel, "t_iter_single_s":
                 profile.t_iter_single},
          f"saved {path}: {len(profile.sizes)} tensors, {profile.numel:,} parameters, "
          f"forward {profile.forward_s * 1e3:.1f} ms, backward {profile.backward_s * 1e3:.1f} ms, "
          f"optimizer {profile.optimizer_s * 1e3:.1f} ms")


def _run(args) -> None:
    from .evaluation.run import run

    out = run(args.out, quick=not args.full, profile=args.profile, workers=args.workers,
              bandwidth=args.bandwidth, progress=not args.json)
    report = out / "report.md"
    verdicts = [line for line in report.read_text().splitlines()
                if line.startswith(("- **Encode/decode costs", "- **Time to accuracy"))]
    _emit(args, {"results": str(out), "report": str(report), "verdicts": verdicts},
          f"results in {out}\nreport: {report}\n\n" + "\n".join(verdicts))


def _bench(args) -> None:
    from .evaluation.benches import collective as bench_collective
    from .evaluation.benches import compress as bench_compress
    from .evaluation.benches import converge
    from .evaluation.benches import train as bench_train

    progress = not args.json
    if args.what == "compress":
        frame = bench_compress.bench_compress(
            args.methods.split(",") if args.methods else None,
            bench_compress.quick_sizes() if args.quick else None, device=args.device,
            repeats=args.repeats or 5, out=args.out, progress=progress)
        columns = ["method", "numel", "bytes_sent", "ratio", "rel_error", "encode_s", "decode_s"]
    elif args.what == "collective" and args.blocksparse:
        from pathlib import Path

        from .evaluation.benches import blocksparse as bbs
        from .evaluation.report import plots

        frame = bbs.bench_block_sparse(
            args.workers, numel=args.numel or (1 << 20 if args.quick else 1 << 24),
            densities=args.densities.split(",") if args.densities else
            bbs.quick_densities() if args.quick else None, block_size=args.block_size,
            repeats=args.repeats or 5, out=args.out, progress=progress)
        if args.out:
            plots.block_sparse_sweep(frame, Path(args.out).with_suffix(".png"))
        columns = ["mode", "density", "union_density", "bytes_sent", "time_s", "predicted_s"]
    elif args.what == "collective":
        frame = bench_collective.bench_collective(
            args.workers, sizes=bench_collective.quick_sizes() if args.quick else None,
            repeats=args.repeats or 10, out=args.out, progress=progress,
            **({"collectives": args.collectives.split(",")} if args.collectives else {}))
        columns = ["collective", "world_size", "size_bytes", "time_s", "algbw_GBps",
                   "busbw_GBps", "matches_allreduce"]
    elif args.what == "converge":
        size = converge.QUICK if args.quick else converge.FULL
        frame = converge.bench_converge(
            args.methods.split(",") if args.methods else None, task=args.task,
            target=args.target, metric=args.metric, seeds=args.seeds or size["seeds"],
            max_iters=args.max_iters or size["max_iters"], eval_every=size["eval_every"],
            world_size=args.workers, out=args.out, progress=progress)
        columns = ["method", "options", "error_feedback", "seed", "reached",
                   "iterations_to_target", "final_accuracy", "bytes_sent_per_iter"]
    else:
        frame = bench_train.bench_train(
            args.methods.split(",") if args.methods else None, args.workers,
            iterations=3 if args.quick else (args.repeats or 10), out=args.out,
            progress=progress)
        columns = ["method", "world_size", "t_iter_s", "bytes_sent", "bytes_original"]
    shown = [c for c in columns if c in frame.columns]
    _emit(args, frame.to_dict("records"), _table(frame, shown))


def _topology(args) -> None:
    from .evaluation.model.topology import compare, default_suite, load_topology

    specs = args.topology or default_suite()
    table = compare([load_topology(t, args.workers, args.bandwidth) for t in specs],
                    args.nbytes)
    text = _table(table, ["topology", "workers", "trees", "forest_bps", "cut_bound_bps",
                          "bound", "forest_vs_cut", "ring_s", "tree_s", "ps_s", "forest_s",
                          "forest_speedup_vs_ring"])
    if args.plot:
        from .evaluation.report import plots

        text += f"\n\nwrote {plots.allreduce_times(table, args.plot)}"
    _emit(args, table.to_dict("records"), text)


def _fit(args) -> None:
    import pandas as pd

    from .evaluation.model.fit import fit_codec, fit_collectives, summary

    frame = pd.read_csv(args.table)
    fits = fit_collectives(frame) if "collective" in frame.columns else fit_codec(frame)
    table = summary(fits)
    _emit(args, table.to_dict("records"), _table(table, table.columns))


def _report(args) -> None:
    from .evaluation.report.report import write_report

    path = write_report(args.results, profile=args.profile, workers=args.workers,
                        bandwidth=args.bandwidth, bucketing=args.bucketing)
    _emit(args, {"report": str(path)}, f"wrote {path}")


def _testbed(args) -> None:
    from .evaluation.testbed import testbed

    try:
        _testbed_action(args, testbed)
    except (testbed.TestbedUnavailable, testbed.JobFailed, TimeoutError) as exc:
        raise SystemExit(f"gradcomp testbed: {exc}") from None


def _testbed_action(args, testbed) -> None:
    if args.cleanup:
        removed = testbed.cleanup_stale()
        _emit(args, {"removed": removed}, f"removed {len(removed)} stale testbed run(s)"
              + "".join(f"\n  {run}" for run in removed))
        return
    if args.check:
        row = testbed.rate_check(args.rate)
        _emit(args, row, f"all-reduce of {row['nbytes']:,} bytes at {args.rate:g} bit/s: "
              f"{row['measured_s'] * 1e3:.1f} ms measured, {row['expected_s'] * 1e3:.1f} ms "
              f"expected from the rate ({row['rel_error']:+.1%})")
        return
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    results = testbed.run_command(command, args.workers, args.rate,
                                  args.rates.split(",") if args.rates else None,
                                  args.topology, args.threads, args.timeout)
    _emit(args, [r.__dict__ for r in results],
          "\n".join(f"[rank {r.rank}] {line}" for r in results
                    for line in (r.stdout + r.stderr).splitlines()))


def _validate(args) -> None:
    import time

    from .evaluation.testbed.testbed import JobFailed, TestbedUnavailable
    from .evaluation.testbed.validate import summarize, validate_sweep

    out = args.out or f"results/validate-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        table = validate_sweep(out, args.rates.split(","), args.methods.split(","), args.model,
                               iterations=args.iterations, progress=not args.json)
    except (TestbedUnavailable, JobFailed, TimeoutError) as exc:
        raise SystemExit(f"gradcomp validate: {exc}") from None
    summary = summarize(table)
    _emit(args, {"results": out, "rows": table.to_dict("records"),
                 "summary": summary.to_dict("records")},
          _table(table, ["rate", "method", "measured", "predicted", "rel_error"]) + "\n\n"
          + _table(summary, summary.columns) + f"\n\nresults in {out}")


def _short(options: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in options.items() if k != "seed")


def parser() -> argparse.ArgumentParser:
    from .evaluation.benches.compress import RESNET50_NUMEL
    from .evaluation.benches.tasks import TASKS
    from .evaluation.model.topology import ALGORITHMS

    top = argparse.ArgumentParser(prog="gradcomp", description=(
        "Gradient compression for data-parallel training, and whether it speeds you up."))
    sub = top.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("compressors", help="compress a ResNet-50-sized gradient with every "
                          "method and print bytes on wire, error and encode/decode time")
    comp.add_argument("--numel", type=int, default=RESNET50_NUMEL,
                      help="gradient size in fp32 values (default: 25.6M, ResNet-50)")
    comp.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                      help="device to run on (default: cuda if available, else cpu)")
    comp.add_argument("--repeats", type=int, default=3, help="timed repeats (median reported)")
    comp.add_argument("--json", action="store_true", help="print machine-readable JSON")
    comp.set_defaults(run=_compressors)

    def network(p):
        p.add_argument("--profile", default="resnet50", help="built-in profile (resnet50, "
                       "resnet101, vgg16, bert-base, gpt2) or a saved profile file")
        p.add_argument("--workers", type=_positive_int, default=8, help="data-parallel workers")
        p.add_argument("--bandwidth", type=_rate, default=_rate("10gbit"),
                       help="per-worker bandwidth with units: 10gbit, 100mbit, 25G (Gbit/s), "
                       "3GB (bytes/s)")
        p.add_argument("--latency", type=float, default=0.0, help="per-hop latency alpha, s")
        p.add_argument("--bucketing", choices=("ddp", "horovod"), default="ddp",
                       help="DDP buckets (25 MB, small first bucket) or Horovod tensor fusion "
                       "(5 ms cycle, 64 MB buffer)")
        p.add_argument("--json", action="store_true", help="print machine-readable JSON")

    wi = sub.add_parser("whatif", help="scaling factor and iteration time for a profile, "
                        "network and method; the compression needed and the break-even bandwidth")
    network(wi)
    wi.add_argument("--method", default="none", help="a gradcomp method name")
    wi.add_argument("--compression", type=float, help="a bare compression ratio instead of a method")
    wi.add_argument("--target-sf", type=_fraction, default=0.9,
                    help="scaling factor to reach, in (0, 1]")
    wi.add_argument("--sweep", action="store_true", help="sweep bandwidth 1-400 Gbit/s")
    _topology_options(wi)
    wi.add_argument("--algorithm", choices=ALGORITHMS, default="forest",
                    help="with --topology: the all-reduce algorithm (default: forest)")
    wi.set_defaults(run=_whatif, workers=None, latency=None)  # None: 8 / 0, or the topology's

    ad = sub.add_parser("advise", help="rank methods by predicted iteration time and say "
                        "whether compression is worth it")
    network(ad)
    ad.add_argument("--costs", help="a `bench compress` CSV with measured encode/decode costs")
    ad.add_argument("--methods", help="comma-separated methods (default: all)")
    ad.add_argument("--convergence", help="a `bench converge` CSV: rank by predicted time to "
                    "its target (measured iterations x predicted iteration time)")
    ad.add_argument("--task", choices=TASKS, help="with --convergence: the task, when the "
                    "table holds several")
    ad.add_argument("--target", type=float, help="with --convergence: the target, when the "
                    "table holds several")
    _topology_options(ad)
    ad.add_argument("--algorithms", help="with --topology: comma-separated all-reduce "
                    f"algorithms of {', '.join(ALGORITHMS)} (default: all)")
    ad.set_defaults(run=_advise, workers=None, latency=None)  # None: 8 / 0, or the topology's

    tp = sub.add_parser("topology", help="all-reduce time by ring, tree, parameter server and "
                        "forest packing on network topologies, and the forest's rate against "
                        "its cut bound")
    tp.add_argument("--topology", action="append", help="built-in (two-racks, random, "
                    "random:SEED: links only; homogeneous: a switched cluster, one NIC of "
                    "--bandwidth per worker) or a .json/.csv bandwidth matrix (bit/s, entry "
                    "i,j: a dedicated link i->j; JSON may add per-worker NICs as "
                    "\"egress_bps\"/\"ingress_bps\" and \"latency_s\"); repeatable (default: "
                    "two-racks, random:0..4, homogeneous)")
    tp.add_argument("--workers", type=_positive_int, default=8, help="workers of the built-ins")
    tp.add_argument("--bandwidth", type=_rate, default=_rate("10gbit"),
                    help="link bandwidth of the built-ins (two-racks: the thin link is a tenth; "
                    "homogeneous: also every worker's NIC)")
    tp.add_argument("--nbytes", type=_positive_int, default=100_000_000,
                    help="gradient bytes per worker (default: 100 MB)")
    tp.add_argument("--plot", help="also write a PNG of the completion times")
    tp.add_argument("--json", action="store_true", help="print machine-readable JSON")
    tp.set_defaults(run=_topology)

    rn = sub.add_parser("run", help="the main job: measure compression, collectives and DDP "
                        "training here, fit the model, and write plots and a report")
    network(rn)
    rn.add_argument("--out", help="results folder (default: results/<timestamp>); an "
                    "existing one is resumed, finished rows are skipped")
    rn.add_argument("--full", action="store_true", help="full sweeps instead of the quick "
                    "default (minutes on 2 CPU cores)")
    rn.set_defaults(run=_run)

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
    be.add_argument("--workers", type=_positive_int, default=2, help="local worker processes")
    be.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    be.add_argument("--repeats", type=_positive_int, help="timed repeats / iterations")
    be.add_argument("--quick", action="store_true", help="CI-sized sweep")
    be.add_argument("--blocksparse", action="store_true", help="collective: sweep the "
                    "block-sparse all-reduce over block densities (plot beside --out)")
    be.add_argument("--densities", help="--blocksparse: comma-separated fractions of non-zero "
                    "blocks (default 0.001 ... 1)")
    be.add_argument("--block-size", type=_positive_int, default=256,
                    help="--blocksparse: elements per block")
    be.add_argument("--numel", type=_positive_int, help="--blocksparse: float32 elements per "
                    "worker (default 16M, --quick 1M)")
    be.add_argument("--task", choices=TASKS, default="teacher", help="converge: the built-in "
                    "task (teacher: generated; digits: scikit-learn's bundled images)")
    be.add_argument("--metric", choices=("accuracy", "loss"), default="accuracy",
                    help="converge: test accuracy >= target, or test loss <= target")
    be.add_argument("--target", type=float, help="converge: the target (default: the "
                    "task's accuracy target)")
    be.add_argument("--seeds", type=_positive_int, help="converge: seeds 0..N-1 (default 3; "
                    "--quick 1)")
    be.add_argument("--max-iters", type=_positive_int, help="converge: iteration budget "
                    "(default 600; --quick 200)")
    be.add_argument("--json", action="store_true", help="print machine-readable JSON")
    be.set_defaults(run=_bench)

    fi = sub.add_parser("fit", help="fit a + b*numel per method (a compress table) or alpha, "
                        "beta per collective (a collective table); prints R^2")
    fi.add_argument("table", help="CSV written by `gradcomp bench compress|collective`")
    fi.add_argument("--json", action="store_true", help="print machine-readable JSON")
    fi.set_defaults(run=_fit)

    re_ = sub.add_parser("report", help="(re)write plots and report.md for a results folder")
    network(re_)
    re_.add_argument("results", help="a folder written by `gradcomp run`")
    re_.set_defaults(run=_report)

    pr = sub.add_parser("profile", help="measure your model's backward profile on this device")
    pr.add_argument("factory", help="MODULE:FACTORY returning an nn.Module, e.g. "
                    "torchvision.models:resnet18")
    pr.add_argument("--input-shape", required=True, help="comma-separated, e.g. 32,3,224,224")
    pr.add_argument("--out", required=True, help="profile file to write (.json)")
    pr.add_argument("--name", help="profile name (default: the factory name)")
    pr.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    pr.add_argument("--repeats", type=_positive_int, default=10)
    pr.add_argument("--json", action="store_true", help="print machine-readable JSON")
    pr.set_defaults(run=_profile)

    tb = sub.add_parser("testbed", help="run a command in every namespace of a bandwidth-"
                        "limited local testbed (one network namespace per worker; needs root)")
    tb.add_argument("--workers", type=_positive_int, default=2, help="namespaces (ranks)")
    tb.add_argument("--rate", type=_rate, default=_rate("1gbit"),
                    help="every link's rate: 100mbit, 1gbit, 2.5gbit, ...")
    tb.add_argument("--rates", help="comma-separated rate per worker's link (heterogeneous)")
    tb.add_argument("--topology", choices=("star", "p2p"), default="star",
                    help="a bridge joining every namespace, or one link between 2")
    tb.add_argument("--threads", type=_positive_int, default=1,
                    help="OMP_NUM_THREADS of each worker")
    tb.add_argument("--timeout", type=float, help="seconds before the job is stopped")
    tb.add_argument("--cleanup", action="store_true", help="remove what killed runs left")
    tb.add_argument("--check", action="store_true", help="time an all-reduce of 4 MiB at "
                    "--rate against what the rate implies")
    tb.add_argument("--json", action="store_true", help="print machine-readable JSON")
    tb.add_argument("command", nargs=argparse.REMAINDER,
                    help="-- COMMAND... run in each namespace with RANK, WORLD_SIZE, "
                    "MASTER_ADDR, MASTER_PORT, GLOO_SOCKET_IFNAME set")
    tb.set_defaults(run=_testbed)

    from .evaluation.testbed.validate import DEFAULT_METHODS, DEFAULT_RATES, MODELS

    va = sub.add_parser("validate", help="measure DDP iterations in the testbed at several "
                        "rates and hold the performance model's predictions against them")
    va.add_argument("--rates", default=",".join(DEFAULT_RATES), help="comma-separated rates")
    va.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                    help="comma-separated methods ('ddp': DDP's own all-reduce)")
    va.add_argument("--model", choices=tuple(MODELS), default="mlp", help="built-in model")
    va.add_argument("--iterations", type=_positive_int, default=10,
                    help="timed iterations per method and rate")
    va.add_argument("--out", help="results folder (default: results/validate-<timestamp>); "
                    "an existing one is resumed")
    va.add_argument("--json", action="store_true", help="print machine-readable JSON")
    va.set_defaults(run=_validate)
    return top


def _rate(text: str) -> float:
    from .evaluation.common.units import parse_rate

    try:
        return parse_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a number in (0, 1]")
    return value


def _topology_options(p) -> None:
    p.add_argument("--topology", help="a network topology instead of one bandwidth: "
                   "two-racks, random, random:SEED (links only), homogeneous (a switched "
                   "cluster: one NIC of --bandwidth per worker), built for --workers (default 8) "
                   "and --bandwidth, or a .json/.csv matrix of bit/s (entry i,j: a dedicated "
                   "link i->j; JSON: {\"bandwidth_bps\": matrix, \"latency_s\": s, "
                   "\"egress_bps\"/\"ingress_bps\": per-worker NICs}); a file sets the "
                   "workers (--workers must match) and the latency unless --latency is given")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be an integer >= 1")
    return value


def main(argv=None) -> int:
    top = parser()
    args = top.parse_args(argv)
    try:
        args.run(args)
    except ValueError as exc:  # bad input found by the library: name it, no traceback
        top.error(f"{args.command}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
