"""Codec prices on a testbed whose ranks outnumber its cores (4 ranks on 2 here).

The hook-path bench times each codec phase two ways: on every rank at once (`t_all`: N ranks
on C cores) and on one rank while the others wait at a barrier (`t_alone`). Training sits in
between. A rank computes (forward, backward, optimizer, its codec) for a fraction u of its
iteration (`timeline.busy_s` / t_iter) and waits on the exchange for the rest; with the ranks
out of step, a codec phase meets n = 1 + (N - 1) u computing ranks on average and runs at
t_alone max(1, n / C). Between the bench's two ends (t_all = t_alone N / C when the cores are
shared evenly) that is

    t = t_alone + share (t_all - t_alone),   share = clip((n - C) / (N - C), 0, 1),

and share = 1 where N <= C (no rank waits for a core: both ends agree). u depends on the
codec's price, so the price is a fixed point, from share = 1 (every rank at once).

Measured (`benchmarks/results/codec-critical-path-2026-11-28`, ranks.csv, flat, 4 ranks on
2 cores): the ranks computing during int8's encode / decode were 1.35 / 1.25 at 100 Mbit/s,
2.72 / 3.01 at 1 Gbit/s and 2.68 / 3.32 at 2.5 Gbit/s; 1 + 3u from the same runs gives 1.37,
2.81 and 3.11."""
from __future__ import annotations

from typing import Callable

from ..model.methods import Measured, PerBucket
from ..model.timeline import Prediction, busy_s

ROUNDS = 8  # fixed-point iterations at most
CONVERGED = 0.005  # a share that moves less than this is settled


def codec_share(workers: int, cores: int, busy: float) -> float:
    """Where a codec phase sits between `t_alone` (0) and `t_all` (1) when each of `workers`
    ranks on `cores` cores computes for the fraction `busy` of its iteration."""
    if workers <= cores:
        return 1.0
    meets = 1 + (workers - 1) * min(max(busy, 0.0), 1.0)
    return min(max((meets - cores) / (workers - cores), 0.0), 1.0)


def blend(together, alone, share: float):
    """A codec cost (`Measured`, a fitted (a, b) line, or a `PerBucket` of those) at `share`
    between `alone` (0) and `together` (1): each measured size's seconds and the line's
    parameters weighted alike."""
    if isinstance(together, PerBucket):
        return PerBucket(blend(t, a, share) for t, a in zip(together, alone))
    line = tuple(a + share * (t - a) for t, a in zip(together, alone))
    if not isinstance(together, Measured):
        return line
    sizes = sorted({*together.sizes, *getattr(alone, "sizes", ())})
    return Measured(line, sizes, [alone_s + share * (together(n) - alone_s)
                                  for n, alone_s in ((n, _at(alone, n)) for n in sizes)])


def _at(cost, numel: float) -> float:
    return cost(numel) if isinstance(cost, Measured) else cost[0] + cost[1] * numel


def blended_costs(together: dict, alone: dict, share: float) -> dict:
    """`together`'s costs ({method: cost}), each method that `alone` also prices at `share`
    (`blend`)."""
    return {m: blend(c, alone[m], share) if m in alone else c for m, c in together.items()}


def shared_prediction(predict_at: Callable[[float], Prediction], workers: int, cores: int
                      ) -> tuple[Prediction, float]:
    """The fixed point of (module docstring): `predict_at(share)`'s prediction with its codec
    priced at `share`, whose busy fraction gives that share again; (prediction, share)."""
    share = 1.0
    pred = predict_at(share)
    for _ in range(ROUNDS):
        settled = codec_share(workers, cores, busy_s(pred) / pred.t_iter_s)
        if abs(settled - share) < CONVERGED:
            break
        share = settled
        pred = predict_at(share)
    return pred, share
