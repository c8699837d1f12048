"""Multi-process workers for the hook tests: each spawn runs many cases and saves results per
rank, so that the parent test process compares ranks and references."""
import os
import tempfile
import time
from collections import Counter
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook as torch_psgd
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp
import gradcomp.comm
from gradcomp.evaluation.common import processes
from gradcomp.evaluation.common.env import end_process_group
from gradcomp.comm.auto.choice import Chooser, Sample, Transfer

METHODS = gradcomp.names()
HOOKS = METHODS + ["auto"]  # what the training, checkpoint and resume cases run
STEPS = 30
RESUME_AT = 12
# Per-method options and learning rates for the training test (sparse methods with error
# feedback, as they are used; sign methods with a smaller step, as their output has unit size).
OPTIONS = {
    "topk": dict(ratio=0.05, error_feedback=True),
    "randomk": dict(ratio=0.1, error_feedback=True),
    "threshold": dict(ratio=0.05, error_feedback=True),
    "powersgd": dict(rank=2),
    "efsignsgd": dict(error_feedback=True),
    "onebit": dict(error_feedback=True),
    # decided after 4 candidates x 2 iterations at most (no confirmation rounds: timing would
    # decide how many), before the checkpoint; no re-decision (no drift check, periodic or
    # after a slowdown: timing would decide); the guard's intervals end at 5, 9, 13, ...: the
    # checkpoint falls inside one
    "auto": dict(explore_iters=2, confirm_rounds=0, check_every=10_000, slowdown=None,
                 guard={"every": 4}),
}
LR = {"signsgd": 0.002}
#: What torch.profiler names the collectives gradcomp's hooks issue.
COLLECTIVES = ("c10d::allreduce_", "c10d::allgather_", "c10d::broadcast_",
               "c10d::reduce_scatter_", "c10d::barrier")
LR_DEFAULT = 0.02


def spawn(fn, world_size: int, *args, backend: str = "gloo") -> list:
    """Run fn(rank, world_size, out_dir, *args) in `world_size` processes and return what each
    rank saved."""
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        processes.start(_entry, world_size, fn, world_size, store, tmp, args, backend)
        paths = [os.path.join(tmp, f"rank{r}.pt") for r in range(world_size)]
        return [torch.load(p, weights_only=False) if os.path.exists(p) else None for p in paths]


def _entry(rank, fn, world_size, store, out_dir, args, backend):
    # One intra-op thread per rank, as torchrun gives each of several local ranks: ranks with
    # a thread per core each, more ranks than cores, spend most of their CPU in OpenMP's spin
    # waits for one another (a step of the small model: ~60 CPU ms with 2 threads on 2 cores
    # and 4 ranks, ~10 with 1)
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=20))
    try:
        result = fn(rank, world_size, out_dir, *args)
    finally:
        if fn is not dead_rank_case:
            end_process_group()  # the cases' hooked DDPs freed first
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))


def make_model(dtype=torch.float32):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 48), nn.ReLU(), nn.Linear(48, 48), nn.ReLU(),
                          nn.Linear(48, 1))
    return model.to(dtype)


def data(rank):
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(512, 20, generator=gen)
    w = torch.randn(20, 1, generator=torch.Generator().manual_seed(7)) / 20**0.5
    return x, x @ w + 0.1 * torch.randn(512, 1, generator=gen), gen


def flat_params(model):
    return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])


