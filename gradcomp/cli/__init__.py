"""The `gradcomp` command: it parses options and calls the library, nothing more.

One module per command group, each adding its subcommands to the parser (`add_*`) with
their handlers; `common` holds what they share. The command needs the evaluation suite's
packages (`pip install 'gradcomp[lab]'`); without them it says so in one line."""
import argparse
import importlib.util
import sys

from .. import __version__

#: What the evaluation suite and the command need beyond the hook path's torch and numpy.
LAB = ("pandas", "scipy", "tabulate", "tqdm", "matplotlib", "seaborn")


def parser() -> argparse.ArgumentParser:
    from .analyses import add_advise, add_whatif
    from .bench import add_bench
    from .common import Parser
    from .compressors import add_compressors
    from .fit import add_fit
    from .profile import add_profile
    from .run import add_report, add_run
    from .testbed import add_testbed, add_validate
    from .topology import add_topology

    top = Parser(prog="gradcomp", description=(
        "Gradient compression for data-parallel training, and whether it speeds you up."))
    top.add_argument("--version", action="version", version=f"gradcomp {__version__}")
    sub = top.add_subparsers(dest="command", required=True)
    # In the order `gradcomp --help` lists them.
    for add in (add_compressors, add_whatif, add_advise, add_topology, add_run, add_bench,
                add_fit, add_report, add_profile, add_testbed, add_validate):
        add(sub)
    for command in sub.choices.values():
        command.set_defaults(parser=command)  # errors name the command: `gradcomp whatif: ...`
    for line in sub._choices_actions:  # `gradcomp X --help` opens with X's line of --help
        sub.choices[line.dest].description = sub.choices[line.dest].description or line.help
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
    from .common import dispatch

    return dispatch(parser().parse_args(argv))
