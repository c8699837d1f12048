"""The README's DDP snippet, as written, on 2 gloo ranks (CPU): it registers the hook and
training steps run through it."""
import re
from pathlib import Path

import torch

from ddp_workers import spawn

README = Path(__file__).resolve().parent.parent / "README.md"


def ddp_snippet() -> str:
    """The first python block of the README's section on DDP training scripts."""
    section = README.read_text().split("## Add compression to a DDP training script", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def run_snippet(rank, world_size, out_dir, snippet):
    torch.manual_seed(0)
    scope = {"torch": torch, "local_rank": rank,  # what a training script has by then
             "model": torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 4))}
    exec(snippet, scope)  # noqa: S102 - the README's own code
    ddp_model, state = scope["ddp_model"], scope["state"]
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(rank))
    for _ in range(3):
        ddp_model.zero_grad()
        ddp_model(x).square().mean().backward()
    return {"method": state.compressor.name,
            "grad": [p.grad.clone() for p in ddp_model.parameters()]}


def test_readme_ddp_snippet_runs_on_cpu_as_written():
    snippet = ddp_snippet()
    assert "DistributedDataParallel" in snippet and "gradcomp.comm.register" in snippet
    ranks = spawn(run_snippet, 2, snippet)
    assert [r["method"] for r in ranks] == ["powersgd", "powersgd"]
    for a, b in zip(ranks[0]["grad"], ranks[1]["grad"]):  # the hook averaged them
        torch.testing.assert_close(a, b)
