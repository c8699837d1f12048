#!/usr/bin/env python
"""GPU truth: one prepared run that re-measures, on one GPU, every GPU figure gradcomp's
verdict and README rest on.

    PYTHONPATH=. python benchmarks/gpu/run.py [--budget 480] [--archive FILE]
    PYTHONPATH=. python benchmarks/gpu/run.py --dry-run --out DIR   # CPU, tiny sizes

Steps, most needed first (each a subprocess with its own time limit, the whole run within
`--budget` seconds; a step that would start with too little time left is skipped and said so):

1. ``env``: the GPU, driver, torch, Triton, CUDA, Python and the commit (`env.json`);
2. ``compress``: `gradcomp bench compress --device cuda` over the built-in table's sizes
   (2^10 to 2^26 values, every method): the codec costs the verdict is priced with;
3. ``hook_costs``: `hook_costs.py`: per bucket, host and GPU time of every method as the
   hook runs it (ResNet-50 and GPT-2 buckets), and DDP iterations beside plain DDP (NCCL,
   world size 1; 2 gloo ranks sharing the GPU);
4. ``tests``: the CUDA test suite (kernels against their references, every hook and `auto`
   on NCCL and on 2 gloo ranks sharing the GPU, FSDP2);
5. ``roofline``: `gpu_roofline.py`: encode + decode against the memory-traffic floor;
6. ``powersgd``: `bench_powersgd.py`: the PowerSGD hook against torch's `powerSGD_hook`;
7. ``call_overhead``: `call_overhead.py`: host time of one call.

Everything goes to `benchmarks/results/<gpu>-<date>/` (or `--out`): one log per step and
`steps.json` (command, seconds, exit status of each; the commit from `GRADCOMP_COMMIT` where
the checkout has no git), rewritten after every step, as is the
`--archive` (a .tar.gz of the folder), so a run cut short keeps what it measured. `--dry-run`
runs the same steps on the CPU at tiny sizes with Triton's interpreter (the CUDA-only tests:
collected, not run), so the script is known to work before a GPU is lent; the test suite runs it.
A dry run starts each step as a child forked from this process, which has imported what the
local worker processes preload (torch, its compiler, gradcomp's evaluation suite), and runs the
step's command line in it as `python` would: its arguments, environment, working directory, log
and time limit. So a rehearsal costs the steps' work, not a fresh interpreter's start-up each;
on a GPU each step is a fresh interpreter, as before.
"""
from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import importlib.util
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tarfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from gradcomp.evaluation.common.forkserver import run_python  # noqa: E402
GPU_TESTS = ["tests/test_kernels.py", "tests/test_kernels_ef.py", "tests/test_kernels_sparse.py",
             "tests/test_kernels_randomk.py", "tests/test_kernels_orthogonal.py",
             "tests/test_sign.py", "tests/test_sparsify.py", "tests/test_powersgd.py",
             "tests/test_kernels_mean.py", "tests/test_cupy_backend.py",
             "tests/test_hooks_cuda.py", "tests/test_fsdp_cuda.py"]
CUDA_ONLY = GPU_TESTS[-3:]  # what a dry run collects: the rest runs on the CPU in the suite
DRY_METHODS = "none,int8,topk,powersgd"  # a dry run's methods: one of each communicator


@dataclass(frozen=True)
class Step:
    """One step: its name, its command on a GPU and in a dry run (``{out}``, ``{py}`` and
    ``{gpu}`` filled in), and its time limit on a GPU (seconds)."""

    name: str
    gpu: list
    dry: list
    limit_s: int


