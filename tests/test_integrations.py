"""gradcomp inside trainers, run for real: the docs' Lightning and Accelerate examples, as
written, on 2 CPU processes each; a run resumed from the trainer's checkpoint in fresh processes
ends with the same parameters, bit for bit, as the straight run, and one resumed without the
hook state does not. Plus the callbacks' refusals and the import boundary."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gradcomp.comm
from script_runs import split_runs

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def docs_example(name: str) -> str:
    """The python block of docs/trainers.md that starts with `# name`."""
    text = (ROOT / "docs" / "trainers.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    (block,) = [b for b in blocks if b.startswith(f"# {name}")]
    return block


def run(cmd, cwd, timeout=300) -> str:
    """The output of `cmd` run in `cwd`, its stderr merged into its stdout as written (a
    warning stays in the part of a `script_runs` launch of the run that gave it)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", ACCELERATE_USE_CPU="1",
               PYTHONWARNINGS="ignore::DeprecationWarning")
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return proc.stdout


def torchrun(preload: str, cwd, script: str, runs: dict, dirs: dict) -> str:
    """The output of one torchrun launch on 2 ranks that runs `script` once per entry of
    `runs` ({name: args}, each in its folder of `dirs`) one after the other in the same
    processes (`script_runs`). The ranks are forked from an interpreter that has imported
    `preload` (`preloaded_torchrun`): fresh processes, without a fresh interpreter's
    imports each (a run resumed there still starts from its checkpoint alone)."""
    runs_json = json.dumps([[k, str(dirs[k]), script, *args] for k, args in runs.items()])
    return run([sys.executable, str(ROOT / "tests" / "preloaded_torchrun.py"), preload,
                "--standalone", "--nproc_per_node", "2",
                str(ROOT / "tests" / "script_runs.py"), runs_json], cwd)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- PyTorch Lightning ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def lightning_runs(tmp_path_factory):
    pytest.importorskip("lightning")
    script = docs_example("train_lightning.py")
    runs = ("straight", "resumed", "bare", "control")
    dirs = {k: tmp_path_factory.mktemp(f"lightning_{k}") for k in runs}
    for d in dirs.values():
        (d / "train_lightning.py").write_text(script)
    logs = {"straight": run([sys.executable, "train_lightning.py", "2"], dirs["straight"])}
    first = dirs["straight"] / "checkpoints" / "epoch=0-step=16.ckpt"
    bare = torch.load(first, weights_only=True)  # the same, less the hook state
    del bare["callbacks"]["Compression"]
    torch.save(bare, dirs["bare"] / "bare.ckpt")
    # As for Accelerate below: one launch runs the resumed run in fresh processes, then the
    # bare run and a control in the same processes. Under torchrun, Lightning starts no
    # processes of its own, and each run makes its process group (the script ends its own).
    after = {"resumed": ["2", str(first)], "bare": ["2", "bare.ckpt"],
             "control": ["2", str(first)]}
    logs.update(split_runs(torchrun("lightning,gradcomp.integrations.lightning",
                                    dirs["resumed"], "train_lightning.py", after, dirs)))
    ckpts = {k: torch.load(d / "checkpoints" / "epoch=1-step=32.ckpt", weights_only=True)
             for k, d in dirs.items()}
    return ckpts, logs, first


