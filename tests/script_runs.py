"""Run scripts one after the other in this process, each in its own directory with its own
arguments, as `python SCRIPT ARGS` (or `python -m MODULE ARGS`) started there would run it:
`script_runs.py RUNS`, RUNS a JSON list of [name, directory, script, *args] or [name,
directory, "-m", module, *args]; a run that exits with status 0 lets the next one start. A
launcher's processes (e.g. `accelerate launch script_runs.py ...`) then serve several runs: one
interpreter start-up, one set of imports and one process group for all of them. Rank 0 writes
`RUN_MARK + name` on a line of its own before each run (`mark`), so that the runs' shared output can be
split (`split_runs`).

A run after one that ended torchrun's process group makes its own on a store of its own
(`fresh_store`): the default group's keys in torchrun's store are the same each time, and a
rank could read the last group's address of another before that rank wrote its new one; and
Accelerate's process state, a singleton that would keep the ended group's settings and never
make a new group, is reset as a fresh process has it (`fresh_accelerate`)."""
import gc
import json
import os
import runpy
import socket
import sys

import torch.distributed as dist

RUN_MARK = "== script_runs: "


def split_runs(output: str) -> dict[str, str]:
    """Each run's part of the output of a `script_runs.py` launch, by name (what follows its
    mark, up to the next one; anything the launch wrote after its last run's mark, such as
    its stderr appended to its stdout, is in the last run's part). A mark is found wherever it
    is: another rank's output written between the mark's line break and the mark (a pipe's
    writes longer than PIPE_BUF interleave) must not hide it."""
    parts = output.split(RUN_MARK)[1:]
    return dict(part.split("\n", 1) if "\n" in part else (part, "") for part in parts)


def mark(name: str) -> None:
    """Write the run's mark line in one write of its own, what the last run left buffered
    first. A write of under PIPE_BUF bytes to a pipe is never split by another process's; a
    `print` may write the text and its line break apart (seen: another rank's line between
    them, which made the run's name end in that line)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(sys.stdout.fileno(), f"\n{RUN_MARK}{name}\n".encode())


def fresh_store(name: str) -> None:
    """Point env:// at a new store that rank 0 hosts on a free port, agreed on through
    torchrun's store (read while its agent still hosts it). Its port is kept aside the first
    time: this replaces MASTER_PORT, and a second fresh store sought at MASTER_PORT reached the
    first one, gone with its group, and waited there."""
    agent_port = os.environ.setdefault("SCRIPT_RUNS_AGENT_PORT", os.environ["MASTER_PORT"])
    agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(agent_port), is_master=False)
    key = f"script_runs/{name}/port"
    if os.environ["RANK"] == "0":
        with socket.socket() as s:
            s.bind((os.environ["MASTER_ADDR"], 0))
            agent.set(key, str(s.getsockname()[1]))
    os.environ["MASTER_PORT"] = agent.get(key).decode()
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"  # rank 0 hosts it


def fresh_accelerate() -> None:
    """Accelerate's shared states reset, if it is imported (as its own tests reset them)."""
    state = sys.modules.get("accelerate.state")
    if state is not None:
        state.AcceleratorState._reset_state(reset_partial_state=True)
        state.GradientState._reset_state()


def main(runs: list[list[str]]) -> None:
    for i, (name, directory, script, *args) in enumerate(runs):
        if i and "RANK" in os.environ and not dist.is_initialized():
            fresh_store(name)
            fresh_accelerate()
        if os.environ.get("RANK", "0") == "0":
            mark(name)
        os.chdir(directory)
        try:
            if script == "-m":
                sys.argv = [*args]  # run_module puts the module's file in front
                runpy.run_module(args[0], run_name="__main__", alter_sys=True)
            else:
                sys.argv = [script, *args]
                runpy.run_path(script, run_name="__main__")
        except SystemExit as done:
            if done.code not in (None, 0):
                raise
        sys.stdout.flush()
        gc.collect()  # the run's objects (its model, its DDP) go before the next run


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
