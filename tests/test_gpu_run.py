"""The prepared GPU run (`benchmarks/gpu/run.py`), rehearsed: its dry run executes every step
on the CPU at tiny sizes (Triton's interpreter) and leaves every table it promises."""
import csv
import json
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


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu")
    out, archive = tmp / "results", tmp / "results.tar.gz"
    proc = subprocess.run([sys.executable, "benchmarks/gpu/run.py", "--dry-run", "--budget",
                           "1200", "--out", str(out), "--archive", str(archive)],
                          cwd=ROOT, capture_output=True, text=True, timeout=1300)
    return proc, out, archive


def test_every_step_runs_in_the_dry_run(dry_run):
    proc, out, _ = dry_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
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
