"""What the command groups share: output (JSON or a table), option types, the network
options of whatif / advise / run / report, help that shows the defaults, and turning the
library's errors into messages (`exits_on`; `parsing.dispatch` the rest)."""
import argparse
import inspect
import json
from contextlib import contextmanager

import torch

from ..checks import check_device, check_number
from ..evaluation.analyses.whatif import BANDWIDTH, PROFILE, WORKERS, scenario, sweep
from ..evaluation.common.store import read_table, strict_json
from ..evaluation.common.units import format_rate, parse_rate
from ..evaluation.model.cluster import PRESETS, resolve_cluster
from ..evaluation.model.cost_tables import BUILTIN_TABLES, MEASURED, NAMES
from ..evaluation.model.bucketing import POLICIES
from ..evaluation.model.methods import method_spec, parse_methods, resolve

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # --device of compressors, bench, profile
PARALLELISM = ("ddp", "fsdp")  # --parallelism of whatif, advise, validate


def default_of(function, name: str):
    """The default of `function`'s parameter `name`: the library owns its defaults."""
    return inspect.signature(function).parameters[name].default


def given(**options) -> dict:
    """The options that were given (not None); the others keep the called function's own
    defaults."""
    return {name: value for name, value in options.items() if value is not None}


def emit(args, payload, text: str) -> None:
    """Print `payload` as JSON with --json, else the human-readable `text`."""
    if args.json:
        print(json.dumps(strict_json(payload), indent=1, allow_nan=False,
                         default=lambda value: strict_json(float(value))))
    else:
        print(text)


def table(frame, columns) -> str:
    from tabulate import tabulate

    return tabulate(frame[list(columns)], headers="keys", showindex=False, floatfmt=".4g")


def split(text):
    """A comma-separated option as a list; None when not given."""
    return text.split(",") if text else None


def method_list(text):
    """--methods: each method with its options (`methods.parse_methods`: ``topk:ratio=0.001,
    powersgd:rank=16,bf16``) as the ``name:key=value`` text the library takes; None when
    not given. An unknown method or option is a ValueError naming it (`methods.resolve`)."""
    methods = method_texts(text)
    for method in methods or ():
        resolve(method)
    return methods


def method_texts(text):
    """--methods as `method_list` gives them, unchecked (names the model does not price, such
    as ``ddp`` and ``auto``, among them); None when not given."""
    return [method_spec(n, o) for n, o in parse_methods(text)] if text else None


METHODS_HELP = ("comma-separated methods, each with options as name:key=value,... (e.g. "
                "topk:ratio=0.001,powersgd:rank=16,bf16)")


def rate(text: str) -> float:
    """An argparse type: a rate with its unit ("10gbit"); a bare number is refused, since
    "10" meant as 10 Gbit/s would be taken as 10 bit/s."""
    if _is_float(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} has no unit: give one, e.g. {text}gbit (Gbit/s), {text}mbit (Mbit/s), "
            f"{text}GB (bytes/s) or {text}bit (bit/s)")
    try:
        return parse_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a number in (0, 1]")
    return value


