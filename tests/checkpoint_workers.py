"""Multi-process cases for tests/test_checkpoint.py: one-file checkpoints of every rank's hook
state (save_state / load_state), their errors, and torch.compile in both DDP optimizer modes.
One spawn runs every case but the resume (`checkpoint_cases`), another the resume in fresh
processes; the parent compares what the ranks return."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp
import gradcomp.comm
from gradcomp.evaluation.common.env import end_process_group
from ddp_workers import LR, LR_DEFAULT, OPTIONS, _error_of, data, flat_params, make_model

STEPS = 16
SAVE_AT = 7
#: Methods resumed: per-rank residuals (topk), PowerSGD's memories, a shared generator.
RESUMED = ("topk", "powersgd", "randomk")


def train(rank, method, steps=STEPS, save_at=None, path=None, resume=None, restore=True,
          model_fn=None, compile_model=False, bucket_cap_mb=0.004):
    """Train with a one-file checkpoint written by rank 0 at `save_at` (every rank's hook state
    through save_state) or resumed from `resume`; batches depend on rank and step only."""
    model = (model_fn or make_model)()
    ddp = DDP(model, bucket_cap_mb=bucket_cap_mb)
    state = gradcomp.comm.register(ddp, method, **(OPTIONS.get(method) or {}))
    opt = torch.optim.SGD(ddp.parameters(), lr=LR.get(method, LR_DEFAULT), momentum=0.9)
    run = torch.compile(ddp) if compile_model else ddp
    x, y, _ = data(rank)
    start = 0
    if resume is not None:
        ckpt = torch.load(resume, weights_only=True)  # plain tensors and containers only
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        if restore:
            gradcomp.comm.load_state(run, ckpt["gradcomp"])
        start = ckpt["step"]
    for step in range(start, steps):
        if step == save_at:
            ckpt = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "gradcomp": gradcomp.comm.save_state(run)}  # on every rank
            if rank == 0:
                torch.save(ckpt, path)
            dist.barrier()
        gen = torch.Generator().manual_seed(rank * 997 + step)
        idx = torch.randint(0, 512, (32,), generator=gen)
        loss = ((run(x[idx]) - y[idx]) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return {"params": flat_params(model), "iteration": state.iteration,
            "rows": len(state.telemetry_rows())}


def straight_cases(rank, world_size, out_dir, ckpt_dir):
    """Straight runs that save a checkpoint in `ckpt_dir` on the way; then what must fail,
    clearly."""
    res = {"paths": {m: os.path.join(ckpt_dir, f"{m}.ckpt") for m in RESUMED}}
    res.update({m: train(rank, m, save_at=SAVE_AT, path=res["paths"][m]) for m in RESUMED})
    saved = torch.load(res["paths"]["topk"], weights_only=True)["gradcomp"]
    ddp = DDP(make_model(), bucket_cap_mb=0.004)
    res["before_register"] = _error_of(lambda: gradcomp.comm.load_state(ddp, saved))
    res["not_ddp"] = _error_of(lambda: gradcomp.comm.save_state(make_model()))
    state = gradcomp.comm.register(ddp, "topk", **OPTIONS["topk"])
    other_rank = saved["ranks"][1 - rank]
    res["other_ranks_state"] = _error_of(lambda: state.load_state_dict(other_rank))
    partial = gradcomp.comm.save_state(ddp)  # complete on rank 0 only
    res["partial_complete"] = partial["complete"]
    both = [None, None]
    dist.all_gather_object(both, partial)
    res["others_partial"] = _error_of(lambda: gradcomp.comm.load_state(ddp, both[1 - rank]))
    res["not_a_checkpoint"] = _error_of(lambda: gradcomp.comm.load_state(ddp, {"ranks": {}}))
    # A state loaded without knowing the model's parameters cannot regroup the buckets.
    low = DDP(make_model(), bucket_cap_mb=0.004)
    loose = gradcomp.comm.build_state("topk", **OPTIONS["topk"])
    loose.load_state_dict(saved["ranks"][rank])
    low.register_comm_hook(loose, gradcomp.comm.hook)
    x, y, _ = data(rank)
    res["untracked"] = _error_of(lambda: ((low(x[:32]) - y[:32]) ** 2).mean().backward())
    return res


def resume_cases(rank, world_size, out_dir, paths):
    """In fresh processes: every method from its checkpoint, and topk without its hook state."""
    res = {m: train(rank, m, resume=paths[m]) for m in RESUMED}
    res["topk_unrestored"] = train(rank, "topk", resume=paths["topk"], restore=False)
    return res


def wide_model():
    """1.6 MB of parameters: two DDP buckets of at most 1 MiB (torch's DDPOptimizer, which
    splits the compiled graph at each bucket, needs bucket_cap_mb >= 1)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))


def compiled_run(rank, method, **kwargs):
    return train(rank, method, model_fn=wide_model, bucket_cap_mb=1, **kwargs)


