"""`gradcomp whatif` and `gradcomp advise`: ask the performance model about a profile,
network and method (or every method)."""
from ..compressors import names
from ..evaluation.analyses.fsdp import TIMELINE, check_fsdp_method
from ..evaluation.analyses.measured import error_summary, fitted_network, measured_vs_predicted
from ..evaluation.analyses import weighed
from ..evaluation.analyses.evidence import (evidence_of, evidence_record, network_spread,
                                            with_intervals)
from ..evaluation.analyses.recommend import (FSDP, MARGIN, best_safe, not_ranked,
                                             question_gpu, question_text,
                                             recommend_by_accuracy, recommend_by_iteration,
                                             sixteen_bit, unsupported)
from ..evaluation.analyses.time_to_accuracy import TTA_COLUMNS
from ..evaluation.analyses.whatif import (break_even_bandwidth, required_compression, scenario,
                                          sweep)
from ..evaluation.common.units import format_rate
from ..evaluation.model.cost_tables import cost_table, default_costs
from ..evaluation.model.methods import resolve
from ..evaluation.model.topology import ALGORITHMS, network_on
from ..evaluation.profiles.profiles import load_profile
from .common import (METHODS_HELP, PARALLELISM, cluster_of, costs_option, default_of, emit,
                     fraction, method_list, network_defaults, network_options, number,
                     read_measurements, split, table, topology_options)

ALGORITHM = default_of(network_on, "algorithm")  # whatif --topology: the all-reduce algorithm


def parallelism_option(p) -> None:
    p.add_argument("--parallelism", choices=PARALLELISM, default="ddp", help="ddp (default: "
                   "the DDP timeline) or fsdp (the FSDP2 timeline: parameter all-gathers and "
                   "gradient reduce-scatters; methods none = FSDP's own reduce-scatter, bf16, "
                   "fp16, int8, int4, topk, randomk; overlap of collectives and compute as on "
                   "GPUs, validated only without it: see validate --parallelism fsdp)")


def add_whatif(wi) -> None:
    network_options(wi)
    wi.add_argument("--method", default=default_of(scenario, "method"),
                    help="a gradcomp method name, with options as name:key=value,... "
                    "(e.g. powersgd:rank=4)")
    wi.add_argument("--compression", type=number("compression", minimum=1),
                    help="a bare compression ratio (>= 1) instead of a method")
    wi.add_argument("--target-sf", type=fraction,
                    default=default_of(required_compression, "target_sf"),
                    help="scaling factor to reach, in (0, 1]")
    wi.add_argument("--sweep", action="store_true", help="sweep bandwidth 1-400 Gbit/s")
    parallelism_option(wi)
    costs_option(wi)
    topology_options(wi)
    wi.add_argument("--algorithm", choices=ALGORITHMS,
                    help=f"with --topology: the all-reduce algorithm (default: {ALGORITHM})")
    wi.set_defaults(run=_whatif, workers=None, latency=None)  # None: see network_defaults


def add_advise(ad) -> None:
    network_options(ad)
    parallelism_option(ad)
    costs_option(ad)
    ad.add_argument("--methods", help=METHODS_HELP + " (default: all)")
    ad.add_argument("--convergence", help="a `bench converge` CSV: rank by predicted time to "
                    "its target (measured iterations x predicted iteration time)")
    ad.add_argument("--task", help="with --convergence: the task, when the "
                    "table holds several")
    ad.add_argument("--target", type=float, help="with --convergence: the target, when the "
                    "table holds several")
    topology_options(ad)
    ad.add_argument("--algorithms", help="with --topology: comma-separated all-reduce "
                    f"algorithms of {', '.join(ALGORITHMS)} (default: all)")
    ad.add_argument("--measured", help="a `bench train` CSV of your runs (one workload; "
                    "--profile its profile, from bench train --profile-out): the model's "
                    "iteration time for each run beside the measured one")
    ad.add_argument("--collectives", help="with --measured: a `bench collective` CSV of the "
                    "same cluster, whose fits are the network (else --bandwidth, --latency)")
    ad.set_defaults(run=_advise, workers=None, latency=None)  # None: see network_defaults


