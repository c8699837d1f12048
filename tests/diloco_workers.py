"""Multi-process workers for the DiLoCo tests: one spawn of 2 gloo ranks runs every case and
saves, per rank, what the parent compares: DiLoCo against the algorithms written out plainly
here (Douillard et al. 2023, Algorithm 1; Streaming DiLoCo 2025 on torchft's schedule) and
against DDP, resume, telemetry and the rank agreement."""
import copy
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_workers import data, make_model
from gradcomp.comm import RankMismatch
from gradcomp.diloco import DiLoCo, split

BATCH = 16


def batch(x, y, step):
    i = step % (len(x) // BATCH)
    return x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH]


def optimizers(model, inner="adamw"):
    """AdamW inside, SGD with Nesterov momentum outside (the paper's choice)."""
    inner_opt = (torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
                 if inner == "adamw" else torch.optim.SGD(model.parameters(), lr=0.05,
                                                           momentum=0.9))
    outer_opt = torch.optim.SGD(model.parameters(), lr=0.7, momentum=0.9, nesterov=True)
    return inner_opt, outer_opt


def inner_step(model, opt, x, y, step):
    bx, by = batch(x, y, step)
    nn.functional.mse_loss(model(bx), by).backward()
    opt.step()
    opt.zero_grad()


def params(model):
    return [p.detach().clone() for p in model.parameters()]


def run_diloco(rank, steps, **options):
    x, y, _ = data(rank)
    model = make_model()
    inner, outer = optimizers(model, options.pop("inner", "adamw"))
    with DiLoCo(model, inner, outer, **options) as diloco:
        for step in range(steps):
            inner_step(model, inner, x, y, step)
    return model, diloco


