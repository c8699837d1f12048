"""Multi-process workers for the FSDP tests: each spawn runs every case of one world size and
returns, per rank, what the parent compares (inputs and outputs of the reduce-scatters, final
gradients and parameters, telemetry)."""
import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

import gradcomp
import gradcomp.comm
import gradcomp.fsdp
from gradcomp.evaluation.workloads.tasks import teacher
from gradcomp.fsdp import alltoall

CHUNK = 1000  # elements per rank in the direct reduce-scatter cases (not a multiple of a block)
DIRECT = {  # case -> (method, options, input dtype)
    "none": ("none", {}, torch.float32),
    "bf16": ("bf16", {}, torch.float32),
    "fp16": ("fp16", {}, torch.float32),
    "int8": ("int8", {}, torch.float32),
    "int4": ("int4", {"block_size": 64}, torch.float32),
    "int8_bf16_input": ("int8", {}, torch.bfloat16),
    "topk": ("topk", {"ratio": 0.05}, torch.float32),
    "randomk": ("randomk", {"ratio": 0.1, "seed": 3}, torch.float32),
}
POLICIES = {  # name -> MixedPrecisionPolicy keyword arguments (None: no policy)
    "fp32": None,
    "param_bf16_reduce_fp32": dict(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
    "param_bf16_reduce_bf16": dict(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16),
}
MODEL_METHODS = ("none", "bf16", "fp16", "int8", "int4")
RESUME = dict(method="int4", options=dict(error_feedback=True), steps=8, save_at=4, lr=0.05)


def direct_cases(rank, world_size):
    """The compressed reduce-scatter on given inputs (dyadic values for `none`, so that any
    summation order is exact), and error feedback over two calls."""
    out = {}
    for case, (method, options, dtype) in DIRECT.items():
        gen = torch.Generator().manual_seed(10 + rank)
        flat = torch.randn(world_size * CHUNK, generator=gen)
        if method == "none":
            flat = (flat * 16).round() / 16
        flat = flat.to(dtype)
        output = torch.empty(CHUNK, dtype=dtype)
        comp = gradcomp.compressor(method, **options)
        comp.set_rank(rank)
        sent = alltoall.reduce_scatter(comp, output, flat.clone(), dist.group.WORLD, key=0)
        out[case] = dict(input=flat, output=output, sent=sent)
    comp = gradcomp.compressor("int4", error_feedback=True)
    flat = torch.randn(world_size * CHUNK, generator=torch.Generator().manual_seed(20 + rank))
    outputs = []
    for _ in range(2):
        outputs.append(torch.empty(CHUNK))
        alltoall.reduce_scatter(comp, outputs[-1], flat.clone(), dist.group.WORLD, key=7)
    out["error_feedback"] = dict(input=flat, outputs=outputs, residuals={
        j: comp.residuals[(7, j)].clone() for j in range(world_size)})
    averaged = torch.empty(CHUNK)
    alltoall.reduce_scatter(gradcomp.compressor("none"), averaged, out["none"]["input"].clone(),
                            dist.group.WORLD, key=0, average=True)
    out["average"] = averaged
    return out


def build(policy=None, mesh=None, seed=0):
    """The teacher task's student MLP (16-64-64-4) with fully_shard on each Linear and the root."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 4))
    kwargs = {"mesh": mesh} if mesh is not None else {}
    if policy is not None:
        kwargs["mp_policy"] = MixedPrecisionPolicy(**policy)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


class Recording:
    """Wraps a module's reduce-scatter and keeps copies of its inputs and outputs."""

    def __init__(self, inner, log):
        self.inner, self.log = inner, log

    def allocate(self, size, *, dtype, device):
        return self.inner.allocate(size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        flat = input_tensor.clone()
        result = self.inner(output_tensor, input_tensor, group, op, async_op)
        self.log.append(dict(input=flat, output=output_tensor.clone()))
        return result


def record(model, log):
    for module in model.modules():
        if isinstance(module, FSDPModule):
            group = module._get_fsdp_state()._fsdp_param_group
            if group is not None:  # a module without parameters of its own has none
                module.set_custom_reduce_scatter(Recording(group._reduce_scatter_comm, log))


def batch(rank, n=32):
    gen = torch.Generator().manual_seed(100 + rank)
    return torch.randn(n, 16, generator=gen), torch.randint(0, 4, (n,), generator=gen)


def one_backward(model, rank):
    x, y = batch(rank)
    nn.functional.cross_entropy(model(x).float(), y).backward()
    return [p.grad.full_tensor().float() for p in model.parameters()]


def model_cases(rank, world_size):
    """One backward of the FSDP model with FSDP's own reduce-scatter and with each method,
    under each mixed-precision policy; the methods' reduce-scatters recorded."""
    out = {}
    for pname, policy in POLICIES.items():
        out[pname] = {"fsdp": one_backward(build(policy), rank)}
        for method in MODEL_METHODS:
            model = build(policy)
            state = gradcomp.fsdp.register(model, method)
            log = []
            record(model, log)
            grads = one_backward(model, rank)
            out[pname][method] = dict(grads=grads, log=log, rows=state.telemetry_rows())
    return out


def train_steps(model, state, rank, steps, lr, start=0):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(start, steps):
        x, y = batch(rank * 1000 + step)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def local_params(model):
    return [p.detach().to_local().clone() for p in model.parameters()]


def resume_cases(rank, world_size):
    """Train with int4 + error feedback; save the model and the gradcomp state mid-way; resume
    from them (and, for contrast, from the model alone) in freshly built models."""
    r = RESUME
    model = build()
    state = gradcomp.fsdp.register(model, r["method"], **r["options"])
    train_steps(model, state, rank, r["save_at"], r["lr"])
    saved_model = {k: v.detach().clone() for k, v in model.state_dict().items()}
    saved_state = copy.deepcopy(state.state_dict())
    train_steps(model, state, rank, r["steps"], r["lr"], start=r["save_at"])
    out = {"straight": local_params(model), "state": saved_state}
    for case in ("resumed", "model_only"):
        again = build(seed=1)
        again.load_state_dict(saved_model)
        fresh = gradcomp.fsdp.register(again, r["method"], **r["options"])
        if case == "resumed":
            fresh.load_state_dict(copy.deepcopy(saved_state))
        train_steps(again, fresh, rank, r["steps"], r["lr"], start=r["save_at"])
        out[case] = local_params(again)
    return out


def converge_case(rank, world_size, method="int8", max_iters=600, eval_every=20):
    """Train the teacher task's student (fully_shard) with `method` as the convergence benchmark
    does: SGD lr 0.04, momentum 0.9, 64 examples per rank per step; stop at the target test
    accuracy."""
    task = teacher()
    target = task.target
    model = build()
    state = gradcomp.fsdp.register(model, method)
    opt = torch.optim.SGD(model.parameters(), lr=0.04, momentum=0.9)
    accuracy, iters = 0.0, 0
    while iters < max_iters and accuracy < target:
        x, y = task.batches(rank, iters)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        iters += 1
        if iters % eval_every == 0:
            accuracy = task.scores(model)["accuracy"]
    return dict(iters=iters, accuracy=accuracy, target=target,
                ratio=state.compression_ratio(), rows=len(state.telemetry_rows()),
                params=[p.full_tensor() for p in model.parameters()])


def two_rank_cases(rank, world_size, out_dir):
    torch.set_num_threads(1)  # two ranks on a loaded 2-core machine
    return dict(direct=direct_cases(rank, world_size), model=model_cases(rank, world_size),
                resume=resume_cases(rank, world_size),
                converge=converge_case(rank, world_size), bench=bench_case(rank, out_dir),
                twice=register_twice_case(),
                mismatch=mismatch_case(rank))  # last: FSDP's backward ends in an exception


def four_rank_cases(rank, world_size, out_dir):
    torch.set_num_threads(1)
    return dict(direct=direct_cases(rank, world_size),
                model={"fp32": model_cases_fp32(rank, world_size)}, hsdp=hsdp_cases(rank),
                levels=two_level_cases(rank))


def model_cases_fp32(rank, world_size):
    out = {"fsdp": one_backward(build(), rank)}
    for method in ("none", "int8", "int4"):
        model = build()
        state = gradcomp.fsdp.register(model, method)
        log = []
        record(model, log)
        out[method] = dict(grads=one_backward(model, rank), log=log, rows=state.telemetry_rows())
    return out


class RecordingHook:
    """Wraps a module's all-reduce hook and keeps copies of its input and output."""

    def __init__(self, inner, log):
        self.inner, self.log = inner, log

    def __call__(self, reduce_output):
        before = reduce_output.clone()
        self.inner(reduce_output)
        self.log.append(dict(input=before, output=reduce_output.clone()))


HSDP = {"none": ("none", {}), "bf16": ("bf16", {}), "int8": ("int8", {}),
        "powersgd": ("powersgd", {"rank": 2})}


def hsdp_cases(rank):
    """HSDP on a 2 x 2 mesh (replicate, shard): native HSDP, and the model sharded over the
    shard dimension with gradcomp's replica all-reduce (each method), and with int8 inside the
    shard group plus int4 across the replicas."""
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    replicas = mesh.get_group("replicate")
    out = {"native": one_backward(build(mesh=mesh), rank)}
    for case, (method, options) in HSDP.items():
        model = build(mesh=mesh["shard"])
        state = gradcomp.fsdp.register_replicas(model, replicas, method, **options)
        log = []
        for module in gradcomp.fsdp.fsdp_modules(model):
            group = module._get_fsdp_state()._fsdp_param_group
            if group is not None:
                module.set_all_reduce_hook(RecordingHook(group._all_reduce_hook, log))
        out[case] = dict(grads=one_backward(model, rank), log=log, rows=state.telemetry_rows())
    model = build(mesh=mesh["shard"])
    inside = gradcomp.fsdp.register(model, "int8")
    across = gradcomp.fsdp.register_replicas(model, replicas, "int4")
    out["int8_int4"] = dict(grads=one_backward(model, rank), inside=inside.telemetry_rows(),
                            across=across.telemetry_rows())
    out["resume"] = hsdp_resume(rank, mesh)
    return out


def hsdp_resume(rank, mesh, steps=4, save_at=2):
    """PowerSGD across replicas: train, save the model and the replica state mid-way, resume."""
    def fresh(seed):
        model = build(mesh=mesh["shard"], seed=seed)
        state = gradcomp.fsdp.register_replicas(model, mesh.get_group("replicate"), "powersgd",
                                                rank=2)
        return model, state

    model, state = fresh(0)
    train_steps(model, state, rank, save_at, 0.05)
    saved_model = {k: v.detach().clone() for k, v in model.state_dict().items()}
    saved_state = copy.deepcopy(state.state_dict())
    train_steps(model, state, rank, steps, 0.05, start=save_at)
    again, resumed = fresh(1)
    again.load_state_dict(saved_model)
    resumed.load_state_dict(copy.deepcopy(saved_state))
    train_steps(again, resumed, rank, steps, 0.05, start=save_at)
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, saved_state)
    try:  # rank 2's state on rank 0: the same replica-group rank, another shard
        fresh(0)[1].load_state_dict(everyone[(rank + 2) % 4])
        refused = None
    except ValueError as exc:
        refused = str(exc)
    return dict(straight=local_params(model), resumed=local_params(again), refused=refused)


def two_level_cases(rank):
    """The model sharded over all 4 ranks, its reduce-scatter in two steps over a 2 x 2 mesh
    (2 nodes of 2 ranks): uncompressed, and int8 inside a node with int4 across."""
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("node", "local"))
    out = {}
    for case, (inside, across) in {"none": ("none", "none"), "int8_int4": ("int8", "int4")}.items():
        model = build()
        state = gradcomp.fsdp.register(model, inside, mesh=mesh, across=across)
        log = []
        record(model, log)
        out[case] = dict(grads=one_backward(model, rank), log=log, rows=state.telemetry_rows())
    return out