def question_device(args) -> str:
    """The GPU the question runs on: the cluster's when it names one (its codecs and 16-bit
    all-reduce run there), else the profile's device."""
    cluster = None if args.topology else cluster_of(args)[0]
    return question_gpu(cluster, load_profile(args.profile).device)


def chosen_costs(args):
    """The cost table of --costs, else of the question's GPU (`default_costs`)."""
    device = question_device(args)
    return cost_table(args.costs if args.costs is not None else default_costs(device, False))


def _asked(args) -> tuple[dict, str, str]:
    """The analyses' network keywords (workers, bandwidth, latency_s, efficiency, tiers), the
    question's words (profile, cluster with its efficiency and slowdown, bucketing) and the
    network's: with --collectives (advise), the network fitted from that bench, the one the
    measured runs are predicted on."""
    profile = load_profile(args.profile).name
    collectives = getattr(args, "collectives", None)
    if args.topology:
        if collectives:
            raise ValueError("--collectives is not allowed with --topology: the fitted network "
                             "is one switched cluster; drop one")
        workers, latency, bandwidth = network_defaults(args)
        return (dict(workers=workers, bandwidth=bandwidth, latency_s=latency),
                f"`{profile}` on topology {args.topology}, {args.bucketing} bucketing",
                f"topology {args.topology}")
    cluster, nodes = cluster_of(args)
    net = cluster.question(nodes)
    if not collectives:
        return net, question_text(args.profile, cluster, nodes, args.bucketing), \
            cluster.describe(nodes)
    fit = fitted_network(read_measurements(collectives, "collectives",
                                           "a `gradcomp bench collective` CSV"))
    net.update(bandwidth=fit["bandwidth"], latency_s=fit["latency_s"],
               efficiency=fit["efficiency"])
    return (net, f"`{profile}` on {net['workers']} workers at {fit['label']}, "
                 f"{args.bucketing} bucketing", fit["label"])


def _not_for_fsdp(args, command: str, options) -> None:
    """A ValueError naming the first of `options` given with --parallelism fsdp (a default
    valued option counts as given when it differs from its default)."""
    for name in options:
        value = getattr(args, name)
        default = args.parser.get_default(name)
        if value not in (None, False) and value != default:
            raise ValueError(f"--{name.replace('_', '-')} is not allowed with `{command} "
                             "--parallelism fsdp`: it is for the DDP timeline")