def same_params(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_lightning_example_compresses_on_cpu_and_checkpoints_every_rank(lightning_runs):
    ckpts, logs, first = lightning_runs
    assert "compressed iterations: 32" in logs["straight"]
    saved = torch.load(first, weights_only=True)["callbacks"]["Compression"]
    assert saved["complete"] and saved["world_size"] == 2
    for rank in (0, 1):
        mine = saved["ranks"][rank]
        assert mine["rank"] == rank and mine["iteration"] == 16 and mine["method"] == "topk"
    # Residuals are per rank: that is why every rank's state is in the file.
    r0, r1 = (saved["ranks"][r]["compressor"]["residuals"] for r in (0, 1))
    assert r0.keys() == r1.keys() and any(not torch.equal(r0[k], r1[k]) for k in r0)


def test_lightning_resume_from_its_checkpoint_is_bit_exact(lightning_runs):
    ckpts, logs, _ = lightning_runs
    assert same_params(ckpts["resumed"]["state_dict"], ckpts["straight"]["state_dict"])
    assert "compressed iterations: 32" in logs["resumed"]
    # The check can fail: without the hook state the run goes elsewhere, with a warning.
    assert not same_params(ckpts["bare"]["state_dict"], ckpts["straight"]["state_dict"])
    assert "holds no gradcomp hook state" in logs["bare"]
    # ... and not because the bare run shared its processes: the control, resumed from the
    # full checkpoint after it in the same processes, ends as the straight run did.
    assert same_params(ckpts["control"]["state_dict"], ckpts["straight"]["state_dict"])
    assert "compressed iterations: 32" in logs["control"]


def test_lightning_callback_refuses_what_it_cannot_do():
    lightning = pytest.importorskip("lightning")
    from lightning.pytorch.strategies import DDPStrategy

    from gradcomp.integrations.lightning import Compression

    with pytest.raises(ValueError, match="unknown compressor 'bogus': choose one of"):
        Compression("bogus")
    with pytest.raises(ValueError, match="ratio=2 is not allowed"):
        Compression("topk", ratio=2)
    with pytest.raises(ValueError, match="start_iter=-1 is not allowed"):
        Compression("topk", start_iter=-1)
    single = lightning.Trainer(accelerator="cpu", devices=1, logger=False)
    with pytest.raises(ValueError, match="needs strategy=DDPStrategy"):
        Compression("fp16").setup(single, None, "fit")
    both = lightning.Trainer(accelerator="cpu", devices=2, logger=False, strategy=DDPStrategy(
        ddp_comm_hook=gradcomp.comm.hook, ddp_comm_state=gradcomp.comm.build_state("fp16")))
    with pytest.raises(ValueError, match="DDP takes one hook"):
        Compression("fp16").setup(both, None, "fit")


# -- Hugging Face Accelerate ----------------------------------------------------------------
@pytest.fixture(scope="module")
def accelerate_runs(tmp_path_factory):
    pytest.importorskip("accelerate")
    script = docs_example("train_accelerate.py")
    runs = ("straight", "resumed", "bare", "control")
    dirs = {k: tmp_path_factory.mktemp(f"accelerate_{k}") for k in runs}
    for d in dirs.values():
        (d / "train_accelerate.py").write_text(script)

    def launch(d, script, *args):
        return run([sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
                    "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                    "--dynamo_backend", "no", "--main_process_port", str(free_port()),
                    script, *args], d)

    logs = {"straight": launch(dirs["straight"], "train_accelerate.py", "2")}
    first = dirs["straight"] / "checkpoints" / "epoch1"
    # The check must be able to fail: the same checkpoint with the residuals dropped.
    bare = dirs["bare"] / "checkpoints" / "epoch1"
    shutil.copytree(first, bare)
    hook = torch.load(bare / "custom_checkpoint_0.pkl", weights_only=True)
    for mine in hook["ranks"].values():
        mine["compressor"]["residuals"] = {}
    from gradcomp.comm.checkpoint import checksum  # edited on purpose: signed again
    hook["sha256"] = {r: checksum(mine) for r, mine in hook["ranks"].items()}
    torch.save(hook, bare / "custom_checkpoint_0.pkl")
    # One launch, not two, runs the resumed run in fresh processes, then the bare run and a
    # control in the same processes: the control, resumed from the full checkpoint after the
    # bare run, must end as the straight run did, so the bare run's difference is the
    # dropped residuals', not the shared processes'. Launched by torchrun, which `accelerate
    # launch` runs (its settings here are Accelerate's defaults).
    after = {"resumed": ["2", str(first)], "bare": ["2", "checkpoints/epoch1"],
             "control": ["2", str(first)]}
    logs.update(split_runs(torchrun("accelerate,gradcomp.integrations.accelerate,torch._dynamo",
                                    dirs["resumed"], "train_accelerate.py", after, dirs)))
    from safetensors.torch import load_file

    params = {k: load_file(d / "checkpoints" / "epoch2" / "model.safetensors")
              for k, d in dirs.items()}
    return params, logs, first


def test_accelerate_example_resumes_from_save_state_bit_exact(accelerate_runs):
    params, logs, first = accelerate_runs
    assert "compressed iterations: 32" in logs["straight"]
    assert "compressed iterations: 32" in logs["resumed"]
    saved = torch.load(first / "custom_checkpoint_0.pkl", weights_only=True)
    assert saved["complete"] and sorted(saved["ranks"]) == [0, 1]
    assert same_params(params["resumed"], params["straight"])
    assert not same_params(params["bare"], params["straight"])
    assert same_params(params["control"], params["straight"])
    assert "compressed iterations: 32" in logs["control"]


def test_accelerate_register_refuses_what_it_cannot_do():
    from gradcomp.integrations.accelerate import register

    class FakeAccelerator:
        def register_for_checkpointing(self, *objects):
            pass

    with pytest.raises(TypeError, match="accelerate.Accelerator"):
        register(object(), torch.nn.Linear(2, 2), "fp16")
    with pytest.raises(ValueError, match="launch with accelerate launch --num_processes 2"):
        register(FakeAccelerator(), torch.nn.Linear(2, 2), "fp16")
    from accelerate.utils import ProjectConfiguration

    each_node = FakeAccelerator()
    each_node.project_configuration = ProjectConfiguration(save_on_each_node=True)
    with pytest.raises(ValueError, match=r"save_on_each_node=True\) is not supported"):
        register(each_node, torch.nn.Linear(2, 2), "fp16")

