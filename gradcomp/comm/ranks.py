"""The ranks a hook averages over: its process group, with size, rank and backend, and the
per-bucket gloo groups on which multi-round exchanges chain their rounds."""
from __future__ import annotations

import atexit

import torch.distributed as dist

#: (default group, bucket index) -> (default group, that bucket's own gloo group), and the
#: hierarchical hook's groups (`kept_groups`), shared by every hook in this process and kept
#: until it exits. A gloo group freed by one of its own worker threads aborts the process
#: ("Resource deadlock avoided": its destructor joins the thread it runs on), and a group
#: owned by a hook could be freed that way when the last reference to the hook sat in a
#: future callback at teardown; here no callback holds one.
#: They are freed at exit, on the main thread, before the interpreter's own teardown: left to
#: it, a spawned worker that had chained rounds aborted at exit in 2 of 12 runs ("terminate
#: called without an active exception"; 0 of 28 with this).
_ROUND_GROUPS: dict[tuple, tuple] = {}
atexit.register(_ROUND_GROUPS.clear)


def release_round_groups() -> None:
    """Let go of the per-bucket groups (before the process group is ended)."""
    _ROUND_GROUPS.clear()


class Ranks:
    """`process_group` (None: the default group) and what the hook asks of it; the size and
    backend are read once, the rank each time (it never changes, and reading it is cheap).

    `world_size` given: ranks of that size that exchange nothing (backend "none"), for timing
    a communicator's own encode and decode without a process group (the hook-path bench)."""

    def __init__(self, process_group=None, world_size: int | None = None):
        if world_size is not None and (process_group is not None or isinstance(world_size, bool)
                                       or not isinstance(world_size, int) or world_size < 1):
            raise ValueError(f"world_size={world_size!r} is not allowed: give an integer >= 1, "
                             "and no process_group with it")
        self.process_group = process_group
        self._world_size: int | None = world_size
        self._backend: str | None = None if world_size is None else "none"

    @property
    def group(self):
        return self.process_group if self.process_group is not None else dist.group.WORLD

    @property
    def world_size(self) -> int:
        if self._world_size is None:
            self._world_size = dist.get_world_size(self.group) if dist.is_initialized() else 1
        return self._world_size

    @property
    def rank(self) -> int:
        return dist.get_rank(self.group) if dist.is_initialized() else 0

    @property
    def backend(self) -> str:
        if self._backend is None:
            self._backend = dist.get_backend(self.group) if dist.is_initialized() else "none"
        return self._backend

    def can_chain(self, device) -> bool:
        """Whether multi-round exchanges may chain their rounds on per-bucket gloo groups:
        gloo on the default group with CPU tensors and more than one rank. Elsewhere (NCCL,
        CUDA tensors on gloo, a custom process group) they wait for each round instead."""
        return (self.process_group is None and self.world_size > 1
                and self.backend == "gloo" and device.type == "cpu")

    def round_group(self, bucket_index: int, device):
        """A gloo group of all ranks for one bucket's multi-round exchange, created on first
        use (in bucket order, the same on every rank); None where the rounds must wait
        instead (see `can_chain`)."""
        if not self.can_chain(device):
            return None
        return kept_groups(bucket_index, lambda: dist.new_group(backend="gloo"))


def kept_groups(key, create):
    """What `create()` returns (process groups, made collectively: every rank calls it in the
    same order), kept under `key` for the default group in `_ROUND_GROUPS` until exit."""
    world = dist.group.WORLD
    full = (id(world), key)
    if full not in _ROUND_GROUPS:
        _ROUND_GROUPS[full] = (world, create())
    return _ROUND_GROUPS[full][1]