def _whatif(args) -> None:
    if args.parallelism == "fsdp":
        _whatif_fsdp(args)
        return
    on = dict(topology=args.topology, algorithm=args.algorithm)
    net, question, _ = _asked(args)
    workers, bandwidth = net.pop("workers"), net.pop("bandwidth")
    common = dict(bucketing=args.bucketing, **net)
    if args.sweep and (args.topology or args.algorithm):
        raise ValueError("--sweep is not allowed with --topology or --algorithm: the sweep "
                         "varies one bandwidth for all links; scale the topology file instead")
    codecs = args.method != "none" and args.compression is None
    costs = chosen_costs(args) if codecs or args.costs is not None else None
    if codecs:
        resolve(args.method)  # an unknown name or option is an error naming it
        _runnable(args.method, question_device(args))
    if costs is not None and codecs and not costs.priced(args.method):
        raise ValueError(f"method={args.method!r} is not priced by costs={costs.name!r}: "
                         + costs.excluded.get(args.method.split("+")[0],
                                              "it is not in the table"))
    fitted = None if costs is None else costs.costs
    note = resolve(args.method, fitted).costs_note if codecs else ""
    evidence = evidence_of(costs) if codecs else None
    if args.sweep:  # with codecs, each bandwidth's speedups with their intervals
        frame = (weighed.sweep(args.profile, {**net, "workers": workers}, costs, evidence,
                               [args.method], question_device(args), args.bucketing)
                 if codecs else
                 sweep(args.profile, workers=workers, methods=[args.method],
                       ratios=[args.compression] if args.compression else (), costs=fitted,
                       **common))
        emit(args, frame.to_dict("records"),
             table(with_intervals(frame), ["workers", "bandwidth_bps", "method", "ratio",
                                           "t_iter_s", "sf", "speedup",
                                           *(["vs_16bit"] if codecs else [])]))
        return
    pred = scenario(args.profile, workers, bandwidth, args.method,
                    ratio=args.compression, costs=fitted, **common, **on)
    need = required_compression(args.profile, workers, bandwidth,
                                target_sf=args.target_sf, **common, **on)
    row = {**pred.as_row(), "required_compression": need.ratio,
           "required_compression_reason": need.reason, "target_sf": args.target_sf,
           "costs": None if costs is None else costs.name, "costs_note": note}
    speed = f"iteration {pred.t_iter_s * 1e3:.1f} ms, scaling factor {pred.sf:.3f}, " \
            f"speedup vs none {pred.speedup:.2f}x"
    if codecs:  # weighed as advise weighs its ranking: the same intervals and evidence
        half = sixteen_bit(question_device(args))
        fields, shown = _weighed_whatif(args, costs, evidence, {**net, "workers": workers,
                                                                "bandwidth": bandwidth},
                                        pred.method)
        row.update(fields, margin=MARGIN, evidence=evidence_record(evidence))
        speed = (f"iteration {pred.t_iter_s * 1e3:.1f} ms ({row['t_iter_low_s'] * 1e3:.1f}-"
                 f"{row['t_iter_high_s'] * 1e3:.1f} ms), scaling factor {pred.sf:.3f}, "
                 f"speedup vs none {shown['speedup']}, vs the {half} all-reduce "
                 f"{shown['vs_16bit']}")
    elif args.compression is not None:
        speed += " (a bare ratio: no codec cost to fit, the network as stated: no interval)"
    lines = [f"{question}, method {pred.method}"
             + (f", codec costs {costs.label}" if codecs else "")
             + (f" ({note})" if note else "")
             + (f", {args.algorithm or ALGORITHM} all-reduce" if args.topology else "") + ":",
             f"  {speed}",
             f"  compression needed for SF {args.target_sf}: "
             + (f"{need.ratio:.3g}x" if need.ratio != float("inf")
                else f"unreachable ({need.reason})")]
    if codecs and not args.topology:
        even = break_even_bandwidth(args.profile, workers, args.method, costs=fitted, **common)
        row["break_even_bandwidth_bps"] = even
        lines.append(f"  {args.method} beats none below {format_rate(even)}"
                     if 0 < even < float("inf") else
                     f"  {args.method} {'always' if even else 'never'} beats none")
    if codecs or args.compression is not None:
        row["flips"] = weighed.whatif_flips(
            args.profile, dict(workers=pred.workers, bandwidth=bandwidth, **net), args.method,
            args.compression, fitted, args.bucketing, **on)
        lines.append(f"  {row['flips']}")
    if codecs:
        lines.append(f"  intervals from: {evidence.describe([pred.method, half])}")
    emit(args, row, "\n".join(lines))


def _weighed_whatif(args, costs, evidence, at: dict, method: str) -> tuple[dict, dict]:
    """`_weighed_row` of `method` (the label of --method) in the ranking `advise` weighs
    (`weighed.ranking` of --method, with both baselines) at network keywords `at`; on a
    --topology, of its --algorithm alone, so that speedups are over none on that algorithm."""
    ranking = weighed.ranking(args.profile, at, costs, evidence, [args.method],
                              question_device(args), args.bucketing, args.topology,
                              [args.algorithm or ALGORITHM] if args.topology else None)
    return _weighed_row(ranking, method)


def _weighed_row(ranking, method: str) -> tuple[dict, dict]:
    """`method`'s row of a weighed ranking (`weighed.ranking`, `weighed.fsdp_ranking`) as
    the interval fields whatif adds to its answer (the time's, each speedup's, the codec
    spread), and its speedups written with their intervals (`with_intervals`)."""
    mine = ranking[ranking["method"] == method]
    return (mine.iloc[0][list(weighed.INTERVALS)].to_dict(),
            with_intervals(mine).iloc[0].to_dict())


def _runnable(method: str, device: str) -> None:
    """A ValueError where `method` cannot run on the question's `device` (`unsupported`)."""
    if unsupported(method, device):
        raise ValueError(f"method={method!r} is not allowed: {unsupported(method, device)}")


