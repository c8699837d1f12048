"""What the command groups share: output (JSON or a table), option types, the network
options of whatif / advise / run / report, and turning the library's errors into messages."""
import argparse
import inspect
import json
import os
import sys
from contextlib import contextmanager

import torch

from ..checks import check_device, check_number
from ..evaluation.analyses.whatif import BANDWIDTH, PROFILE, WORKERS, scenario, sweep
from ..evaluation.common.units import parse_rate
from ..evaluation.model.cost_tables import BUILTIN_TABLES, MEASURED, NAMES
from ..evaluation.model.bucketing import POLICIES

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # --device of compressors, bench, profile


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
        print(json.dumps(payload, indent=1, default=float))
    else:
        print(text)


def table(frame, columns) -> str:
    from tabulate import tabulate

    return tabulate(frame[list(columns)], headers="keys", showindex=False, floatfmt=".4g")


def split(text):
    """A comma-separated option as a list; None when not given."""
    return text.split(",") if text else None


def rate(text: str) -> float:
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


def network_options(p) -> None:
    """The question's options (profile, workers, bandwidth, latency, bucketing) and --json."""
    p.add_argument("--profile", default=PROFILE, help="built-in profile (resnet50, "
                   "resnet101, vgg16, bert-base, gpt2) or a saved profile file")
    p.add_argument("--workers", type=positive_int, default=WORKERS, help="data-parallel workers")
    p.add_argument("--bandwidth", type=rate, default=rate(BANDWIDTH),
                   help="per-worker bandwidth with units: 10gbit, 100mbit, 25G (Gbit/s), "
                   "3GB (bytes/s)")
    p.add_argument("--latency", type=number("latency", minimum=0),
                   default=default_of(sweep, "latency_s"),
                   help="per-hop latency alpha, s")
    p.add_argument("--bucketing", choices=tuple(POLICIES),
                   default=default_of(scenario, "bucketing"), help="DDP buckets (25 MB, "
                   "small first bucket) or Horovod tensor fusion (5 ms cycle, 64 MB buffer)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def costs_option(p, measured: bool = False) -> None:
    """--costs: the codec-cost table a question is priced with (`cost_tables`); checked
    where it is used, so that a bad name gets the library's message."""
    names = [n for n in NAMES if measured or n != MEASURED]
    p.add_argument("--costs", help=f"codec costs: {', '.join(names)} (built-in: "
                   f"{', '.join(BUILTIN_TABLES)}, measured on that GPU) or a `gradcomp bench "
                   "compress` CSV; default: the table of the profile's device (h100 for a GPU "
                   "profile" + (", this run's measurements for a profile measured here"
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
    """whatif / advise: (workers, latency); unset, they are the library's (WORKERS and no
    latency), or with --topology None, so that a topology file's own values apply."""
    if args.topology:
        return args.workers, args.latency
    return (WORKERS if args.workers is None else args.workers,
            default_of(sweep, "latency_s") if args.latency is None else args.latency)


@contextmanager
def exits_on(command: str, *errors):
    """Inside, `errors` end the command with "gradcomp COMMAND: message", no traceback."""
    try:
        yield
    except errors as exc:
        raise SystemExit(f"gradcomp {command}: {exc}") from None


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, `gradcomp COMMAND: error: ...`, exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {' '.join(str(message).split())}\n")


INTERRUPTED, BROKEN_PIPE = 130, 141  # exit statuses as a shell reports SIGINT and SIGPIPE


def dispatch(args) -> int:
    """Run the chosen command (`args.parser` its parser). Bad input found by the library (a
    ValueError naming the option) and a file that cannot be opened become one line on stderr
    and exit status 2, no traceback; Ctrl-C and a closed pipe end quietly."""
    try:
        args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except ValueError as exc:
        args.parser.error(str(exc))
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)  # nothing left to flush at exit
        try:
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # stdout without a file descriptor (in-process)
            pass
        return BROKEN_PIPE
    except OSError as exc:  # a full disk, a folder that cannot be written, a missing file
        where = f"{exc.filename}: " if exc.filename is not None else ""
        args.parser.error(f"{where}{exc.strerror or exc}")
    except KeyboardInterrupt:
        print(f"{args.parser.prog}: interrupted (rows already measured are kept; run the same "
              "command again to resume)", file=sys.stderr)
        return INTERRUPTED
    return 0