def number(option: str, **bounds):
    """An argparse type: a finite number held to `checks.check_number(value, option,
    **bounds)`, so the library's rule and message apply."""
    def parse(text: str) -> float:
        try:
            return check_number(float(text), option, **bounds)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).replace(f"={float(text)!r}", f"={text!r}")
                                             if _is_float(text) else
                                             f"{text!r} is not a number") from None
    parse.__name__ = option
    return parse


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def device(text: str) -> str:
    """An argparse type: a torch device this machine has (`checks.check_device`)."""
    try:
        check_device(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be an integer >= 1")
    return value


def read_measurements(path, option: str, what: str):
    """`store.read_table`, but a JSON file (a profile or topology given where a table
    belongs) is one ValueError naming the option (`refuse_json`), not a warning per line it
    cannot split."""
    refuse_json(path, option, what)
    return read_table(path, option, what)


def refuse_json(path, option: str, what: str) -> None:
    """A ValueError naming `option` when `path` is a JSON file (by its name or first byte)."""
    try:
        with open(path, "rb") as file:
            start = file.read(64).lstrip()
    except OSError:
        start = b""  # whoever reads it says what is wrong with the path
    if str(path).lower().endswith(".json") or start[:1] in (b"{", b"["):
        raise ValueError(f"{option}={str(path)!r} is not allowed: it is a JSON file, not a "
                         f"table; give {what}")


def costs_value(text: str) -> str:
    """An argparse type for --costs: a table name, or a file that is not JSON."""
    if text not in NAMES:
        try:
            refuse_json(text, "costs", "a `gradcomp bench compress` CSV or a table name")
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def network_options(p) -> None:
    """The question's options (profile, workers, bandwidth, latency, bucketing) and --json."""
    p.add_argument("--profile", default=PROFILE, help="built-in profile (resnet50, "
                   "resnet101, vgg16, bert-base, gpt2) or a saved profile file")
    p.add_argument("--workers", type=positive_int, help="data-parallel workers, GPUs "
                   f"(default: {WORKERS}; --nodes x the GPUs per node with --nodes; with a "
                   "--topology file, its own)")
    p.add_argument("--bandwidth", type=rate, help="one NIC's rate (per worker on a flat "
                   "network) with units: 10gbit, 100mbit, 25G (Gbit/s), 3GB (bytes/s) "
                   f"(default: {format_rate(parse_rate(BANDWIDTH))}; with --cluster, the "
                   "preset's)")
    p.add_argument("--latency", type=number("latency", minimum=0),
                   default=default_of(sweep, "latency_s"),
                   help="per-hop latency alpha, s (default: "
                   f"{default_of(sweep, 'latency_s'):g}; with a --topology file, its own)")
    p.add_argument("--bucketing", choices=tuple(POLICIES),
                   default=default_of(scenario, "bucketing"), help="DDP buckets (25 MB, "
                   "small first bucket) or Horovod tensor fusion (5 ms cycle, 64 MB buffer)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    cluster_options(p)


def cluster_options(p) -> None:
    """The cluster: a preset or file, or its parts; without them, the flat network (one GPU
    per node, one NIC of --bandwidth each)."""
    g = p.add_argument_group("cluster (default: flat, one GPU per node)")
    g.add_argument("--cluster", help=f"a node kind: a preset ({', '.join(PRESETS)}) or a "
                   ".json file (see docs/workload.md); --nodes or --workers says how many")
    g.add_argument("--nodes", type=positive_int, help="nodes (workers = nodes x GPUs per node)")
    g.add_argument("--gpus-per-node", type=positive_int, help="GPUs per node (default: 1)")
    g.add_argument("--intra-bandwidth", type=rate, help="one GPU's bandwidth to the others of "
                   "its node (NVLink, PCIe), e.g. 150GB (bytes/s); needed with --gpus-per-node")
    g.add_argument("--rails", type=positive_int, help="NICs per node, each at --bandwidth "
                   "(default: 1)")
    g.add_argument("--efficiency", type=number("efficiency", minimum=0, maximum=1, above=True),
                   help="fraction of the NICs' line rate the transport reaches (default: "
                   "1, assumed)")
    g.add_argument("--slowdown", type=number("slowdown", minimum=1), help="how much slower a "
                   "distributed worker computes than a single one, >= 1 (default: 1, assumed)")


_CLUSTER_OPTIONS = ("cluster", "nodes", "gpus_per_node", "intra_bandwidth", "rails",
                    "efficiency", "slowdown")


def cluster_of(args):
    """(Cluster, nodes) of the question (`cluster.resolve_cluster`); with --topology the
    cluster options are an error (a topology file describes its own network)."""
    if getattr(args, "topology", None):
        for name in _CLUSTER_OPTIONS:
            if getattr(args, name) is not None:
                raise ValueError(f"--{name.replace('_', '-')} is not allowed with --topology: "
                                 "the topology describes the network")
    return resolve_cluster(args.cluster, workers=args.workers, nodes=args.nodes,
                           default_workers=WORKERS, default_bandwidth=BANDWIDTH,
                           gpus_per_node=args.gpus_per_node, bandwidth_bps=args.bandwidth,
                           intra_bandwidth_bps=args.intra_bandwidth, rails=args.rails,
                           latency_s=args.latency, efficiency=args.efficiency,
                           compute_slowdown=args.slowdown)


def costs_option(p, measured: bool = False) -> None:
    """--costs: the codec-cost table a question is priced with (`cost_tables`); checked
    where it is used, so that a bad name gets the library's message."""
    names = [n for n in NAMES if measured or n != MEASURED]
    p.add_argument("--costs", type=costs_value, help=f"codec costs: {', '.join(names)} (built-in: "
                   f"{', '.join(BUILTIN_TABLES)}, measured on that GPU) or a `gradcomp bench "
                   "compress` CSV; default: the table of the profile's GPU kind (measured, or "
                   f"scaled from {BUILTIN_TABLES[0]}) for a GPU profile" + (", this run's measurements for a profile measured here"
                                if measured else "") + ")")


def topology_options(p) -> None:
    p.add_argument("--topology", help="a network topology instead of one bandwidth: "
                   "two-racks, random, random:SEED (links only), homogeneous (a switched "
                   "cluster: one NIC of --bandwidth per worker), built for --workers "
                   f"(default {WORKERS}) and --bandwidth, or a .json/.csv matrix of bit/s "
                   "(entry i,j: a dedicated link i->j; JSON: {\"bandwidth_bps\": matrix, "
                   "\"latency_s\": s, \"egress_bps\"/\"ingress_bps\": per-worker NICs}); a "
                   "file sets the workers (--workers must match) and the latency unless "
                   "--latency is given")


def network_defaults(args) -> tuple:
    """whatif / advise with --topology: (workers, latency, bandwidth); unset, workers and
    latency are None, so that a topology file's own values apply."""
    cluster_of(args)  # the cluster options are an error here
    return args.workers, args.latency, BANDWIDTH if args.bandwidth is None else args.bandwidth


@contextmanager
def exits_on(command: str, *errors):
    """Inside, `errors` end the command with "gradcomp COMMAND: message", no traceback."""
    try:
        yield
    except errors as exc:
        raise SystemExit(f"gradcomp {command}: {exc}") from None


class DefaultsFormatter(argparse.HelpFormatter):
    """Help that ends each option's text with its default, "(default: 10 Gbit/s)", unless the
    text already names it or there is none (None, False)."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if (not action.option_strings or default is None or default is False
                or default == argparse.SUPPRESS or "default" in text.lower()):
            return text
        shown = format_rate(default) if action.type is rate else "%(default)s"
        return f"{text} (default: {shown})"
