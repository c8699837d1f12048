"""Start local worker processes quickly: forked from a server process that has already
imported torch and gradcomp (a rank starts in a few hundredths of a CPU second instead of the
~3 s a fresh interpreter spends importing them), where the platform has a fork server; else
spawned.

The fork server is killed and reaped, and its resource tracker stopped, when the process that
started them exits (after multiprocessing has joined its children): left alone the server
would see that end and tear down its preload (about 2 CPU s) afterwards, an orphan nobody waits
for, on the cores of whatever runs next.

Each worker gets the environment and the arguments of the moment it is started, as a spawned
one would: the environment is copied over before the arguments are unpickled, and the
arguments travel pickled by value (tensors included), not as shared-memory handles, so that
many tensors do not exhaust the process's file descriptors.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
from multiprocessing import forkserver, resource_tracker, util

import torch.multiprocessing as mp

# What the fork server imports once: the cost of a fresh interpreter, and torch._dynamo, which
# DistributedDataParallel's constructor imports (seconds of CPU in every rank otherwise). It
# reads its settings (TORCHDYNAMO_*, TORCH_COMPILE_*) from the environment when imported: those
# come from the environment of the first start; the rest a worker reads as it runs.
PRELOAD = ["torch", "torch._dynamo", "gradcomp.evaluation"]


def start_method() -> str:
    """"forkserver" where the platform has it, else "spawn"."""
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def start(fn, nprocs: int, *args) -> None:
    """Run fn(rank, *args) in `nprocs` local processes and wait for all of them; a failure on
    any rank raises here as torch.multiprocessing.spawn's does."""
    method = start_method()
    if method == "forkserver":
        multiprocessing.set_forkserver_preload(PRELOAD)
        _stop_at_exit()
    payload = pickle.dumps((fn, args))
    mp.start_processes(_run, args=(dict(os.environ), payload), nprocs=nprocs,
                       start_method=method)


def _stop_forkserver() -> None:
    """Kill multiprocessing's fork server, if this process started one, and reap it, and stop
    its resource tracker (a later `start` starts both anew): through the stdlib's own handles,
    as CPython's tests stop them; neither has a public one (a Python without them: left as
    multiprocessing leaves them)."""
    server = getattr(forkserver, "_forkserver", None)
    pid, stop = getattr(server, "_forkserver_pid", None), getattr(server, "_stop", None)
    if pid is not None and stop is not None:
        os.kill(pid, signal.SIGKILL)  # no teardown of its preload
        stop()  # closes its pipe, reaps it, forgets it
    tracker = getattr(resource_tracker, "_resource_tracker", None)
    stop = getattr(tracker, "_stop", None)
    if getattr(tracker, "_pid", None) is not None and stop is not None:  # started here
        stop()


_STOP_REGISTERED: list[int] = []  # the process that registered `_stop_forkserver` at exit


def _stop_at_exit() -> None:
    if _STOP_REGISTERED != [os.getpid()]:
        _STOP_REGISTERED[:] = [os.getpid()]
        # a negative priority: run by multiprocessing's exit handler after it joined its
        # children; a Finalize runs only in the process that made it, never in a fork of it
        util.Finalize(None, _stop_forkserver, exitpriority=-1)


def _run(rank: int, environ: dict, payload: bytes) -> None:
    os.environ.clear()
    os.environ.update(environ)
    fn, args = pickle.loads(payload)
    fn(rank, *args)