def _priced(costs, method: str) -> None:
    check_fsdp_method(method)
    if not costs.priced(method):
        raise ValueError(f"method={method!r} is not priced by costs={costs.name!r}: "
                         + costs.excluded.get(method, "it is not in the table"))


def _whatif_fsdp(args) -> None:
    _not_for_fsdp(args, "whatif", ("compression", "target_sf", "sweep", "topology",
                                   "algorithm", "bucketing"))
    net, question, _ = _asked(args)
    costs, device = chosen_costs(args), question_device(args)
    _priced(costs, args.method)
    _runnable(args.method, device)
    evidence = evidence_of(costs)
    ranking = weighed.fsdp_ranking(args.profile, net, costs, evidence, [args.method], device)
    row = {**ranking[ranking["method"] == args.method].iloc[0].drop("rank"),
           "costs": costs.name, "margin": MARGIN, "evidence": evidence_record(evidence)}
    shown = with_intervals(ranking[ranking["method"] == args.method]).iloc[0]
    lines = [f"{TIMELINE}:",
             f"{question}, method {args.method}"
             + (" (FSDP's own reduce-scatter)" if args.method == "none" else "")
             + f", codec costs {costs.label}:",
             f"  iteration {row['t_iter_s'] * 1e3:.1f} ms ({row['t_iter_low_s'] * 1e3:.1f}-"
             f"{row['t_iter_high_s'] * 1e3:.1f} ms), speedup vs FSDP's own reduce-scatter "
             f"{shown['speedup']}, vs the {sixteen_bit(device)} "
             f"reduce-scatter {shown['vs_16bit']}",
             f"  reduce-scatter {row['rs_wire_bytes'] / 1e6:.1f} MB sent per worker"
             + ("" if args.method == "none" else
                f" ({row['rs_compression']:.3g}x less than FSDP's own)")
             + f", exposed communication {row['exposed_comm_s'] * 1e3:.1f} ms",
             f"  intervals from: {evidence.describe([args.method])}"]
    emit(args, row, "\n".join(lines))


def _advise_fsdp(args) -> None:
    from ..fsdp import METHODS  # torch.distributed.fsdp: imported when FSDP is asked about

    _not_for_fsdp(args, "advise", ("convergence", "task", "target", "topology", "algorithms",
                                   "measured", "collectives", "bucketing"))
    costs = chosen_costs(args)
    net, question, network = _asked(args)
    device, compute = question_device(args), load_profile(args.profile).device
    methods = method_list(args.methods)
    for method in methods or ():
        _priced(costs, method)
    evidence = evidence_of(costs)
    ranking = weighed.fsdp_ranking(args.profile, net, costs, evidence, methods, device)
    answer = recommend_by_iteration(ranking, costs, device, question, evidence,
                                    weighed.fsdp_flips(args.profile, net, costs, device),
                                    compute_device=compute, wording=FSDP)
    answer += _left_out(methods or METHODS, None, ranking, costs, device)
    text = (f"{TIMELINE}: {question}, codec costs {costs.label}\n"
            + table(with_intervals(ranking), ["rank", "method", "t_iter_s", "speedup",
                                              "vs_16bit", "rs_compression", "exposed_comm_s"])
            + "\n\n" + answer)
    emit(args, {"parallelism": "fsdp", "verdict": answer, "costs": costs.name,
                "network": network, "margin": MARGIN, "evidence": evidence_record(evidence),
                "ranking": ranking.to_dict("records")}, text)


