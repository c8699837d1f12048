"""`rounds_hook.py` with every CPU top-k selection on every rank recorded: the variant and
iteration it served, its seconds, its passes over the shard's magnitudes (one, or more where
the sampled threshold left fewer than k candidates) and its candidates (the exact refinement
sorts these), the minor page faults of its thread meanwhile and its thread's CPU seconds.
The same arguments; the record gains `selections`: per rank, [variant, phase, iteration,
seconds, passes, candidates, page faults, CPU seconds] (files written before: without the
last two).

    python rounds_topk.py RATE_BPS JOBS OUT.jsonl ROUNDS BLOCK WARMUP MOCK VARIANT [...]
"""
import importlib.util
import os
import resource
import sys
import time

import torch.distributed as dist

from gradcomp.kernels.sparse import reference

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("rounds_hook",
                                               os.path.join(HERE, "rounds_hook.py"))
rounds_hook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rounds_hook)
rounds_hook.__file__ = os.path.abspath(__file__)  # its jobs run this script

SELECTIONS = []
_positions, _at_least = reference.topk_positions, reference._at_least
_passes = []


def counted_at_least(mags, t, mask=None):
    cand = _at_least(mags, t, mask)
    _passes.append(cand.numel())
    return cand


def timed_positions(flat, k, scratch=None):
    _passes.clear()
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    start, cpu = time.perf_counter(), time.thread_time()
    out = _positions(flat, k, scratch)
    seconds, cpu = time.perf_counter() - start, time.thread_time() - cpu
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - faults
    now = rounds_hook.NOW
    SELECTIONS.append([now.get("name"), now.get("phase"), now.get("iteration"), seconds,
                       len(_passes), _passes[-1] if _passes else 0, faults, cpu])
    return out


def gathered() -> dict:
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, SELECTIONS)
    return {"selections": every}


reference._at_least, reference.topk_positions = counted_at_least, timed_positions
rounds_hook.EXTRAS.append(gathered)

if __name__ == "__main__":
    rounds_hook.main(sys.argv)
