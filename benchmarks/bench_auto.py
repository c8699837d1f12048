"""`auto` against its candidates on the testbed (issue #16's done-when), 2 workers, the built-in
MLP, gloo, one thread per worker (as `gradcomp validate`). Needs root.

    python benchmarks/bench_auto.py rates OUT   # (a) median iteration time at each rate
    python benchmarks/bench_auto.py drop OUT    # (b) 2.5 Gbit/s -> 100 Mbit/s halfway
    python benchmarks/bench_auto.py converge OUT  # (c) iterations to target (no testbed)
    python benchmarks/bench_auto.py summary OUT   # OUT/summary.md from the tables there

Every run of a method is a job of its own (fresh worker processes, as a user's job runs:
methods run one after another in one process slowed the later ones by up to 10%, measured
on auto after top-k at 100 Mbit/s), methods one after another, `--rounds` times.

rates: at each of `validate`'s default rates, DDP without a hook, each of auto's default
candidates as a fixed method (same options), and auto (`--auto`: its options as JSON); rows
in OUT/rates.csv: per rate, method and round the median iteration time over the timed
iterations and over the steady ones (from the end of auto's exploration on, the same window
for every method), auto's choices, and every iteration's time (the slowest rank's).

drop: every method trains `--iterations` iterations (after `--warmup`) at 2.5 Gbit/s; at the
first timed iteration of the second half rank 0 asks this process to drop the link to 100
Mbit/s (a file handshake; the workers meet at a barrier after it, so the wait is not timed)
and the rate goes back up before the next run. Rows in OUT/drop.csv: per method and round
the total, before and after the drop, each iteration's time (slowest rank), and for auto its
switches (iteration, bucket, candidate) and the iterations from the drop to its first switch.
converge: `gradcomp bench converge`'s default task and target (teacher, accuracy 0.85, seeds
0..`--seeds`-1, 600 iterations at most, local gloo workers: no testbed) with each candidate
without and with error feedback (none: without), auto, and auto among the compressed
candidates only, each without and with the guard (every 20 iterations), into
OUT/converge.csv.

OUT/conditions.csv keeps the load average before and after (the machine may be shared).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from gradcomp import comm
from gradcomp.comm.auto import DEFAULT_CANDIDATES
from gradcomp.evaluation.common.env import end_process_group, environment, init_from_env
from gradcomp.evaluation.common.store import ResultTable, write_atomic
from gradcomp.evaluation.testbed.testbed import Testbed
from gradcomp.evaluation.testbed.validate import DEFAULT_RATES
from gradcomp.evaluation.workloads.load import load_workload

HIGH, LOW = "2.5gbit", "100mbit"


def cases(auto_options: dict, methods: str = "") -> list[tuple[str, dict]]:
    """DDP, each default candidate as a fixed method, then auto; only `methods` (a
    comma-separated list of names), in its order, when given."""
    fixed = [(c, {}) if isinstance(c, str) else (c[0], dict(c[1])) for c in DEFAULT_CANDIDATES]
    every = dict([("ddp", {}), *fixed, ("auto", auto_options)])
    names = methods.split(",") if methods else list(every)
    unknown = [n for n in names if n not in every]
    if unknown:
        raise SystemExit(f"--methods: {', '.join(unknown)} not allowed; choose among "
                         f"{', '.join(every)}")
    return [(n, every[n]) for n in names]


# -- inside the testbed (every rank) -------------------------------------------------------
def _ask(folder: Path, rate: str) -> None:
    """Rank 0: have the parent set every link to `rate`; wait until it has."""
    write_atomic(folder / "ask", rate)  # never read half-written
    while not (folder / "done").exists():
        time.sleep(0.005)


def timed_run(name: str, options: dict, steps: int, before=None):
    """`steps` training iterations of the MLP with `name`'s hook (from a fresh model), each
    timed on every rank; the slowest rank's times, and the hook state. `before(i)` runs
    before iteration i, untimed."""
    rank = dist.get_rank()
    workload = load_workload("mlp", batch_size=64)
    model = workload.model
    x, y = workload.batches(rank, 0)
    ddp = DistributedDataParallel(model, bucket_cap_mb=25.0)
    state = None if name == "ddp" else comm.register(ddp, name, **options)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    times = []
    for i in range(steps):
        if before is not None:
            before(i)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.tolist(), state


def auto_model(state) -> str:
    """auto's network fit and each bucket's predicted seconds per candidate, as JSON."""
    ch = state.chooser
    buckets = sorted({b for b, _ in ch.codec})
    return json.dumps({"alpha_s": ch.alpha, "bandwidth_bps": 8 / ch.x if ch.x else None,
                       "predicted_s": {b: {state.label(c): ch.predict(b, c)
                                           for c in range(len(ch.transfers))}
                                       for b in buckets}})


def _median(values) -> float:
    return float(torch.tensor(values).median()) if values else float("nan")


def worker_rates(a) -> None:
    """One run of the method `--methods` names; rank 0 appends its row: median over the
    timed iterations, and over the steady ones (from the end of auto's exploration on, the
    same window for every method)."""
    init_from_env("gloo")
    auto = json.loads(a.auto)
    steady_from = (auto.get("start_iter", 1)
                   + len(auto.get("candidates", DEFAULT_CANDIDATES)) * auto.get("explore_iters", 3))
    try:
        [(name, options)] = cases(auto, a.methods)
        times, state = timed_run(name, options, a.warmup + a.iterations)
        if dist.get_rank() == 0:
            ResultTable(a.out, ("rate", "method", "round")).append({
                "rate": a.rate, "method": name, "round": a.round,
                "options": json.dumps(options), "warmup": a.warmup,
                "iterations": a.iterations, "steady_from": steady_from,
                "median_s": _median(times[a.warmup:]),
                "median_steady_s": _median(times[max(a.warmup, steady_from):]),
                "auto_choices": state.choices_text() if name == "auto" else "",
                "auto_model": auto_model(state) if name == "auto" else "",
                "times_s": json.dumps(times)})
    finally:
        end_process_group()  # the run's hooked DDP freed first


def worker_drop(a) -> None:
    """One run of the method `--methods` names, the rate dropped halfway; rank 0 appends
    its row."""
    init_from_env("gloo")
    rank = dist.get_rank()
    table = ResultTable(a.out, ("method", "round")) if rank == 0 else None
    drop_at = a.warmup + a.iterations // 2

    def drop(i):
        if i == drop_at:
            if rank == 0:
                _ask(Path(a.handshake), LOW)
            dist.barrier()

    try:
        [(name, options)] = cases(json.loads(a.auto), a.methods)
        times, state = timed_run(name, options, a.warmup + a.iterations, drop)
        if rank == 0:
            t, half = times[a.warmup:], a.iterations // 2
            switches = state.switches if name == "auto" else []
            after = [i for i, _, _ in switches if i >= drop_at]
            table.append({
                "method": name, "round": a.round, "options": json.dumps(options),
                "warmup": a.warmup, "iterations": a.iterations, "drop_at_iteration": drop_at,
                "total_s": sum(t), "before_drop_s": sum(t[:half]),
                "after_drop_s": sum(t[half:]), "median_before_s": _median(t[:half]),
                "median_after_s": _median(t[half:]),
                "iterations_to_switch": after[0] - drop_at if after else "",
                "switches": json.dumps(switches),
                "auto_model": auto_model(state) if name == "auto" else "",
                "times_s": json.dumps(times)})
    finally:
        end_process_group()  # the run's hooked DDP freed first


# -- the parent (root) ---------------------------------------------------------------------
def _conditions(out: Path, what: str, load: float, start: float) -> None:
    ResultTable(out / "conditions.csv", ("what",)).append(
        {"what": what, "load_1min_before": load, "load_1min_after": os.getloadavg()[0],
         "seconds": time.monotonic() - start, "cpus": os.cpu_count(), **environment()})


def _runs(a) -> list[tuple[int, str]]:
    """(round, method) of every run, in order: the methods one after another, each round."""
    return [(r, name) for r in range(a.rounds) for name, _ in cases(json.loads(a.auto),
                                                                   a.methods)]


def _worker(what: str, out: Path, a, round_: int, name: str) -> list[str]:
    return [sys.executable, __file__, what, "--out", str(out), "--round", str(round_),
            "--methods", name, "--warmup", str(a.warmup), "--iterations", str(a.iterations),
            "--auto", a.auto]


def run_rates(out: Path, a) -> None:
    for rate in a.rates.split(","):
        load, start = os.getloadavg()[0], time.monotonic()
        with Testbed(2, rate, threads=1) as testbed:
            for round_, name in _runs(a):
                print(f"bench_auto: {rate} round {round_} {name}", file=sys.stderr, flush=True)
                testbed.run(_worker("worker-rates", out / "rates.csv", a, round_, name)
                            + ["--rate", rate], timeout=3000)
        _conditions(out, f"rates {rate}", load, start)


def run_drop(out: Path, a) -> None:
    handshake = out / "handshake"
    handshake.mkdir(parents=True, exist_ok=True)
    load, start = os.getloadavg()[0], time.monotonic()
    with Testbed(2, HIGH, threads=1) as testbed:
        for round_, name in _runs(a):
            print(f"bench_auto: drop round {round_} {name}", file=sys.stderr, flush=True)
            for old in handshake.iterdir():
                old.unlink()
            stop = threading.Event()

            def serve():  # the one rate change a run asks for
                while not stop.is_set():
                    if (handshake / "ask").exists():
                        testbed.set_rate((handshake / "ask").read_text())
                        (handshake / "done").write_text("")
                        return
                    time.sleep(0.005)

            server = threading.Thread(target=serve, daemon=True)
            server.start()
            try:
                testbed.run(_worker("worker-drop", out / "drop.csv", a, round_, name)
                            + ["--handshake", str(handshake)], timeout=3000)
            finally:
                stop.set()
                server.join()
                testbed.set_rate(HIGH)
    _conditions(out, "drop", load, start)


def run_converge(out: Path, a) -> None:
    from gradcomp.evaluation.benches.converge import bench_converge

    compressed = [c for c in DEFAULT_CANDIDATES if c != "none"]
    methods = [c if isinstance(c, str) else (c[0], {k: v for k, v in c[1].items()
                                                    if k != "error_feedback"})
               for c in DEFAULT_CANDIDATES]
    methods += [("auto", {}), ("auto", {"guard": {"every": 20}}),
                ("auto", {"candidates": compressed}),
                ("auto", {"candidates": compressed, "guard": {"every": 20}})]
    load, start = os.getloadavg()[0], time.monotonic()
    bench_converge(methods, seeds=a.seeds, out=out / "converge.csv", progress=True)
    _conditions(out, "converge", load, start)


def _variant(method: str, options: dict, error_feedback: bool) -> str:
    if method != "auto":
        return " ".join([method, *(f"{k}={v}" for k, v in options.items()
                                   if k in ("rank", "ratio"))] + (["+EF"] if error_feedback
                                                                  else []))
    names = [c[0] for c in options["candidates"]]
    return "auto" + ("" if "none" in names else f" ({', '.join(names)})") + (
        f" guard={options['guard']}" if options.get("guard") else "")


def summary(out: Path, a=None) -> str:
    """OUT/summary.md from the tables that are there."""
    import pandas as pd

    parts = []
    if (out / "rates.csv").exists():
        rows = []
        for rate, runs in pd.read_csv(out / "rates.csv").groupby("rate", sort=False):
            med = runs.groupby("method", sort=False)[["median_s", "median_steady_s"]].median()
            fixed = med.drop(index=["ddp", "auto"], errors="ignore")
            auto = runs[runs["method"] == "auto"]
            for col in ("median_s", "median_steady_s"):
                row = {"rate": rate, "over": "all timed" if col == "median_s" else "steady",
                       **{m: med.loc[m, col] * 1e3 for m in med.index}}
                if len(fixed) and len(auto):  # the ratios of the methods that ran
                    best = fixed[col].idxmin()
                    per_round = runs.pivot_table(index="round", columns="method", values=col)
                    row.update({"best fixed": best,
                                "auto / best": med.loc["auto", col] / fixed.loc[best, col],
                                "per round": " ".join(f"{v:.2f}" for v in per_round["auto"]
                                                      / per_round[fixed.index].min(axis=1))})
                if len(auto) and "ddp" in med.index:
                    row["auto / ddp"] = med.loc["auto", col] / med.loc["ddp", col]
                if len(auto):
                    row["auto's choices"] = "; ".join(auto["auto_choices"])
                rows.append(row)
        parts.append("## (a) median iteration time, ms (median over rounds; per round: "
                     "auto / the round's best fixed candidate)\n\n"
                     + pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3g"))
    if (out / "drop.csv").exists():
        drop = pd.read_csv(out / "drop.csv")
        table = drop[["round", "method", "total_s", "before_drop_s", "after_drop_s",
                      "iterations_to_switch", "switches"]]
        totals = drop.pivot_table(index="round", columns="method", values="total_s")
        fixed = [m for m in totals.columns if m not in ("ddp", "auto")]
        ratios = ("" if "auto" not in totals or not fixed else
                  "\n\nauto's total / the round's best fixed candidate's, per round: "
                  + " ".join(f"{v:.2f}" for v in totals["auto"] / totals[fixed].min(axis=1)))
        parts.append("## (b) 2.5 Gbit/s -> 100 Mbit/s halfway\n\n"
                     + table.to_markdown(index=False, floatfmt=".3g") + ratios)
    if (out / "converge.csv").exists():
        conv = pd.read_csv(out / "converge.csv")
        conv["variant"] = [_variant(m, json.loads(o), e) for m, o, e in
                           zip(conv["method"], conv["options"], conv["error_feedback"])]
        wide = conv.pivot_table(index="variant", columns="seed",
                                values="iterations_to_target", sort=False)
        wide["auto_choices"] = conv.groupby("variant", sort=False)["auto_choices"].agg(
            lambda c: "; ".join(map(str, c.dropna())))
        parts.append("## (c) iterations to target (teacher, accuracy 0.85), per seed\n\n"
                     + wide.reset_index().to_markdown(index=False))
    text = "\n\n".join(parts) + "\n"
    write_atomic(out / "summary.md", text)
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("rates", "drop", "converge", "summary", "worker-rates",
                                    "worker-drop"))
    p.add_argument("out", nargs="?")
    p.add_argument("--out", dest="worker_out")
    p.add_argument("--rates", default=",".join(DEFAULT_RATES))
    p.add_argument("--rate")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--auto", default="{}", help="auto's options as JSON")
    p.add_argument("--methods", default="", help="comma-separated: only these of ddp, "
                   "the candidates' names and auto (rates, drop)")
    p.add_argument("--rounds", type=int, default=1, help="rates, drop: runs of each method")
    p.add_argument("--round", type=int, default=0)
    p.add_argument("--seeds", type=int, default=3, help="converge: seeds 0..SEEDS-1")
    p.add_argument("--handshake")
    a = p.parse_args(argv)
    if a.what.startswith("worker"):
        a.out = a.worker_out
        (worker_rates if a.what == "worker-rates" else worker_drop)(a)
        return 0
    if a.what in ("rates", "drop"):
        cases(json.loads(a.auto), a.methods)  # a bad --methods fails before the testbed
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    {"rates": run_rates, "drop": run_drop, "converge": run_converge,
     "summary": summary}[a.what](out, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