def steps() -> list[Step]:
    # a file's tests in one worker, as `make test` runs them: module fixtures (one spawn of
    # ranks, one CUDA process group) are made once, not once per worker
    xdist = (["-n", "8", "--dist", "loadfile"] if importlib.util.find_spec("xdist") else [])
    pytest = ["{py}", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout=120"]
    return [
        Step("compress", ["{py}", "-m", "gradcomp.cli", "bench", "compress", "--device", "cuda",
                          "--repeats", "10", "--out", "{out}/compress_{gpu}.csv"],
             ["{py}", "-m", "gradcomp.cli", "bench", "compress", "--device", "cpu", "--quick",
              "--repeats", "1", "--methods", DRY_METHODS, "--out", "{out}/compress_{gpu}.csv"],
             120),
        Step("hook_costs", ["{py}", "benchmarks/gpu/hook_costs.py", "--out", "{out}"],
             ["{py}", "benchmarks/gpu/hook_costs.py", "--out", "{out}", "--dry-run",
              "--methods", DRY_METHODS], 170),
        Step("tests", [*pytest, *xdist, *GPU_TESTS], [*pytest, "--collect-only", *CUDA_ONLY],
             170),
        Step("roofline", ["{py}", "benchmarks/gpu_roofline.py", "--no-check", "--rep", "50",
                          "--out", "{out}/roofline"],
             ["{py}", "benchmarks/gpu_roofline.py", "--dry-run", "--no-check",
              "--cases", "int8,topk", "--out", "{out}/roofline"], 60),
        Step("powersgd", ["{py}", "benchmarks/bench_powersgd.py", "--models", "resnet50-grads",
                          "--rounds", "20", "--out", "{out}/powersgd"],
             ["{py}", "benchmarks/bench_powersgd.py", "--rounds", "2", "--out",
              "{out}/powersgd"], 70),
        Step("call_overhead", ["{py}", "benchmarks/call_overhead.py"],
             ["{py}", "benchmarks/call_overhead.py", "--dry-run"], 30),
    ]


def gpu_slug(device_name: str) -> str:
    """The GPU kind as gradcomp's cost tables name it (h100, a100-80gb, ...), else the device
    name's model in lower case (NVIDIA H200 -> h200)."""
    from gradcomp.evaluation.model.cost_tables import GPUS

    for gpu in GPUS:
        if gpu.matches(device_name):
            return gpu.name
    words = [w for w in re.split(r"[^a-z0-9]+", device_name.lower()) if w]
    words = [w for w in words if w not in ("nvidia", "tesla")] or ["gpu"]
    return words[0]


def environment(dry: bool) -> dict:
    import torch

    env = {"device": "cpu (dry run)" if dry else torch.cuda.get_device_name(),
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "python": platform.python_version(), "machine": platform.machine(),
           "date": time.strftime("%Y-%m-%d"), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "commit": os.environ.get("GRADCOMP_COMMIT") or _git("rev-parse", "--short", "HEAD"),
           "uncommitted": bool(_git("status", "--porcelain", "--untracked-files=no"))}
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if not dry:
        env["driver"] = _run(["nvidia-smi", "--query-gpu=driver_version,memory.total",
                              "--format=csv,noheader"])
        props = torch.cuda.get_device_properties(0)
        env["multiprocessors"] = props.multi_processor_count
        env["memory_bytes"] = props.total_memory
    return env


def _git(*args) -> str:
    return _run(["git", "-C", str(ROOT), *args])


def _run(argv) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({type(exc).__name__})"


def write_json(path: Path, data) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def archive(folder: Path, target: Path | None) -> None:
    if target is None:
        return
    tmp = target.with_name(target.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    os.replace(tmp, target)


def run_step(step: Step, argv: list, out: Path, limit_s: float, env: dict,
             fork: bool = False) -> dict:
    """Run one step's command line with its output in the step's log: a fresh process, or
    with `fork` a child forked from this one (`forked_exit`)."""
    log = out / f"{step.name}.log"
    start = time.monotonic()
    with open(log, "w") as f:
        f.write("$ " + " ".join(argv) + "\n")
        f.flush()
        try:
            if fork:
                code = forked_exit(argv, f, env, limit_s)
            else:
                code = subprocess.run(argv, cwd=ROOT, env=env, stdout=f,
                                      stderr=subprocess.STDOUT, timeout=limit_s).returncode
            status = "ok" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            status = f"timed out after {limit_s:.0f} s"
    return {"step": step.name, "command": " ".join(argv), "status": status,
            "seconds": round(time.monotonic() - start, 1), "log": log.name}


def forked_exit(argv: list, log, env: dict, limit_s: float) -> int:
    """The exit status of `argv` (`PY -m MODULE ARGS` or `PY SCRIPT ARGS`) run in a child
    forked from this process with `env`, in ROOT, its output in `log`; the child is killed
    and subprocess.TimeoutExpired raised after `limit_s` seconds, as subprocess.run does."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            os.environ.clear()
            os.environ.update(env)
            os.chdir(ROOT)
            code = python_exit(argv[1:])
        finally:
            os._exit(code)
    deadline = time.monotonic() + limit_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise subprocess.TimeoutExpired(argv, limit_s)
        time.sleep(0.1)


def python_exit(args: list) -> int:
    """Run `python ARGS` (`-m MODULE ...` or `SCRIPT ...`) in this process as a fresh
    interpreter would run it (`forkserver.run_python`; output line by line to file
    descriptors 1 and 2, the exit handlers at the end), and return its exit status."""
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # as a fresh one's, on fds 1 and 2
    sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)
    # the interpreter's first entry (run_python's to fill in), then PYTHONPATH's ROOT, then the
    # rest of this process's path without its own first entries
    own = (str(ROOT), os.path.dirname(os.path.abspath(__file__)))
    sys.path[:] = ["", str(ROOT), *(p for p in sys.path if p not in own)]
    code = 0
    try:
        run_python(args)
    except SystemExit as exc:
        if isinstance(exc.code, int) or exc.code is None:
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - reported as the interpreter reports it
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if not stream.closed:  # a command may close them, as json.tool closes stdout
            stream.flush()
    return code


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true",
                    help="the same steps on the CPU at tiny sizes (Triton's interpreter)")
    ap.add_argument("--out", help="results folder (default benchmarks/results/<gpu>-<date>)")
    ap.add_argument("--budget", type=float, default=480,
                    help="seconds for the whole run (default 480)")
    ap.add_argument("--archive", help="also keep the folder as this .tar.gz, after each step")
    ap.add_argument("--steps", help="comma-separated steps to run (default: all)")
    args = ap.parse_args(argv)
    started = time.monotonic()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONUNBUFFERED="1")
    if args.dry_run:
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
        os.environ.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
        preload()
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        ap.error("no CUDA device: give --dry-run to rehearse on the CPU")
    all_steps = steps()
    names = [s.name for s in all_steps]
    wanted = args.steps.split(",") if args.steps else names
    unknown = [n for n in wanted if n not in names]
    if unknown:
        ap.error(f"--steps: unknown {unknown}; choose from {', '.join(names)}")
    info = environment(args.dry_run)
    info["gpu"] = "cpu" if args.dry_run else gpu_slug(info["device"])
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"{info['gpu']}-{info['date']}")
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "env.json", info)
    target = Path(args.archive).resolve() if args.archive else None
    done = []
    fill = {"{py}": sys.executable, "{out}": str(out), "{gpu}": info["gpu"]}
    for step in (s for s in all_steps if s.name in wanted):
        left = args.budget - (time.monotonic() - started)
        limit = step.limit_s if not args.dry_run else max(step.limit_s, 300)
        if left < min(limit, 30):
            done.append({"step": step.name, "status": f"skipped: {left:.0f} s of the budget "
                         "left", "seconds": 0})
        else:
            cmd = [_fill(a, fill) for a in (step.dry if args.dry_run else step.gpu)]
            done.append(run_step(step, cmd, out, min(limit, left), env, fork=args.dry_run))
        print(f"{done[-1]['step']:14s} {done[-1]['status']} ({done[-1]['seconds']} s)",
              flush=True)
        write_json(out / "steps.json", {"env": info, "steps": done})
        archive(out, target)
    return 0 if all(d["status"] == "ok" for d in done) else 1


def preload() -> None:
    """Import once what every forked step would import (what local workers preload), and
    freeze it out of the collector's sight (Python's gc.freeze docs: for a process that
    forks): the steps' collections do not walk (and so copy) it, nor does this process's
    exit (0.3 CPU s instead of 1.8)."""
    from gradcomp.evaluation.common.processes import PRELOAD

    for name in PRELOAD:
        importlib.import_module(name)
    gc.freeze()


def _fill(arg: str, fill: dict) -> str:
    for key, value in fill.items():
        arg = arg.replace(key, value)
    return arg


if __name__ == "__main__":
    sys.exit(main())
