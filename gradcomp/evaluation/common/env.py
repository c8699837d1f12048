"""Where a measurement runs: the environment columns every measurement row carries, and the
local process groups the multi-process benchmarks start (spawned), or the group they join
when torchrun started them (`launch`), and how such a group ends (`end_process_group`).

Environment columns: device_name (the CUDA device's name, else "cpu"), cpu (the processor
model), torch_version, gradcomp_version, world_size, backend ("none" outside a process
group), hostname, python_version, date (UTC, ISO 8601, when the row was taken).
"""
from __future__ import annotations

import gc
import os
import platform
import socket
import tempfile
from datetime import datetime, timezone
from functools import lru_cache

import torch
import torch.distributed as dist

from . import processes

BACKENDS = ("gloo", "nccl")


@lru_cache(maxsize=1)
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(backend: str | None = None, world_size: int | None = None,
                device=None) -> dict:
    """The environment columns; `backend` and `world_size` default to the current process
    group's (no group: "none" and 1), `device` to the CPU."""
    from ... import __version__

    initialized = dist.is_available() and dist.is_initialized()
    if backend is None:
        backend = dist.get_backend() if initialized else "none"
    if world_size is None:
        world_size = dist.get_world_size() if initialized else 1
    device = torch.device(device if device is not None else "cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return {"device_name": name, "cpu": _cpu_model(), "torch_version": torch.__version__,
            "gradcomp_version": __version__, "world_size": int(world_size),
            "backend": str(backend), "hostname": socket.gethostname(),
            "python_version": platform.python_version(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def under_torchrun() -> bool:
    """Whether torchrun (or a launcher like it) started this process: RANK, WORLD_SIZE and
    LOCAL_RANK are set."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def workers(world_size: int | None, default: int = 2) -> int:
    """The processes of a run: under torchrun its WORLD_SIZE (a `world_size` other than that
    is an error), else `world_size` (None: `default`)."""
    if not under_torchrun():
        return default if world_size is None else world_size
    launched = int(os.environ["WORLD_SIZE"])
    if world_size is not None and world_size != launched:
        raise ValueError(f"world_size={world_size!r} is not allowed under torchrun, which "
                         f"started {launched} processes (WORLD_SIZE): drop --workers")
    return launched


def default_backend(world_size: int) -> str:
    """NCCL when there is a CUDA device for each of `world_size` processes (under torchrun:
    for each of this node's LOCAL_WORLD_SIZE processes), else gloo."""
    if under_torchrun():
        world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    if torch.cuda.is_available() and torch.cuda.device_count() >= world_size:
        return "nccl"
    return "gloo"


def check_backend(backend: str | None, world_size: int) -> str:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} is not allowed: it must be an integer >= 1")
    backend = default_backend(world_size) if backend is None else backend
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not allowed: choose one of "
                         f"{', '.join(map(repr, BACKENDS))}")
    return backend


def local_device(backend: str) -> torch.device:
    """This process's device: its own GPU (LOCAL_RANK) under NCCL, else the CPU."""
    if backend != "nccl":
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    torch.cuda.set_device(device)
    return device


def cpu_threads(world_size: int) -> int:
    """The CPU threads of each of `world_size` local workers sharing this machine's cores."""
    return max(1, (os.cpu_count() or 1) // world_size)


def spawn(fn, world_size: int, backend: str, *args) -> None:
    """Run fn(*args) in `world_size` local processes joined by a FileStore process group;
    CPU workers share the cores (each gets cores / world_size threads)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        processes.start(_entry, world_size, fn, world_size, backend, store, args)


def _entry(rank, fn, world_size, backend, store, args):
    os.environ["LOCAL_RANK"] = str(rank)
    if backend != "nccl":
        torch.set_num_threads(cpu_threads(world_size))
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank,
                            world_size=world_size)
    try:
        fn(*args)
    finally:
        end_process_group()


def launch(fn, world_size: int, backend: str, *args) -> None:
    """Run fn(*args) on every rank: under torchrun in its process group (joined here unless
    it already is, left after), with rank 0's `args` on every rank (the plan of rank 0, whose
    node holds the tables); else in `world_size` processes it spawns (`spawn`)."""
    if not under_torchrun():
        spawn(fn, world_size, backend, *args)
        return
    joined = dist.is_initialized()
    if not joined:
        dist.init_process_group(backend, init_method="env://")
    try:
        local_device(backend)  # NCCL's object broadcast needs this process's GPU set
        shared = [args]
        dist.broadcast_object_list(shared, src=0)
        fn(*shared[0])
    finally:
        if not joined:
            end_process_group()


def end_process_group() -> None:
    """Destroy the default process group after collecting the garbage of the work that ran
    in it (call it once that work's function has returned). A DDP freed after its group is
    destroyed has its reducer drop the group's last reference under the GIL, and the group's
    destructor joins a gloo thread that may be waiting for the GIL to free a Python comm hook's
    future callback: a hang (pytorch/pytorch#56297). A DDP can sit in a reference cycle (the
    first one a process makes does), so the function's return may not free it; collected
    first, it leaves the group to the registry that destroy_process_group empties."""
    gc.collect()
    dist.destroy_process_group()


def is_rank_zero() -> bool:
    """Whether this process writes and prints: rank 0 under torchrun, or not under it."""
    return int(os.environ.get("RANK", "0")) == 0 if under_torchrun() else True


def init_from_env(backend: str | None = None) -> str:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR, ...)."""
    backend = check_backend(backend, int(os.environ.get("WORLD_SIZE", "1")))
    dist.init_process_group(backend, init_method="env://")
    return backend


def barrier(device: torch.device) -> None:
    if device.type == "cuda":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()
