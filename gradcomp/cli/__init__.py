"""The `gradcomp` command: it parses options and calls the library, nothing more.

One module per command group, each adding its subcommands to the parser (`add_*`) with
their handlers; `common` holds what they share."""
import argparse

from .. import __version__
from .analyses import add_advise, add_whatif
from .bench import add_bench
from .common import Parser, dispatch
from .compressors import add_compressors
from .fit import add_fit
from .profile import add_profile
from .run import add_report, add_run
from .testbed import add_testbed, add_validate
from .topology import add_topology

# In the order `gradcomp --help` lists them.
COMMANDS = (add_compressors, add_whatif, add_advise, add_topology, add_run, add_bench, add_fit,
            add_report, add_profile, add_testbed, add_validate)


def parser() -> argparse.ArgumentParser:
    top = Parser(prog="gradcomp", description=(
        "Gradient compression for data-parallel training, and whether it speeds you up."))
    top.add_argument("--version", action="version", version=f"gradcomp {__version__}")
    sub = top.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    for command in sub.choices.values():
        command.set_defaults(parser=command)  # errors name the command: `gradcomp whatif: ...`
    for line in sub._choices_actions:  # `gradcomp X --help` opens with X's line of --help
        sub.choices[line.dest].description = sub.choices[line.dest].description or line.help
    return top


def main(argv=None) -> int:
    return dispatch(parser().parse_args(argv))
