"""`pip install gradcomp` is the hook path (torch and numpy); the evaluation suite and the
command are the `lab` extra, and the command says so in one line when it is missing."""
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# A fresh interpreter in which the lab packages (BLOCKED) cannot be imported, as after a plain
# install.
BLOCK = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError("blocked " + name)
sys.meta_path.insert(0, Block())
"""
LAB = ("pandas", "scipy", "tabulate", "tqdm", "matplotlib", "seaborn")


def run_blocked(code: str):
    return subprocess.run([sys.executable, "-c", BLOCK.format(blocked=set(LAB)) + code],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.fixture(scope="module")
def plain_install():
    """One such interpreter: the hook path's imports and what they import, then the command
    without pandas and tqdm (find_spec sees installed packages, so they are hidden from it too:
    a plain install has none)."""
    return run_blocked("import gradcomp, gradcomp.comm, gradcomp.comm.auto, gradcomp.fsdp\n"
                       "import gradcomp.integrations\n"
                       "from gradcomp.comm import register, save_state, load_state\n"
                       "print(gradcomp.compressor('topk').name)\n"
                       "print(sorted(m for m in ('lightning', 'accelerate', 'pytorch_lightning')"
                       " if m in sys.modules), flush=True)\n"
                       "BLOCKED.clear()\n"
                       "BLOCKED.update({'pandas', 'tqdm'})\n"
                       "import importlib.util\n"
                       "real = importlib.util.find_spec\n"
                       "importlib.util.find_spec = lambda n, *a: None if n in {'pandas', 'tqdm'} "
                       "else real(n, *a)\n"
                       "from gradcomp.cli import main\n"
                       "sys.exit(main(['whatif']))")


def test_the_hook_path_imports_without_the_lab_packages_and_imports_no_trainer(plain_install):
    # printed before the command's part
    assert plain_install.stdout.split("\n") == ["topk", "[]", ""], plain_install.stderr


def test_the_command_without_the_lab_packages_says_what_to_install_in_one_line(plain_install):
    out = plain_install
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1, out.stderr
    assert "missing: pandas, tqdm" in out.stderr and "gradcomp[lab]" in out.stderr


def test_the_package_depends_on_torch_and_numpy_only():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert sorted(d.split(">")[0] for d in project["dependencies"]) == ["numpy", "torch"]
    lab = {d.split(">")[0] for d in project["optional-dependencies"]["lab"]}
    from gradcomp.cli import LAB as needed
    assert lab == set(needed)
    assert "lab" in (ROOT / "Makefile").read_text()