def train(rank, method=None, options=None, steps=STEPS, lr=LR_DEFAULT, dtype=torch.float32,
          torch_hook=None, ddp_kwargs=None, accumulate=1, process_group=None, start=0,
          checkpoint=None, save_at=None, save_path=None, device="cpu"):
    """Train the small model with DDP; return its losses, parameters and hook telemetry."""
    model = make_model(dtype).to(device)
    ddp = DDP(model, process_group=process_group, **(ddp_kwargs or dict(bucket_cap_mb=0.004)))
    state = None
    if method is not None:
        state = gradcomp.comm.register(ddp, method, process_group=process_group,
                                       **(options or {}))
    if torch_hook is not None:
        ddp.register_comm_hook(*torch_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9)
    x, y, gen = data(rank)
    x, y = x.to(device), y.to(device)
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        opt.load_state_dict(checkpoint["opt"])
        state.load_state_dict(checkpoint["hook"])
        gen.set_state(checkpoint["gen"])
    def full_loss():
        with torch.no_grad():
            return ((model(x.to(dtype)) - y.to(dtype)) ** 2).mean().item()

    losses, before = [], full_loss()
    for step in range(start, steps):
        if save_at == step:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "hook": state.state_dict(), "gen": gen.get_state()}, save_path)
        opt.zero_grad()
        for micro in range(accumulate):
            idx = torch.randint(0, 512, (32,), generator=gen).to(device)
            loss = ((ddp(x[idx].to(dtype)) - y[idx].to(dtype)) ** 2).mean()
            if micro + 1 < accumulate:
                with ddp.no_sync():
                    loss.backward()
            else:
                loss.backward()
        opt.step()
        losses.append(loss.item())
    chooser = getattr(state, "chooser", None)
    return {"losses": losses, "params": flat_params(model).cpu(), "before": before,
            "after": full_loss(), "rows": state.telemetry_rows() if state else [],
            "decisions": dict(chooser.decisions) if chooser else None,
            "decided_at": chooser.decided_at if chooser else None,
            "confirm": (chooser.confirm_start, list(chooser.contenders)) if chooser else None,
            "launched": chooser.pending[0] if chooser and chooser.pending else None,
            "guard": list(state.guard.engaged) if getattr(state, "guard", None) else None}


def slowdown_cases(rank):
    """auto's choice fed the model's times of one 4e7-byte bucket (uncompressed all-reduce,
    or 4e5 bytes all-gathered after 2 ms of codec) on a link 100x slower from iteration `drop`
    on (None: never); rank 1 alone also waits 10x as long in iteration 12 (the other rank came
    late); every rank's codec takes 0.1 s in iteration 22 (noise); the check blocking, or
    launched at the next step and read an iteration later ("launched", as the hook runs it).
    Then the hook with its slowdown check on, on the small model's buckets."""
    def reduce(values):
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
        return values

    def launch(values):
        work = dist.all_reduce(values, op=dist.ReduceOp.MAX, async_op=True)
        return lambda: (work.wait(), values)[1]

    res = {}
    cases = [(drop, "") for drop in (17, 20, None)] + [(drop, "launched") for drop in (17, 20)]
    for drop, how in cases:  # at a periodic check (it sees only the old rate), between
        ch = Chooser([Transfer("allreduce"), Transfer("allgather")], workers=2,
                     explore_iters=3, check_every=10)
        changed = []
        for i in range(1, 46):
            if ch.step(i, reduce, launch if how == "launched" else None):
                changed.append(i)
            c = ch.choice(0, i)
            if ch.measured(i):
                x = 1e-9 if drop is not None and i >= drop else 1e-11
                steps, per_byte = ch.transfers[c].factors(2)
                nbytes, codec = (4e7, 0.0) if c == 0 else (4e5, 2e-3)
                codec += 0.1 if i == 22 else 0.0
                comm = (steps * 20e-6 + per_byte * nbytes * x) * (10 if (rank, i) == (1, 12) else 1)
                ch.samples.append(Sample(i, 0, c, codec, comm, nbytes, True, ch.warmup(i)))
        res[f"drop{drop}{how}"] = {"changed": changed, "decisions": ch.decisions, "x": ch.x}
    # every candidate within the margin: 2 confirmation rounds of all 4 after the scan
    run = train(rank, "auto", dict(explore_iters=2, confirm_rounds=2, confirm_max_rounds=2,
                                   confirm_margin=1e9),
                steps=30)
    res["auto_slowdown_on"] = {k: run[k] for k in ("params", "decisions", "decided_at",
                                                   "launched", "rows", "confirm")}
    return res


def steady_collectives(rank, method, options, steps=12, profiled=8):
    """The collectives (torch.distributed calls, by name) and the buckets sent (telemetry
    rows) per iteration of the small model's last `profiled` iterations with `method`."""
    ddp = DDP(make_model(), bucket_cap_mb=0.004)
    state = gradcomp.comm.register(ddp, method, **options)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR_DEFAULT)
    x, y, _ = data(rank)
    calls = Counter()
    for step in range(steps):
        with torch.autograd.profiler.profile(enabled=step >= steps - profiled) as prof:
            opt.zero_grad()
            ((ddp(x[:32]) - y[:32]) ** 2).mean().backward()
            opt.step()
        if step >= steps - profiled:
            calls.update(e.name for e in prof.function_events if e.name in COLLECTIVES)
    rows = [r for r in state.telemetry_rows() if r["iteration"] >= steps - profiled]
    return {"collectives": {k: v / profiled for k, v in calls.items()},
            "buckets": len(rows) / profiled, "methods": sorted({r["method"] for r in rows}),
            "decided_at": getattr(state, "chooser", None) and state.chooser.decided_at}