def compile_cases(rank, world_size, out_dir):
    """torch.compile(ddp) with the default DDP optimizer, every method against eager; a
    checkpoint through the compiled model; then DDP's python reducer (compiled autograd's
    mode) refused by register and by the hook."""
    import torch._dynamo
    import torch._dynamo.compiled_autograd as ca

    res = {}
    # No reset between methods: a method's fresh model runs the graphs compiled for the first
    # where dynamo's guards pass, and is compiled anew where they fail (room for a recompile per
    # method, not the fallback to eager that the default limit of 8 would give)
    torch._dynamo.config.recompile_limit = 4 * len(gradcomp.names())
    for m in gradcomp.names():
        res[m] = {"eager": compiled_run(rank, m, steps=4),
                  "compiled": compiled_run(rank, m, steps=4, compile_model=True)}
    path = os.path.join(out_dir, "compiled.ckpt")
    res["compiled_straight"] = compiled_run(rank, "topk", steps=6, save_at=3, path=path,
                                            compile_model=True)
    res["compiled_resumed"] = compiled_run(rank, "topk", steps=6, resume=path,
                                           compile_model=True)
    torch._dynamo.config.optimize_ddp = "python_reducer"
    try:
        ddp = DDP(wide_model())
        res["python_reducer_register"] = _error_of(lambda: gradcomp.comm.register(ddp, "topk"))
        ddp.register_comm_hook(gradcomp.comm.build_state("topk"), gradcomp.comm.hook)
        x, y, _ = data(rank)
        compiled = torch.compile(ddp)

        def step(compiled_autograd):
            loss = ((compiled(x[:32]) - y[:32]) ** 2).mean()
            if compiled_autograd:
                with ca._enable(torch.compile(backend="aot_eager")):
                    loss.backward()
            else:
                loss.backward()

        res["python_reducer_hook"] = _error_of(lambda: step(False))
        res["python_reducer_compiled_autograd"] = _error_of(lambda: step(True))
    finally:
        torch._dynamo.config.optimize_ddp = True
    return res


# -- the mistakes users make (issue 37) ----------------------------------------------------------
TIMEOUT_S = 2.0  # how long a rank calling save_state alone waits for the others, here


def _steps(ddp, rank, steps=3):
    x, y, _ = data(rank)
    for step in range(steps):
        batch = slice(step * 32, (step + 1) * 32)
        ((ddp(x[batch]) - y[batch]) ** 2).mean().backward()


def _refusal(ddp, checkpoint, **kwargs):
    return _error_of(lambda: gradcomp.comm.load_state(ddp, checkpoint, **kwargs))


def damaged_cases(rank):
    """Checkpoints saved on every rank, then damaged: each load must be refused by name."""
    import copy

    from gradcomp.comm.checkpoint import checksum
    res = {}
    for method in ("topk", "powersgd"):
        ddp = DDP(make_model(), bucket_cap_mb=0.004)
        gradcomp.comm.register(ddp, method, **OPTIONS[method])
        _steps(ddp, rank)
        saved = gradcomp.comm.save_state(ddp)
        both = [None, None]
        dist.all_gather_object(both, saved)
        ckpt = both[0]  # rank 0's: every rank's entry
        fresh = DDP(make_model(), bucket_cap_mb=0.004)
        gradcomp.comm.register(fresh, method, **OPTIONS[method])
        res[method, "intact"] = _refusal(fresh, ckpt)
        comp = ckpt["ranks"][rank]["compressor"]
        residuals = comp["residuals"]
        key = sorted(residuals)[0]

        def damaged(change, resign=True):
            bad = copy.deepcopy(ckpt)
            change(bad["ranks"][rank]["compressor"])
            if resign:  # the checksum agrees: only the tensor checks can refuse it
                bad["sha256"][rank] = checksum(bad["ranks"][rank])
            return bad

        res[method, "nan"] = _refusal(fresh, damaged(
            lambda c: c["residuals"][key].fill_(float("nan"))))
        res[method, "nan_allowed"] = _refusal(fresh, damaged(
            lambda c: c["residuals"][key].fill_(float("nan"))), allow_nonfinite=True)
        res[method, "short"] = _refusal(fresh, damaged(
            lambda c: c["residuals"].__setitem__(key, c["residuals"][key][:-3].clone())))
        res[method, "flipped"] = _refusal(fresh, damaged(
            lambda c: c["residuals"][key].view(torch.uint8)[:4000].bitwise_not_(), False))
        if method == "powersgd":
            mem_key = sorted(comp["memories"])[0]
            group = sorted(comp["memories"][mem_key])[0]
            res[method, "memory"] = _refusal(fresh, damaged(
                lambda c: c["memories"][mem_key].__setitem__(
                    group, torch.zeros(1, group[1] + 1, 2))))
    return res


def save_on_rank_0_only(rank, method):
    """Rank 0 calls save_state while rank 1 trains on (the `if rank == 0:` slip): both must
    raise CheckpointMismatch's message, neither hang."""
    ddp = DDP(make_model(), bucket_cap_mb=0.004)
    gradcomp.comm.register(ddp, method, **(OPTIONS.get(method) or {}))
    _steps(ddp, rank)
    if rank == 0:
        return _error_of(lambda: gradcomp.comm.save_state(ddp, timeout_s=TIMEOUT_S))
    return _error_of(lambda: _steps(ddp, rank, 2))


def mistakes_cases(rank, world_size, out_dir):
    """Damaged checkpoints; then (last: a rank left alone ends its process group) rank 0
    calling save_state while rank 1 trains on, with PowerSGD (which hung for 30 minutes)."""
    res = {"damaged": damaged_cases(rank)}
    res["save_on_rank_0_only"] = save_on_rank_0_only(rank, "powersgd")
    if dist.is_initialized():  # rank 1's (rank 0 ended its own in save_state)
        end_process_group()
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/end.store", rank=rank,
                            world_size=world_size)  # for the spawn's own teardown
    return res


def checkpoint_cases(rank, world_size, out_dir, ckpt_dir):
    """Every case of one spawn, in an order that keeps each as it was alone: the straight runs
    first (nothing compiled yet), then torch.compile, then the mistakes (last:
    a rank left alone ends its process group)."""
    return {"straight": straight_cases(rank, world_size, out_dir, ckpt_dir),
            "compiled": compile_cases(rank, world_size, out_dir),
            "mistakes": mistakes_cases(rank, world_size, out_dir)}
