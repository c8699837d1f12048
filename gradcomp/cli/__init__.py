"""The `gradcomp` command: it parses options and calls the library, nothing more.

One module per command group, each adding its subcommands to the parser (`add_*`) with
their handlers; `common` holds what they share."""
import argparse

from .analyses import add_advise, add_whatif
from .bench import add_bench
from .common import dispatch
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
    top = argparse.ArgumentParser(prog="gradcomp", description=(
        "Gradient compression for data-parallel training, and whether it speeds you up."))
    sub = top.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return top


def main(argv=None) -> int:
    top = parser()
    return dispatch(top, top.parse_args(argv))