def budget_case(rank):
    """The training bench's time budget of 1 s after warm-ups of 62.5 ms iterations on rank 0
    and 0.5 s ones on rank 1 (each after a slow one, before the last 3 that the estimate
    takes): the count each rank times, and the collectives that agreeing on it took."""
    from gradcomp.evaluation.benches.train import agreed_iterations

    warmup = [2.0] + [0.0625 if rank == 0 else 0.5] * 3
    with torch.autograd.profiler.profile() as prof:
        count = agreed_iterations(warmup, 3, 1.0, torch.device("cpu"))
    return {"count": count,
            "collectives": [e.name for e in prof.function_events if e.name in COLLECTIVES]}


def main_cases(rank, world_size, out_dir):
    """Every method trains; references from plain DDP and torch's hooks; DDP options;
    auto's slowdown check (`slowdown_cases`); the training bench's time budget
    (`budget_case`)."""
    res = slowdown_cases(rank)
    res["budget"] = budget_case(rank)
    topk = [("topk", OPTIONS["topk"])]
    res["steady"] = {
        "fixed": steady_collectives(rank, "topk", OPTIONS["topk"]),
        "auto": steady_collectives(rank, "auto", dict(candidates=topk, explore_iters=2,
                                                      confirm_rounds=0)),
        "auto_no_slowdown": steady_collectives(rank, "auto", dict(
            candidates=topk, explore_iters=2, confirm_rounds=0, slowdown=None, check_every=4))}
    res["ddp"] = train(rank)
    for name in HOOKS:
        res[name] = train(rank, name, OPTIONS.get(name), lr=LR.get(name, LR_DEFAULT),
                          save_at=RESUME_AT, save_path=os.path.join(out_dir, f"{name}{rank}.ckpt"))
    # Plain DDP with the checkpoint kept for the resume test.
    ckpts = {name: torch.load(os.path.join(out_dir, f"{name}{rank}.ckpt"), weights_only=False)
             for name in HOOKS}
    res["checkpoints"] = ckpts
    # References from torch's own hooks (one bucket: torch's PowerSGD hangs on gloo otherwise).
    one_bucket = dict(bucket_cap_mb=25)
    res["torch_fp16"] = train(rank, torch_hook=(None, default_hooks.fp16_compress_hook))
    res["fp16_from_start"] = train(rank, "fp16", dict(start_iter=0))
    psgd_state = torch_psgd.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                          start_powerSGD_iter=2, random_seed=0)
    res["torch_powersgd"] = train(rank, torch_hook=(psgd_state, torch_psgd.powerSGD_hook),
                                  ddp_kwargs=one_bucket, steps=10)
    res["our_powersgd_one_bucket"] = train(rank, "powersgd", dict(rank=2, start_iter=2),
                                           ddp_kwargs=one_bucket, steps=10)
    # What users combine hooks with.
    combos = {
        "bucket_view": dict(gradient_as_bucket_view=True, bucket_cap_mb=0.004),
        "static_graph": dict(static_graph=True, bucket_cap_mb=0.004),
        "large_buckets": dict(bucket_cap_mb=100),
    }
    for label, kwargs in combos.items():
        res[f"ddp_{label}"] = train(rank, ddp_kwargs=kwargs, steps=10)
        res[f"none_{label}"] = train(rank, "none", ddp_kwargs=kwargs, steps=10)
        for name in ("topk", "powersgd", "qsgd"):
            res[f"{name}_{label}"] = train(rank, name, OPTIONS.get(name), ddp_kwargs=kwargs,
                                           steps=10)
    res["ddp_no_sync"] = train(rank, accumulate=2, steps=10)
    res["none_no_sync"] = train(rank, "none", accumulate=2, steps=10)
    res["topk_no_sync"] = train(rank, "topk", OPTIONS["topk"], accumulate=2, steps=10)
    # Low-precision gradients.
    for dtype in (torch.float16, torch.bfloat16):
        for name in ("fp16", "int8", "powersgd", "topk", "signsgd"):
            res[f"{name}_{dtype}"] = train(rank, name, OPTIONS.get(name), dtype=dtype,
                                           lr=LR.get(name, LR_DEFAULT), steps=10)
    # World size 1: each rank alone in its own group.
    solo = [dist.new_group([r]) for r in range(world_size)][rank]
    for name in ("none", "topk", "powersgd", "signsgd", "randomk"):
        res[f"solo_{name}"] = train(rank, name, OPTIONS.get(name), process_group=solo,
                                    lr=LR.get(name, LR_DEFAULT), steps=5)
    return res