def _advise(args) -> None:
    if args.parallelism == "fsdp":
        _advise_fsdp(args)
        return
    costs = chosen_costs(args)
    convergence = None if args.convergence is None else read_measurements(
        args.convergence, "convergence", "a `gradcomp bench converge` CSV")
    net, question, network = _asked(args)
    device, compute = question_device(args), load_profile(args.profile).device
    runs = (_measured(args, costs, net["bandwidth"], net["latency_s"])
            if args.measured or args.collectives else None)
    asked = [m for m in dict.fromkeys([*(method_list(args.methods) or names()),
                                       sixteen_bit(device)])
             if resolve(m)]  # unknown names, options: an error naming them
    spread = network_spread(read_measurements(args.collectives, "collectives", "a `gradcomp "
                                              "bench collective` CSV")) \
        if args.collectives else 0.0
    evidence = evidence_of(costs, spread, "fitted from the collective bench (two standard "
                           "errors of the all-reduce's slope)")
    common = dict(device=device, bucketing=args.bucketing, task=args.task, target=args.target,
                  topology=args.topology)
    priced = [m for m in asked if costs.priced(m)]
    if convergence is not None:
        ranking = weighed.accuracy(convergence, args.profile, net, costs, evidence,
                                   methods=priced, **common)
        answer = recommend_by_accuracy(ranking, costs, device, question, evidence,
                                       weighed.accuracy_flips(convergence, ranking,
                                                              args.profile, net, costs,
                                                              evidence, device, args.bucketing,
                                                              args.task, args.target),
                                       compute_device=compute)
    else:
        ranking = weighed.ranking(args.profile, net, costs, evidence, priced,
                                  algorithms=split(args.algorithms), **common)
        answer = _topology_recommendation(ranking, costs, evidence, device, net, args) \
            if args.topology else recommend_by_iteration(
                ranking, costs, device, question, evidence,
                weighed.ranking_flips(args.profile, net, costs, device, args.bucketing),
                compute_device=compute)
        answer += _left_out(asked, runs, ranking, costs, device)
    columns = [*TTA_COLUMNS, "vs_16bit"] if convergence is not None else [
        "rank", "method", *(["algorithm"] if args.topology else []), "t_iter_s", "sf",
        "speedup", "vs_16bit", "compression", "codec_s", "costs"]
    payload = {"verdict": answer, "costs": costs.name, "network": network,
               "margin": MARGIN, "evidence": evidence_record(evidence),
               "ranking": ranking.to_dict("records")}
    text = table(with_intervals(ranking), columns) + "\n\n" + answer
    if runs is not None:
        payload["measured"] = runs.to_dict("records")
        text += ("\n\nYour runs, measured beside the model's prediction for the same setting "
                 "(t_iter in s):\n" + table(runs, runs.columns) + "\n" + error_summary(runs))
    emit(args, payload, text)


def _left_out(asked, runs, ranking, costs, device: str) -> str:
    """" Not ranked: m (why); ..." for the asked and measured methods the ranking lacks."""
    measured = [] if runs is None else ["none" if m == "ddp" else m for m in runs["method"]]
    why = not_ranked([*asked, *measured], ranking.drop_duplicates("method"), costs, device)
    return "" if not why else " Not ranked: " + "; ".join(
        f"{m} ({reason})" for m, reason in why.items()) + "."


def _topology_recommendation(ranking, costs, evidence, device: str, net: dict, args) -> str:
    """The one recommendation on a topology: each method on its fastest all-reduce algorithm
    (the ranking is fastest first), the recommended method's algorithm named, and where the
    answer flips (`weighed.topology_flips`)."""
    fastest = ranking.drop_duplicates("method")
    workers = int(ranking["workers"].iloc[0])
    question = (f"`{load_profile(args.profile).name}` on topology {args.topology} "
                f"({workers} workers), {args.bucketing} bucketing")
    flips = weighed.topology_flips(args.profile, {**net, "workers": workers}, costs,
                                   args.topology, device, args.bucketing, split(args.algorithms))
    return recommend_by_iteration(
        fastest, costs, device, question, evidence,
        f"On this topology: the {best_safe(fastest, costs, device)['algorithm']} all-reduce. "
        + flips)


def _measured(args, costs, bandwidth, latency):
    if not args.measured:
        raise ValueError("--collectives is not allowed without --measured: it would be ignored")
    train = read_measurements(args.measured, "measured", "a `gradcomp bench train` CSV")
    collectives = None if args.collectives is None else read_measurements(
        args.collectives, "collectives", "a `gradcomp bench collective` CSV")
    return measured_vs_predicted(train, args.profile, bandwidth, latency or 0.0,
                                 collectives, costs.costs, tuple(costs.excluded))
