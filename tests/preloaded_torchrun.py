"""torchrun, with its ranks forked from an interpreter that has already imported what they
import: ``preloaded_torchrun.py MODULES TORCHRUN_ARGS...`` imports the comma-separated MODULES
(e.g. ``lightning``: ~10 CPU s a fresh rank spends on it), then runs torchrun's own command line
with ``--start-method fork --run-path`` (both torchrun's options): the same agent, rendezvous
and environment per rank, each rank running the script with `runpy.run_path` as torchrun's
``--run-path`` does. A rank starts with no state of a run: the parent only imports."""
import gc
import importlib
import sys

from torch.distributed.run import main

if __name__ == "__main__":
    preload, *argv = sys.argv[1:]
    for name in preload.split(","):
        importlib.import_module(name)
    # the preload's objects out of the collector's sight (Python's gc.freeze docs: for a
    # parent that forks), so that a rank's collections do not walk and copy them
    gc.freeze()
    main(["--start-method", "fork", "--run-path", *argv])
