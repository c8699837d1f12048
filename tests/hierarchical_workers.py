"""Workers for the hierarchical hook's tests: 4 gloo ranks as 2 nodes x 2, every case in one
spawn (`cases`); each rank saves what the parent test compares."""
import copy
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp.comm
from gradcomp.evaluation.testbed.ratecheck import TIERS as TIERS_SWEPT, tier_sweep
from ddp_workers import HOOKS, LR, LR_DEFAULT, OPTIONS, data, flat_params, make_model

WORLD = 4
NODE = 2  # gpus_per_node: 2 nodes of 2
STEPS = 20
# after auto's exploration (decided at 9 at the latest), inside the guard's interval that ends
# at 17: the resumed steps cross it
RESUME_AT = 15
TIERS = dict(hierarchical=True, gpus_per_node=NODE)


def train(rank, method=None, options=None, steps=STEPS, start=0, checkpoint=None,
          save_at=None, all_ranks=False):
    """Train the small model (buckets of 1008 and 2401 elements: 2401 does not split in two)
    with DDP and `method`'s hook; with `save_at`, also return the checkpoint taken before that
    step (the hook's state_dict, and where `all_ranks` also every rank's through `save_state`);
    `checkpoint`: resume from one (through `load_state` where `all_ranks`)."""
    model = make_model()
    ddp = DDP(model, bucket_cap_mb=0.004)
    state = None if method is None else gradcomp.comm.register(ddp, method, **(options or {}))
    opt = torch.optim.SGD(ddp.parameters(), lr=LR.get(method, LR_DEFAULT), momentum=0.9)
    x, y, gen = data(rank)
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        opt.load_state_dict(checkpoint["opt"])
        gen.set_state(checkpoint["gen"])
        if all_ranks:
            gradcomp.comm.load_state(ddp, checkpoint["all_ranks"])
        else:
            state.load_state_dict(checkpoint["hook"])
    with torch.no_grad():
        before = ((model(x) - y) ** 2).mean().item()
    saved = None
    for step in range(start, steps):
        if step == save_at:
            saved = copy.deepcopy({"model": model.state_dict(), "opt": opt.state_dict(),
                                   "gen": gen.get_state(), "hook": state.state_dict()})
            if all_ranks:
                saved["all_ranks"] = gradcomp.comm.save_state(ddp)
        opt.zero_grad()
        idx = torch.randint(0, 512, (32,), generator=gen)
        ((ddp(x[idx]) - y[idx]) ** 2).mean().backward()
        opt.step()
    with torch.no_grad():
        after = ((model(x) - y) ** 2).mean().item()
    chooser = getattr(state, "chooser", None)
    return {"params": flat_params(model), "before": before, "after": after, "saved": saved,
            "rows": state.telemetry_rows() if state else [],
            "decisions": dict(chooser.decisions) if chooser else None,
            "priced_workers": chooser.workers if chooser else None}


def cases(rank, world_size, out_dir):
    """Every method hierarchical, saved at RESUME_AT and resumed in a fresh DDP model and hook
    (the bucket rebuild included); topk resumed through save_state / load_state too (from the
    same run); plain DDP; intra="bf16"; one node of 4 and 4 nodes of 1; steps that wait
    instead of chaining; then the options that must be refused."""
    res = {"ddp": train(rank)}
    for name in HOOKS:
        options = {**OPTIONS.get(name, {}), **TIERS}
        run = train(rank, name, options, save_at=RESUME_AT, all_ranks=name == "topk")
        saved = run.pop("saved")
        # from a copy: the optimizer loads its state's tensors as they are, then trains them
        run["resumed"] = train(rank, name, options, start=RESUME_AT,
                               checkpoint=copy.deepcopy(saved))["params"]
        if name == "topk":
            res["topk_save_state"] = {"params": run["params"], "resumed": train(
                rank, name, options, start=RESUME_AT, checkpoint=saved, all_ranks=True)["params"]}
        res[name] = run
    res["none_bf16"] = train(rank, "none", dict(TIERS, intra="bf16"))
    res["topk_bf16"] = train(rank, "topk", dict(OPTIONS["topk"], intra="bf16", **TIERS))
    for per_node in (1, 4):
        res[f"topk_nodes_of_{per_node}"] = train(
            rank, "topk", dict(OPTIONS["topk"], hierarchical=True, gpus_per_node=per_node))
    everyone = dist.new_group(backend="gloo")  # a group of the user's: the steps wait
    for name in ("topk", "powersgd"):
        res[f"{name}_waiting"] = train(rank, name, dict(OPTIONS[name], process_group=everyone,
                                                        **TIERS))
    flat = train(rank, "topk", OPTIONS["topk"], steps=2, save_at=1)["saved"]
    res["errors"] = refused(rank, flat)
    res["tier_sweep"] = with_env({"LOCAL_WORLD_SIZE": str(NODE)}, lambda: tier_sweep(
        [4096], ("allreduce", "allgather"), 1, 0, 0.0, False, TIERS_SWEPT))
    return res


def error_of(run) -> tuple[str, str] | None:
    try:
        run()
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return type(exc).__name__, str(exc)
    return None


def refused(rank, flat_checkpoint):
    """The error each bad use raises on this rank (None: none)."""
    topk = OPTIONS["topk"]
    errors = {
        "not_divisible": error_of(lambda: train(rank, "topk", dict(
            hierarchical=True, gpus_per_node=3), steps=1)),
        "intra": error_of(lambda: train(rank, "topk", dict(TIERS, intra="fp8"), steps=1)),
        "flat_with_node_size": error_of(lambda: train(rank, "topk", dict(gpus_per_node=2),
                                                       steps=1)),
        "flat_checkpoint": error_of(lambda: train(rank, "topk", dict(topk, **TIERS), start=1,
                                                   steps=2, checkpoint=flat_checkpoint)),
    }
    # torchrun's variables: nodes of 3 and 1 ranks; ranks numbered across the nodes
    errors["no_node_size"] = with_env({"LOCAL_WORLD_SIZE": None}, lambda: error_of(
        lambda: train(rank, "topk", dict(hierarchical=True), steps=1)))
    errors["unequal_nodes"] = with_env({"LOCAL_WORLD_SIZE": "1" if rank == 3 else "3"}, lambda: (
        error_of(lambda: train(rank, "topk", dict(hierarchical=True), steps=1))))
    errors["not_node_by_node"] = with_env(
        {"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": str(rank // 2)},
        lambda: error_of(lambda: train(rank, "topk", dict(hierarchical=True), steps=1)))
    errors["torchrun_node_size"] = with_env(
        {"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": str(rank % 2)},
        lambda: error_of(lambda: train(rank, "topk", dict(hierarchical=True), steps=2)))
    # random-k's generator advanced on some ranks before the first call: fine where the ranks
    # of a local rank (they exchange one shard) still agree, refused where they do not
    errors["random_state_of_local_rank_1"] = error_of(lambda: drawn_ahead(rank, {1, 3}))
    errors["random_state_of_one_rank"] = error_of(lambda: drawn_ahead(rank, {2}))
    return errors


def drawn_ahead(rank, ranks):
    ddp = DDP(make_model(), bucket_cap_mb=0.004)
    state = gradcomp.comm.register(ddp, "randomk", ratio=0.1, **TIERS)
    if rank in ranks:
        state.compressor.compress(torch.ones(10), key=0)
    x, y, _ = data(rank)
    ((ddp(x[:8]) - y[:8]) ** 2).mean().backward()


def with_env(values: dict, run):
    """run() with environment variables set (None: unset)."""
    before = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        return run()
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