#: Hooks that differ between ranks: rank r registers MISMATCHES[case][r]; the field named last
#: is the one the error must name.
MISMATCHES = {
    "fp16_vs_bf16": [("fp16", {}), ("bf16", {}), "method"],
    "signsgd_vs_efsignsgd": [("signsgd", {}), ("efsignsgd", {}), "method"],
    "topk_vs_randomk": [("topk", {}), ("randomk", {}), "method"],
    "topk_ratios": [("topk", dict(ratio=0.01)), ("topk", dict(ratio=0.05)), "options"],
    "none_vs_fp16": [("none", {}), ("fp16", {}), "method"],
    "randomk_seeds": [("randomk", dict(ratio=0.1, seed=0)), ("randomk", dict(ratio=0.1, seed=1)),
                      "options"],
    "start_iter": [("topk", dict(start_iter=1)), ("topk", dict(start_iter=3)), "hook options"],
    "communicator": [("topk", {}), ("topk", dict(communicator="blocksparse")), "communicator"],
}


def mismatch_cases(rank, world_size, out_dir):
    """Each case registers a different hook on each rank; the error each rank raised (None if
    none). Then a resume from checkpoints of different iterations, and a run that matches
    (the ranks must still be in step after every failure)."""
    res = {}
    for case, per_rank in MISMATCHES.items():
        method, options = per_rank[rank]
        res[case] = _error_of(lambda: train(rank, method, options, steps=3))
    path = os.path.join(out_dir, f"ckpt{rank}")
    train(rank, "topk", OPTIONS["topk"], steps=4, save_at=2 + rank, save_path=path)
    ckpt = torch.load(path, weights_only=False)
    res["resume_iteration"] = _error_of(lambda: train(rank, "topk", OPTIONS["topk"], start=2,
                                                      steps=4, checkpoint=ckpt))
    res["still_in_step"] = train(rank, "topk", OPTIONS["topk"], steps=3)["params"]
    return res


def shared_cases(rank, world_size, out_dir):
    """The main cases, then the mismatches (last: they end in errors), in one spawn."""
    return {"main": main_cases(rank, world_size, out_dir),
            "mismatch": mismatch_cases(rank, world_size, out_dir)}


def _error_of(run) -> tuple[str, str] | None:
    try:
        run()
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return type(exc).__name__, str(exc)
    return None


def resume_cases(rank, world_size, out_dir, checkpoints, start=RESUME_AT, save=True):
    """In fresh processes: load each method's checkpoint and train to the end (saving a
    checkpoint again one step after the resume, as a user who resumes twice would)."""
    res = {}
    for name, ckpt in checkpoints[rank].items():
        path = os.path.join(out_dir, f"{name}{rank}.again")
        res[name] = train(rank, name, OPTIONS.get(name), lr=LR.get(name, LR_DEFAULT),
                          start=start, checkpoint=ckpt, save_at=start + 1 if save else None,
                          save_path=path)["params"]
        if save:
            res[f"{name}_again"] = torch.load(path, weights_only=False)
    return res


def cuda_cases(rank, world_size, out_dir):
    """Every method and `auto` on CUDA tensors (NCCL with one GPU per rank, or gloo sharing
    one GPU)."""
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return {name: train(rank, name, OPTIONS.get(name), lr=LR.get(name, LR_DEFAULT),
                        device=device) for name in HOOKS}


def dead_rank_case(rank, world_size, out_dir):
    """Rank 1 dies after 3 steps; rank 0 must see an error, not hang."""
    model = make_model()
    ddp = DDP(model, bucket_cap_mb=0.004)
    gradcomp.comm.register(ddp, "topk", ratio=0.1)
    x, y, _ = data(rank)
    started = None
    try:
        for step in range(200):
            if rank == 1 and step == 3:
                os._exit(0)
            if step == 3:
                started = time.monotonic()
            ((ddp(x[:32]) - y[:32]) ** 2).mean().backward()
        return {"error": None, "seconds": None}
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return {"error": repr(exc)[:500], "seconds": time.monotonic() - started}
