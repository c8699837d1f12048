"""Timing on the device's own timeline: warm up, synchronise, repeat, take the median."""
import time

import torch


class Clock:
    """Marks on the device's timeline: CUDA events on CUDA, perf_counter elsewhere."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start, end) -> float:
        """Elapsed seconds between two marks (after `sync`)."""
        return start.elapsed_time(end) / 1e3 if self.cuda else end - start


def timed(fn, clock: Clock) -> tuple[float, object]:
    """Seconds of one call of `fn` on `clock`'s device, synchronised before and after, and
    its result."""
    clock.sync()
    start = clock.mark()
    result = fn()
    end = clock.mark()
    clock.sync()
    return clock.seconds(start, end), result


def slowest_rank_seconds(fn, device: torch.device, repeats: int, warmup: int,
                         reset=None) -> tuple[float, float, object]:
    """For a collective `fn` called on every rank: median and spread of the slowest rank's
    time over `repeats` calls after `warmup`, each started after `reset()` (if given) and a
    barrier; and the last call's result."""
    slowest, result = slowest_rank_times(fn, device, repeats, warmup, reset)
    return slowest.median().item(), (slowest.max() - slowest.min()).item(), result


def slowest_rank_times(fn, device: torch.device, repeats: int, warmup: int,
                       reset=None, lead_in=None) -> tuple[torch.Tensor, object]:
    """`slowest_rank_seconds`' slowest-rank times of each timed call (float64), and the last
    call's result. `lead_in`: called untimed after the barrier, right before each call."""
    import torch.distributed as dist

    from .env import barrier

    clock, times, result = Clock(device), [], None
    for i in range(warmup + repeats):
        if reset is not None:
            reset()
        barrier(device)
        if lead_in is not None:
            lead_in()
        clock.sync()
        start = clock.mark()
        result = fn()
        end = clock.mark()
        clock.sync()
        if i >= warmup:
            times.append(clock.seconds(start, end))
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.cpu(), result


def compute_for(seconds: float, device: torch.device) -> None:
    """Keep this process's device busy with small element-wise work for about `seconds` (as
    training computes before it calls a collective)."""
    work = torch.ones(1 << 14, device=device)
    clock = Clock(device)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        work.mul_(1.0)
        clock.sync()
