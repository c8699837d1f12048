"""One process, no network: top-k 1% with error feedback on a shard of the MLP's gradient
(2.1M floats, 1024 x 2055, the hierarchical hook's shard on 2 nodes x 2), its encode timed
(compress: the residual added, the selection, the residual kept), in three schedules of
2-iteration turns beside PowerSGD rank 4 with error feedback on the same shard:

* steady: top-k alone, every iteration;
* separate: the two compressors alternate, each keeping its own residual (the mock rounds);
* handed over: as `auto` switches a bucket: the leaving method's residual is taken
  (`take_residual`) and added to the next gradient, so each turn starts without a residual.

Median ms of top-k's encode at the second iteration of its turns (steady: every iteration),
over TURNS turns, per schedule, the schedules interleaved REPEATS times.

    python churn.py [TURNS] [REPEATS]
"""
import statistics
import sys
import time

import torch

from gradcomp.compressors import compressor

SHAPE = (1024, 4208650 // 2 // 1024)  # the shard as a matrix of 1024 rows, for PowerSGD
N = SHAPE[0] * SHAPE[1]


def schedule(kind: str, turns: int, gradient: torch.Tensor) -> list[float]:
    topk = compressor("topk", ratio=0.01, error_feedback=True)
    psgd = compressor("powersgd", rank=4, error_feedback=True)
    seconds = []
    for t in range(turns):
        for k in range(2):
            g = gradient.clone()
            if kind == "handed over" and k == 0:
                left = psgd.take_residual("b")
                if left is not None:
                    g.add_(left.reshape(g.shape))
            start = time.perf_counter()
            topk.compress(g, "b")
            if k == 1 or kind == "steady":
                seconds.append(time.perf_counter() - start)
        if kind == "steady":
            continue
        for k in range(2):
            m = gradient.reshape(SHAPE).clone()
            if kind == "handed over" and k == 0:
                left = topk.take_residual("b")
                if left is not None:
                    m.add_(left.reshape(SHAPE))
            psgd.compress(m, "b")
    return seconds


def main(turns: int, repeats: int) -> None:
    torch.set_num_threads(1)
    gradient = torch.randn(N) * torch.rand(N) ** 4
    times = {k: [] for k in ("steady", "separate", "handed over")}
    for _ in range(repeats):
        for kind in times:
            times[kind] += schedule(kind, turns, gradient)[2:]
    for kind, s in times.items():
        print(f"{kind}: {1000 * statistics.median(s):.2f} ms ({len(s)} encodes)")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3])) if len(sys.argv) > 1 else main(20, 3)
