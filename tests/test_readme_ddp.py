"""The README's DDP script, as written, under torchrun on 2 gloo processes (CPU): it registers
the hook, every training step runs through it, and the ranks end with the same weights from
different data (docs/ddp.md's snippet runs in tests/test_docs_examples.py). Plus the README's
promise to a busy reader: short, the script on its first screen."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DDP_SECTION = "## Add compression to a DDP training script"
CHECK = """
params = torch.cat([p.detach().flatten() for p in ddp_model.parameters()])
everyone = [torch.empty_like(params) for _ in range(dist.get_world_size())]
dist.all_gather(everyone, params)
same = all(torch.equal(everyone[0], p) for p in everyone)
with open(f"check-{dist.get_rank()}.txt", "w") as out:  # a file each: the ranks share stdout
    out.write(f"{dist.get_rank()} {state.compressor.name} {state.iteration} {same}")
dist.destroy_process_group()
"""


def ddp_script() -> str:
    """The first python block of the README's section on DDP training scripts."""
    section = README.read_text().split(DDP_SECTION, 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_is_short_and_shows_the_ddp_script_on_its_first_screen():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200
    start = lines.index(DDP_SECTION)
    end = next(i for i in range(start + 2, len(lines)) if lines[i] == "```")
    assert end < 60


@pytest.mark.slow
def test_readme_ddp_script_runs_under_torchrun_as_written(tmp_path):
    script = ddp_script()
    for part in ("init_process_group", "DistributedDataParallel", "gradcomp.comm.register",
                 "backward()"):
        assert part in script
    (tmp_path / "train.py").write_text(script + CHECK)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", "train.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    checks = sorted((tmp_path / f"check-{rank}.txt").read_text().split() for rank in (0, 1))
    assert checks == [["0", "powersgd", "10", "True"], ["1", "powersgd", "10", "True"]]
    assert done.stdout.count(": powersgd, loss ") == 2  # the script's own line, on each rank