def plain_streaming(rank, world_size, steps, sync_every, fragments, delay, groups):
    """Streaming DiLoCo written out: parameters in `groups` (lists of parameter positions);
    sync k (k = 1, 2, ...) at inner step k * H / fragments applies fragment (k - 1) % fragments,
    whose pseudo-gradient was averaged `delay` steps earlier. fragments=1, delay=0 is DiLoCo's
    Algorithm 1: H inner steps, average global - local, outer step from the global weights."""
    x, y, _ = data(rank)
    model = make_model()
    inner, outer = optimizers(model)
    ps = list(model.parameters())
    global_weights = params(model)
    interval = sync_every // fragments
    averaged = None
    for step in range(1, steps + 1):
        inner_step(model, inner, x, y, step - 1)
        if (step + delay) % interval == 0:
            fragment = groups[((step + delay) // interval - 1) % fragments]
            averaged = {}
            for i in fragment:
                delta = global_weights[i] - ps[i].detach()
                dist.all_reduce(delta)
                averaged[i] = delta / world_size
        if step % interval == 0:
            with torch.no_grad():
                for i, p in enumerate(ps):
                    p.grad = None
                    if i in averaged:
                        p.copy_(global_weights[i])
                        p.grad = averaged[i]
            outer.step()
            outer.zero_grad()
            for i in averaged:
                global_weights[i] = ps[i].detach().clone()
    return params(model)


def data_parallel(rank, steps):
    """DDP with SGD + momentum: what DiLoCo with H=1 and outer SGD lr 1 must equal."""
    x, y, _ = data(rank)
    model = DDP(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        inner_step(model, opt, x, y, step)
    return params(model.module)


def dp_equivalent(rank, steps):
    x, y, _ = data(rank)
    model = make_model()
    inner = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    outer = torch.optim.SGD(model.parameters(), lr=1.0)
    with DiLoCo(model, inner, outer, sync_every=1):
        for step in range(steps):
            inner_step(model, inner, x, y, step)
    return params(model)


RESUME = dict(sync_every=4, fragments=2, sync_delay=1, method="int8", error_feedback=True)


def resumed(rank, steps, save_at, load_diloco=True):
    """Train `save_at` steps, checkpoint everything, train the rest from fresh objects (without
    DiLoCo's own state: the RankMismatch message, as the local weights differ by rank)."""
    x, y, _ = data(rank)
    model, diloco = run_diloco(rank, save_at, **RESUME)
    ckpt = copy.deepcopy({"model": model.state_dict(), "inner": diloco.inner_optimizer.state_dict(),
                          "outer": diloco.outer_optimizer.state_dict(),
                          "diloco": diloco.state_dict()})
    model = make_model()
    model.load_state_dict(ckpt["model"])
    inner, outer = optimizers(model)
    inner.load_state_dict(ckpt["inner"])
    outer.load_state_dict(ckpt["outer"])
    diloco = DiLoCo(model, inner, outer, **RESUME)
    if load_diloco:
        diloco.load_state_dict(ckpt["diloco"])
    try:
        with diloco:
            for step in range(save_at, steps):
                inner_step(model, inner, x, y, step)
    except RankMismatch as exc:
        return str(exc), None
    return params(model), ckpt["diloco"]


def mismatch(rank, **options):
    """Each rank builds DiLoCo with its own `options` (rank -> dict); the message raised."""
    x, y, _ = data(rank)
    model = make_model()
    if options.get("weights", {}).get(rank):
        with torch.no_grad():
            model[0].bias.add_(1.0)
    inner, outer = optimizers(model)
    try:
        with DiLoCo(model, inner, outer, **options.get("diloco", {}).get(rank, {"sync_every": 2})):
            for step in range(6):
                inner_step(model, inner, x, y, step)
    except RankMismatch as exc:
        return str(exc)
    return None


def as_module(params):
    """A module holding `params` themselves (torchft takes fragments as modules)."""
    holder = nn.Module()
    for i, p in enumerate(params):
        holder.register_parameter(f"p{i}", p)
    return holder


def torchft_run(rank, steps, fragments, delay):
    """torchft's DiLoCo (its own manager, lighthouse and gloo group) on the same run as
    `run_diloco`, with the same fragments; None where torchft is not installed."""
    try:
        from torchft import Manager, ProcessGroupGloo
        from torchft._torchft import LighthouseServer
        from torchft.local_sgd import DiLoCo as TorchftDiLoCo
    except ImportError:
        return None
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=2) if rank == 0 else None
    address = [lighthouse.address() if rank == 0 else None]
    dist.broadcast_object_list(address)
    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    wait = timedelta(seconds=30)
    manager = Manager(pg=ProcessGroupGloo(timeout=wait), min_replica_size=2,
                      use_async_quorum=False, load_state_dict=lambda _: None,
                      state_dict=dict, replica_id=str(rank), store_addr="localhost",
                      store_port=store.port, rank=0, world_size=1, lighthouse_addr=address[0],
                      connect_timeout=wait, quorum_timeout=wait, timeout=wait)
    x, y, _ = data(rank)
    model = make_model()
    inner, _ = optimizers(model)
    modules = [as_module(f.params) for f in split(list(model.parameters()), fragments)]
    # one outer optimizer per fragment: torchft steps a shared one while the other fragments
    # still hold their inner gradients, which moves them too
    outer = [optimizers(m)[1] for m in modules]
    try:
        with TorchftDiLoCo(manager, modules, inner, outer, sync_every=4,
                           fragment_sync_delay=delay):
            for step in range(steps):
                inner_step(model, inner, x, y, step)
    finally:
        manager.shutdown()
        dist.barrier()
        if lighthouse is not None:
            lighthouse.shutdown()
    return params(model)


def two_rank_cases(rank, world_size, out_dir):
    out = {}
    model, _ = run_diloco(rank, 12, sync_every=4)
    out["paper"] = (params(model), plain_streaming(rank, world_size, 12, 4, 1, 0,
                                                   [list(range(6))]))
    model, diloco = run_diloco(rank, 13, sync_every=4, fragments=2, sync_delay=1)
    groups = [[i for i, p in enumerate(model.parameters()) if any(p is q for q in f.params)]
              for f in diloco.fragments]
    out["streaming"] = (params(model), plain_streaming(rank, world_size, 13, 4, 2, 1, groups),
                        groups)
    out["torchft"] = {(1, 0): torchft_run(rank, 12, 1, 0), (2, 1): torchft_run(rank, 13, 2, 1)}
    out["dp"] = (dp_equivalent(rank, 10), data_parallel(rank, 10))
    model, diloco = run_diloco(rank, 12, sync_every=4, method="int8", error_feedback=True)
    out["int8"] = dict(params=params(model), rows=diloco.telemetry_rows(),
                       residuals=dict(diloco.state.compressor.residuals))
    for method, opts in (("topk", dict(ratio=0.1, error_feedback=True)), ("powersgd", {}),
                         ("qsgd", {})):
        model, diloco = run_diloco(rank, 8, sync_every=4, fragments=2, method=method, **opts)
        out[method] = dict(rows=diloco.telemetry_rows(), global_weights=[
            b.clone() for f in diloco.fragments for g in f.groups for b in g.backup])
    straight, _ = run_diloco(rank, 14, **RESUME)
    out["resume"] = dict(straight=params(straight), resumed=resumed(rank, 14, 5),
                         no_state=resumed(rank, 14, 5, load_diloco=False)[0])
    out["mismatch_schedule"] = mismatch(rank, diloco={0: {"sync_every": 2},
                                                      1: {"sync_every": 3}})
    out["mismatch_weights"] = mismatch(rank, weights={1: True})
    out["mismatch_method"] = mismatch(rank, diloco={0: {"sync_every": 2, "method": "int8"},
                                                    1: {"sync_every": 2, "method": "int4"}})
    return out
