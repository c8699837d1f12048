"""Start local worker processes quickly: forked from a server process that has already
imported torch and gradcomp (a rank starts in a few hundredths of a CPU second instead of the
~3 s a fresh interpreter spends importing them), where the platform has a fork server; else
spawned.

Each worker gets the environment and the arguments of the moment it is started, as a spawned
one would: the environment is copied over before the arguments are unpickled, and the
arguments travel pickled by value (tensors included), not as shared-memory handles, so that
many tensors do not exhaust the process's file descriptors.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle

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
    payload = pickle.dumps((fn, args))
    mp.start_processes(_run, args=(dict(os.environ), payload), nprocs=nprocs,
                       start_method=method)


def _run(rank: int, environ: dict, payload: bytes) -> None:
    os.environ.clear()
    os.environ.update(environ)
    fn, args = pickle.loads(payload)
    fn(rank, *args)
