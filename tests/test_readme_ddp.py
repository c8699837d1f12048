"""The README's DDP script, as written, under torchrun on 2 gloo processes (CPU): it registers
the hook, every training step runs through it, and the ranks end with the same weights from
different data (docs/ddp.md's snippet runs in tests/test_docs_examples.py). In the same launch
(one start and one set of imports per rank for both; the ranks forked from torchrun's agent),
`gradcomp bench train` joins torchrun's processes and rank 0 writes. Plus the README's promise to a busy reader:
short, the script on its first screen."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
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


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    """One torchrun launch of 2 processes (tests/script_runs.py): the README's script, then
    `gradcomp bench train` of the tiny model with ddp and fp16; (the launch, the script's
    directory, bench train's table)."""
    readme, bench = tmp_path_factory.mktemp("readme"), tmp_path_factory.mktemp("bench")
    (readme / "train.py").write_text(ddp_script() + CHECK)
    table = bench / "train.csv"
    runs = [["readme", str(readme), "train.py"],
            ["bench", str(bench), "-m", "gradcomp.cli", "bench", "train", "--model", "tiny",
             "--methods", "ddp,fp16", "--repeats", "1", "--bucket-cap-mb", "1",
             "--autocast", "bf16", "--out", str(table)]]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="")
    # torchrun, its ranks forked from its agent once that has imported pandas (bench train's)
    # beside torch (its own): gradcomp and the scripts' imports are the ranks' own
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "preloaded_torchrun.py"),
                           "pandas", "--standalone", "--nproc-per-node", "2",
                           str(ROOT / "tests" / "script_runs.py"), json.dumps(runs)], cwd=readme,
                          env=env, capture_output=True, text=True, timeout=300)
    return done, readme, table


@pytest.mark.slow
def test_readme_ddp_script_runs_under_torchrun_as_written(launch):
    done, readme, _ = launch
    assert done.returncode == 0, done.stderr[-3000:]  # (bench train's failure fails it too)
    script = ddp_script()
    for part in ("init_process_group", "DistributedDataParallel", "gradcomp.comm.register",
                 "backward()"):
        assert part in script
    checks = sorted((readme / f"check-{rank}.txt").read_text().split() for rank in (0, 1))
    assert checks == [["0", "powersgd", "10", "True"], ["1", "powersgd", "10", "True"]]
    assert done.stdout.count(": powersgd, loss ") == 2  # the script's own line, on each rank


@pytest.mark.slow
def test_bench_train_joins_torchrun_and_rank_zero_writes(launch):
    done, _, table = launch
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_csv(table)
    assert rows["method"].tolist() == ["ddp", "fp16"]  # one row each: rank 0 wrote
    assert (rows["world_size"] == 2).all() and (rows["backend"] == "gloo").all()
    assert (rows["autocast"] == "bf16").all() and (rows["bucket_cap_mb"] == 1.0).all()
    assert done.stdout.count("fp16") == 1  # rank 0 printed the table, once
