"""The docs' multi-process examples, each run as written on 2 gloo ranks, all in one start of the
ranks (tests/test_docs_examples.py extracts them from the pages and checks what each rank
returns). A snippet is `exec`uted in a scope holding what a training script has by then (a
model, `local_rank`, the data); each case returns what its checks need."""
import ast
import os

import torch
import torch.distributed as dist
import torch.nn as nn

import gradcomp
import gradcomp.comm


class Blocks(nn.Module):
    """A small model with `.blocks`, as the FSDP2 snippets expect (a transformer's layers)."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4)])

    def forward(self, x):
        for block in self.blocks:
            x = torch.relu(block(x))
        return x


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def batch(rank: int, step: int):
    gen = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)


def train(model, steps: int, opt=None, first: int = 0) -> None:
    """`steps` steps of mean squared error on this rank's own batches (SGD if opt is given)."""
    for step in range(first, first + steps):
        x, y = batch(dist.get_rank(), step)
        model.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        if opt is not None:
            opt.step()


def flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def local(t: torch.Tensor) -> torch.Tensor:
    """A parameter or gradient as this rank holds it (its shard, for FSDP's DTensors)."""
    return t.to_local() if hasattr(t, "to_local") else t


def ddp(model):
    return nn.parallel.DistributedDataParallel(model)


def exec_snippet(snippet: str, **scope) -> dict:
    scope.setdefault("torch", torch)
    exec(snippet, scope)  # noqa: S102 - the docs' own code
    return scope


def register(rank, snippet):
    """docs/ddp.md, the first block: compression added to a DDP model."""
    scope = exec_snippet(snippet, local_rank=rank, model=mlp())
    ddp_model, state = scope["ddp_model"], scope["state"]
    train(ddp_model, 3)
    return {"method": state.compressor.name, "iteration": state.iteration,
            "grad": flat(p.grad for p in ddp_model.parameters())}


def low_level(rank, snippet):
    """docs/ddp.md's one line with torch's own register_comm_hook: the second iteration (the
    first is plain all-reduce, `start_iter=1`) averages in fp16; beside it the exact average of
    the ranks' gradients."""
    model = mlp()
    plain = mlp()
    train(plain, 1, first=1)
    exact = flat(p.grad for p in plain.parameters())
    dist.all_reduce(exact)
    ddp_model = ddp(model)
    exec_snippet(snippet, ddp_model=ddp_model, gradcomp=gradcomp)
    train(ddp_model, 2)
    return {"grad": flat(p.grad for p in model.parameters()), "exact": exact / 2}


def checkpoint(rank, setup, snippet):
    """docs/ddp.md's checkpoint block, cut at its `...` line: save after 3 steps (on every rank,
    rank 0 writes ckpt.pt), then resume into a fresh model, DDP and optimizer as a new process
    would, and train 2 more steps beside the straight run."""
    lines = snippet.splitlines(keepends=True)
    (cut,) = [i for i, line in enumerate(lines) if line.startswith("... ")]
    save, resume = "".join(lines[:cut]), "".join(lines[cut + 1:])
    scope = exec_snippet(setup, local_rank=rank, model=mlp())
    model, ddp_model = scope["model"], scope["ddp_model"]
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    train(ddp_model, 3, opt)
    exec_snippet(save, model=model, opt=opt, ddp_model=ddp_model, gradcomp=gradcomp)
    dist.barrier()  # rank 0 has written ckpt.pt
    saved_iteration = scope["state"].iteration
    train(ddp_model, 2, opt, first=3)
    straight = flat(model.parameters())

    fresh = mlp(seed=1)  # another process: other weights until the checkpoint is loaded
    fresh_ddp = ddp(fresh)
    fresh_opt = torch.optim.SGD(fresh.parameters(), lr=0.05, momentum=0.9)
    resumed = exec_snippet(resume, model=fresh, opt=fresh_opt, ddp_model=fresh_ddp,
                           gradcomp=gradcomp)
    loaded_iteration = resumed["state"].iteration
    train(fresh_ddp, 2, fresh_opt, first=3)
    return {"saved_iteration": saved_iteration, "loaded_iteration": loaded_iteration,
            "straight": straight, "resumed": flat(fresh.parameters()),
            "file": os.path.exists("ckpt.pt")}


def each_statement(rank, snippet, env=None, **scope):
    """Every top-level statement of a block of alternatives on a fresh DDP model, trained 2
    steps; per statement the state's method, iteration and the averaged gradient."""
    os.environ.update(env or {})
    out = []
    for statement in ast.parse(snippet).body:
        model = mlp()
        ddp_model = ddp(model)
        code = compile(ast.Module([statement], []), "<docs>", "exec")
        found = exec_snippet(code, ddp_model=ddp_model, gradcomp=gradcomp, **scope)
        state = found.get("state") or gradcomp.comm.hook_state(ddp_model)
        train(ddp_model, 2)
        out.append({"method": state.compressor.name, "iteration": state.iteration,
                    "grad": flat(p.grad for p in model.parameters())})
    return out


def diloco(rank, snippet):
    """docs/diloco.md: a plain model on every rank, 100 inner steps, one sync."""
    model = mlp()
    start = flat(model.parameters())
    batches = [batch(rank, step) for step in range(100)]
    scope = exec_snippet(snippet, model=model, batches=batches,
                         loss_fn=nn.functional.mse_loss)
    return {"start": start, "params": flat(model.parameters()), "ckpt": sorted(scope["ckpt"]),
            "step": scope["diloco"].local_step,
            "bytes": sum(r["bytes_sent"] for r in scope["diloco"].telemetry_rows())}


def fsdp(rank, snippet):
    """docs/fsdp2.md, the first block: int8 reduce-scatter on a model of blocks."""
    torch.manual_seed(0)
    model = Blocks()
    scope = exec_snippet(snippet, model=model)
    train(model, 2)
    state = scope["state"]
    return {"rows": len(state.telemetry_rows()), "ratio": state.compression_ratio(),
            "grad": flat(local(p.grad) for p in model.parameters())}


def hsdp(rank, snippet):
    """docs/fsdp2.md's HSDP block on a mesh of 2 replicas of 1 shard (2 ranks)."""
    torch.manual_seed(0)
    model = Blocks()
    start = flat(local(p) for p in model.parameters()).clone()
    exec_snippet(snippet, model=model, replicas=2, shards=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    train(model, 2, opt)
    return {"start": start, "params": flat(local(p) for p in model.parameters())}


def run_all(rank, world_size, out_dir, snippets):
    """Every case in one start of the ranks; returns {case: what the parent checks}."""
    os.chdir(out_dir)  # where the checkpoint block writes ckpt.pt, shared by the ranks
    return {
        "register": register(rank, snippets["register"]),
        "low_level": low_level(rank, snippets["low_level"]),
        "checkpoint": checkpoint(rank, snippets["register"], snippets["checkpoint"]),
        "hierarchical": each_statement(rank, snippets["hierarchical"],
                                       env={"LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "0"}),
        "blocksparse": each_statement(rank, snippets["blocksparse"]),
        "diloco": diloco(rank, snippets["diloco"]),
        "fsdp": fsdp(rank, snippets["fsdp"]),
        "hsdp": hsdp(rank, snippets["hsdp"]),
    }
