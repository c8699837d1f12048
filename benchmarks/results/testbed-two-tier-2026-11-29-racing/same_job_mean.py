"""`same_job_racing.py` with auto's rounds timing each turn by the mean of the ranks' times,
not the slowest rank's (`choice.turn_seconds` replaced in every rank's process: every auto
variant of the job times so; code 8487d24). The same arguments:

    python same_job_mean.py RATE_BPS JOBS OUT.jsonl ROUNDS BLOCK WARMUP VARIANT [VARIANT ...]
"""
import importlib.util
import math
import os
import sys

import torch
import torch.distributed as dist

from gradcomp.comm.auto import choice
from gradcomp.comm.telemetry import seconds_between

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "same_job_racing", os.path.join(HERE, "same_job_racing.py"))
racing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(racing)
same_job = racing.same_job


def mean_turn_seconds(marks, iterations, group_of, reduce):
    """`trial.turn_seconds` with the ranks' mean: each rank's times in its own row, the rest
    -inf, so that the element-wise maximum gathers every rank's (auto's group: all ranks)."""
    iterations = list(iterations)
    own = [seconds_between(marks[i], marks[i + 1]) if i in marks and i + 1 in marks
           else -math.inf for i in iterations]
    table = torch.full((dist.get_world_size(), len(iterations)), -math.inf,
                       dtype=torch.float64)
    table[dist.get_rank()] = torch.tensor(own, dtype=torch.float64)
    every = reduce(table)
    times = {}
    for k, i in enumerate(iterations):
        column = every[:, k]
        if bool(torch.isfinite(column).all()):
            times.setdefault(group_of(i), []).append(column.mean().item())
    return times


choice.turn_seconds = mean_turn_seconds
same_job.__file__ = os.path.abspath(__file__)  # its jobs run this script, with the change

if __name__ == "__main__":
    racing.main(sys.argv)
