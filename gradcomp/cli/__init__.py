"""The `gradcomp` command: it parses options and calls the library, nothing more.

One module per command group, each adding the options of its commands to their parsers
(`add_<command>`) with their handlers; `common` holds what they share, `parsing` the parser
itself. Only the given command's module (and the part of the library it needs) is imported:
`gradcomp --version` and `--help` import none. The command needs the evaluation suite's
packages (`pip install 'gradcomp[lab]'`); without them it says so in one line."""
import argparse
import importlib
import importlib.util
import sys

from .. import __version__
from .parsing import Parser, dispatch

#: What the evaluation suite and the command need beyond the hook path's torch and numpy.
LAB = ("pandas", "scipy", "tabulate", "tqdm", "matplotlib", "seaborn")

#: Each command, in the order `gradcomp --help` lists them: (the module of `gradcomp.cli`
#: that adds its options, its line of `gradcomp --help`, which opens its own --help).
COMMANDS = {
    "compressors": ("compressors", "compress a ResNet-50-sized gradient with every method and "
                    "print bytes on wire, error and encode/decode time"),
    "whatif": ("analyses", "scaling factor and iteration time for a profile, network and "
               "method (its speedups with the intervals advise gives); the compression needed "
               "and the break-even bandwidth"),
    "advise": ("analyses", "recommend one method (by time to accuracy with --convergence) "
               "with its speedup over fp32 DDP and a 16-bit all-reduce; rank methods by "
               "predicted iteration time"),
    "topology": ("topology", "all-reduce time by ring, tree, parameter server and forest "
                 "packing on network topologies, and the forest's rate against its cut bound"),
    "run": ("run", "the main job: measure compression, collectives and DDP training here, fit "
            "the model, and write plots and a report"),
    "bench": ("bench", "measure: compress (encode/decode cost), collective (all-reduce/"
              "all-gather/broadcast), train (DDP iterations per hook), converge (iterations "
              "to a target accuracy, with and without error feedback); train --parallelism "
              "fsdp: FSDP2 iterations per method"),
    "fit": ("fit", "fit a + b*numel per method (a compress table) or alpha, beta per "
            "collective (a collective table); prints R^2"),
    "report": ("run", "(re)write plots and report.md for a results folder"),
    "profile": ("profile", "measure your model's backward profile on this device"),
    "testbed": ("testbed", "run a command in every namespace of a bandwidth-limited local "
                "testbed (one network namespace per worker; needs root)"),
    "validate": ("testbed", "measure DDP (or FSDP2) iterations in the testbed at several rates "
                 "and hold the performance model's predictions against them (needs root: it "
                 "runs the testbed)"),
}


def parser(commands=tuple(COMMANDS)) -> argparse.ArgumentParser:
    """The command's parser with the options of `commands` (default: all); the others are
    listed by their line of help only, their modules not imported."""
    top = Parser(prog="gradcomp", description=(
        "Gradient compression for data-parallel training, and whether it speeds you up."))
    top.add_argument("--version", action="version", version=f"gradcomp {__version__}")
    sub = top.add_subparsers(dest="command", required=True)
    for name, (module, line) in COMMANDS.items():
        command = sub.add_parser(name, help=line, description=line)
        command.set_defaults(parser=command)  # errors name the command: `gradcomp whatif: ...`
        if name in commands:
            from .common import DefaultsFormatter

            command.formatter_class = DefaultsFormatter  # its help shows the defaults
            getattr(importlib.import_module(f"{__name__}.{module}"), f"add_{name}")(command)
    return top


def missing_lab() -> list[str]:
    """The `LAB` packages that are not installed."""
    return [name for name in LAB if importlib.util.find_spec(name) is None]


def main(argv=None) -> int:
    missing = missing_lab()
    if missing:
        print(f"gradcomp: the command needs the evaluation suite's packages (missing: "
              f"{', '.join(missing)}): pip install 'gradcomp[lab]'", file=sys.stderr)
        return 2
    argv = sys.argv[1:] if argv is None else list(argv)
    # The command is the first word that is not an option (--help, --version take no value).
    given = next((word for word in argv if not word.startswith("-")), None)
    return dispatch(parser([given]).parse_args(argv))