def register_twice_case():
    """A second register on the same model is refused (the first state would be orphaned)."""
    model = build()
    gradcomp.fsdp.register(model, "int8")
    try:
        gradcomp.fsdp.register(model, "int4")
    except RuntimeError as exc:
        return str(exc)
    return None


def mismatch_case(rank):
    """Rank 0 registers int8 and rank 1 int4: the first reduce-scatter must raise on both."""
    model = build()
    gradcomp.fsdp.register(model, "int8" if rank == 0 else "int4")
    try:
        one_backward(model, rank)
    except gradcomp.comm.RankMismatch as exc:
        return str(exc)
    return None


def bench_case(rank, out_dir):
    """The FSDP training benchmark's measuring part on this group (tiny model, 2 iterations);
    rank 0 returns the table and what a second sweep would still have to run."""
    import os

    from gradcomp.evaluation.benches import train_fsdp
    from gradcomp.evaluation.common.env import environment
    from gradcomp.evaluation.common.store import ResultTable

    spec = train_fsdp.make_spec("tiny", batch_size=16, warmup=1, iterations=2)
    table = ResultTable(os.path.join(out_dir, "fsdp_train.csv"), train_fsdp.KEY_COLUMNS)
    methods = ["fsdp", "int8"]
    plan = train_fsdp.plan_runs(methods, spec, 2, "gloo", environment()["device_name"], table)
    train_fsdp.run_fsdp_methods(list(plan.values()), spec, table, "gloo")
    dist.barrier()
    if rank != 0:
        return None
    left = set(plan) - table.done_keys()
    return dict(frame=table.frame(), left=left)


def cuda_cases(rank, world_size, out_dir):
    """One backward of the FSDP model on CUDA tensors (NCCL one GPU per rank, or gloo ranks
    sharing a GPU) with FSDP's own reduce-scatter and with each method: each rank's shards of
    the gradients, on the CPU (`full_tensor()` segfaulted in spawned ranks under torch
    2.11 on an H200, inside DTensor's all-gather; benchmarks/results/h200-2026-11-27-run2)."""
    torch.cuda.set_device(rank % torch.cuda.device_count())
    mesh = init_device_mesh("cuda", (world_size,))
    x, y = batch(rank)
    x, y = x.cuda(), y.cuda()
    out = {}
    for method in ("fsdp", *MODEL_METHODS):
        model = build(mesh=mesh)
        if method != "fsdp":
            gradcomp.fsdp.register(model, method)
        nn.functional.cross_entropy(model(x), y).backward()
        out[method] = [p.grad.to_local().float().cpu() for p in model.parameters()]
    return out
