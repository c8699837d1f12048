"""The prepared GPU run (`benchmarks/gpu/run.py`), rehearsed: its dry run executes every step
on the CPU at tiny sizes (Triton's interpreter) and leaves every table it promises."""
import csv
import importlib.util
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def rows(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


# runs its command as the child of a subreaper (prctl PR_SET_CHILD_SUBREAPER, 36): what the
# command's processes leave running when they end comes here, and is counted once it ends
REAPED = """import ctypes, os, subprocess, sys
ctypes.CDLL(None).prctl(36, 1)
code = subprocess.call(sys.argv[1:])
left = 0
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
    left += 1
print("processes left behind:", left)
sys.exit(code)
"""


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu")
    out, archive = tmp / "results", tmp / "results.tar.gz"
    proc = subprocess.run([sys.executable, "-c", REAPED, sys.executable, "benchmarks/gpu/run.py",
                           "--dry-run", "--budget", "1200", "--out", str(out), "--archive",
                           str(archive)],
                          cwd=ROOT, capture_output=True, text=True, timeout=1300)
    return proc, out, archive


def test_every_step_runs_in_the_dry_run(dry_run):
    proc, out, _ = dry_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # none outlives its step: the hook_costs step's fork server (`processes.start`) is reaped
    assert proc.stdout.endswith("processes left behind: 0\n"), proc.stdout
    steps = json.loads((out / "steps.json").read_text())["steps"]
    assert [s["step"] for s in steps] == ["compress", "hook_costs", "tests", "roofline",
                                          "powersgd", "call_overhead"]
    assert all(s["status"] == "ok" for s in steps), steps


def test_the_dry_run_leaves_every_table(dry_run):
    _, out, archive = dry_run
    methods = {"none", "int8", "topk", "powersgd"}
    assert {r["method"] for r in rows(out / "compress_cpu.csv")} == methods
    buckets = rows(out / "bucket_costs.csv")
    assert {(r["model"], r["method"]) for r in buckets} == {
        (m, x) for m in ("resnet50", "gpt2") for x in methods}
    assert all(float(r["host_us"]) > 0 for r in buckets)
    iterations = rows(out / "iterations.csv")
    assert {(r["world_size"], r["method"]) for r in iterations} == {
        (w, x) for w in ("1", "2") for x in methods | {"ddp"}}
    assert all(float(r["vs_ddp"]) > 0 for r in iterations)
    assert "## resnet50 int8" in (out / "host_profile.txt").read_text()
    assert "tests collected" in (out / "tests.log").read_text()
    assert "| int8 |" in (out / "roofline" / "roofline.md").read_text()
    assert (out / "powersgd" / "powersgd.md").exists()
    assert "int8 compress" in (out / "call_overhead.log").read_text()
    with tarfile.open(archive) as tar:
        assert "results/steps.json" in tar.getnames()


def load_run_script(monkeypatch):
    spec = importlib.util.spec_from_file_location("gpu_run", ROOT / "benchmarks/gpu/run.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # where its dataclass looks
    monkeypatch.setattr(sys, "path", list(sys.path))  # it puts ROOT first
    spec.loader.exec_module(module)
    return module


SCRIPT = """import os, sys
print(sys.argv[1:], sys.path[0] == os.path.dirname(os.path.abspath(__file__)), os.getcwd(),
      os.environ["GRADCOMP_TEST_MARK"])
print("on stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def test_a_dry_runs_forked_step_runs_its_command_line_as_python_would(tmp_path, monkeypatch):
    """A dry run's step, forked from run.py: the script's arguments, path, working directory
    and environment, its output in the log, its exit status; `-m MODULE` too; a step over its
    time limit is killed as subprocess.run kills it; run.py itself goes on as it was."""
    run = load_run_script(monkeypatch)
    (tmp_path / "step.py").write_text(SCRIPT)
    (tmp_path / "x.json").write_text('{"a": 1}')
    (tmp_path / "slow.py").write_text("import time\ntime.sleep(60)\n")
    env = dict(os.environ, GRADCOMP_TEST_MARK="marked")
    path, argv = list(sys.path), list(sys.argv)

    def step(args, limit_s=60):
        with open(tmp_path / "log", "w") as log:
            code = run.forked_exit(["python", *args], log, env, limit_s)
        return code, (tmp_path / "log").read_text()

    code, log = step([str(tmp_path / "step.py"), "3"])
    assert code == 3
    assert log == f"['3'] True {ROOT} marked\non stderr\n"
    assert step([str(tmp_path / "step.py"), "0"])[0] == 0
    code, log = step(["-m", "json.tool", str(tmp_path / "x.json")])  # closes its stdout
    assert code == 0 and log == '{\n    "a": 1\n}\n'
    code, log = step([str(tmp_path / "nosuch.py")])
    assert code == 1 and "FileNotFoundError" in log
    with pytest.raises(subprocess.TimeoutExpired):
        step([str(tmp_path / "slow.py")], limit_s=1)
    assert (sys.path, sys.argv) == (path, argv) and "GRADCOMP_TEST_MARK" not in os.environ
