"""Run scripts one after the other in this process, each in its own directory with its own
arguments, as `python SCRIPT ARGS` started there would run it: `script_runs.py RUNS`, RUNS a
JSON list of [name, directory, script, *args]. A launcher's processes (e.g. `accelerate
launch script_runs.py ...`) then serve several runs: one interpreter start-up, one set of
imports and one process group for all of them. Rank 0 prints `RUN_MARK + name` on a line of
its own before each run, so that the runs' shared output can be split (`split_runs`)."""
import gc
import json
import os
import runpy
import sys

RUN_MARK = "== script_runs: "


def split_runs(output: str) -> dict[str, str]:
    """Each run's part of the output of a `script_runs.py` launch, by name (what follows its
    mark, up to the next one; anything the launch wrote after its last run's mark, such as
    its stderr appended to its stdout, is in the last run's part)."""
    parts = output.split("\n" + RUN_MARK)[1:]
    return dict(part.split("\n", 1) if "\n" in part else (part, "") for part in parts)


def main(runs: list[list[str]]) -> None:
    for name, directory, script, *args in runs:
        if os.environ.get("RANK", "0") == "0":
            print(f"\n{RUN_MARK}{name}", flush=True)
        os.chdir(directory)
        sys.argv = [script, *args]
        runpy.run_path(script, run_name="__main__")
        sys.stdout.flush()
        gc.collect()  # the run's objects (its model, its DDP) go before the next run


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
