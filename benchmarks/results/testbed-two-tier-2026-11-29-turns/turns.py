"""Where auto's timed turns lose time: the fixed hooks and auto in one job on the two-tier
testbed (`../testbed-two-tier-2026-11-29-margin/same_job.py`'s variants), in phases:

1. each fixed variant's warm-up, every iteration kept;
2. rotation A: the fixed variants in rotating blocks of BLOCK iterations, ROUNDS rounds;
3. mock rounds: the fixed variants (separate DDP models) in auto's confirmation order, turns
   of two iterations (MOCK_TURN), 5 rounds, every iteration kept with its place in the turn;
4. auto's warm-up up to `settled_by`, every iteration of its confirmation rounds kept with
   the contender that carried it (as auto times them: first bucket to the next iteration's,
   the slowest rank's; and every rank's);
5. mock rounds again;
6. rotation B: every variant, auto included.

Every time is the slowest rank's.

    python turns.py RATE_BPS JOBS OUT.jsonl ROUNDS BLOCK WARMUP AUTO FIXED [FIXED ...]

FIXED in auto's candidate order (none, bf16, powersgd, topk). One line per job.
"""
import importlib.util
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from gradcomp import comm
from gradcomp.comm.auto import choice, trial
from gradcomp.comm.telemetry import seconds_between
from gradcomp.evaluation.testbed.nodes import NodeTestbed
from gradcomp.evaluation.workloads.load import load_workload

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "same_job", os.path.join(HERE, "..", "testbed-two-tier-2026-11-29-margin", "same_job.py"))
same_job = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(same_job)

#: Iterations of a mock round's turn (the environment's MOCK_TURN; default auto's `TURN`).
MOCK_TURN = int(os.environ.get("MOCK_TURN", trial.TURN))
ROUNDS_SEEN = []  # per confirmation: [(iteration, contender, slowest rank's s, every rank's)]
_round_seconds = choice.Chooser._round_seconds


def _recording(self, reduce):
    iterations = range(self.confirm_start, self.explore_end)
    times = trial.turn_seconds(self.marks, iterations, lambda i: i, reduce)
    own = torch.tensor([seconds_between(self.marks[i], self.marks[i + 1]) for i in iterations],
                       dtype=torch.float64)
    every = [torch.zeros_like(own) for _ in range(dist.get_world_size())]
    dist.all_gather(every, own)
    ROUNDS_SEEN.append([(i, self._contender_at(i), times[i][0], [float(e[k]) for e in every])
                        for k, i in enumerate(iterations)])
    return _round_seconds(self, reduce)


choice.Chooser._round_seconds = _recording


def slowest(values: list[float]) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def job(out: str, rounds: int, block: int, warmup: int, auto: str, fixed: list[str]) -> None:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    runs = {}
    for name in fixed + [auto]:
        workload = load_workload("mlp", "model", batch_size=64)
        ddp = DistributedDataParallel(workload.model, bucket_cap_mb=25.0)
        method, options = same_job.VARIANTS[name]
        state = comm.register(ddp, method, **options)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        runs[name] = (workload, ddp, opt, workload.batch(rank, 0, torch.device("cpu")), state)

    def step(name: str) -> float:
        workload, ddp, opt, (x, y), _ = runs[name]
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        workload.loss(ddp(x), y).backward()
        opt.step()
        return time.perf_counter() - start

    def rotation(names: list[str]) -> dict:
        times = {n: [] for n in names}
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                times[name].extend(step(name) for _ in range(block))
        return {n: slowest(t) for n, t in times.items()}

    def mock_rounds() -> list:
        seen, n = [], len(fixed)
        for turn in range(5 * n):
            name = fixed[(turn + turn // n) % n]
            seen += [(name, k, step(name)) for k in range(MOCK_TURN)]
        return [(name, k, s) for (name, k, _), s in zip(seen, slowest([s for *_, s in seen]))]

    record = {"fixed": fixed, "auto": auto, "block": block, "warmup": warmup,
              "warmups": {n: slowest([step(n) for _ in range(warmup)]) for n in fixed}}
    record["rotation_a"] = rotation(fixed)
    record["mock_before"] = mock_rounds()
    state = runs[auto][4]
    settled = slowest([step(auto) for _ in range(state.settled_by)])
    record["auto_warmup"] = settled
    record["auto_rounds"] = [[(i, state.route.label(c), s, ranks) for i, c, s, ranks in seen]
                             for seen in ROUNDS_SEEN]
    record["mock_after"] = mock_rounds()
    record["rotation_b"] = rotation(fixed + [auto])
    record["choices"] = state.choices_text()
    record["decision"] = state.decision_text()
    if rank == 0:
        with open(out, "a") as f:
            f.write(json.dumps(record) + "\n")
    dist.destroy_process_group()


def main(rate: float, jobs: int, out: str, args: list[str]) -> None:
    with NodeTestbed(2, 2, rate, threads=1) as testbed:
        for j in range(jobs):
            testbed.run([sys.executable, __file__, "--job", out, *args], timeout=1800)
            print(f"job {j} done", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--job":
        job(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6],
            sys.argv[7:])
    else:
        main(float(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:])
