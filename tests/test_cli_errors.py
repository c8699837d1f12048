"""Bad input to the `gradcomp` command: one line on stderr naming the option (or file) and
what is allowed, exit status 2, no traceback; `--version`, a closed pipe and Ctrl-C end
cleanly too."""
import os
import signal
import subprocess
import sys
import time

import pytest

from gradcomp import __version__
from gradcomp.evaluation.common.store import ResultTable
from test_cli import run_here

TOPOLOGY = "{tmp}/list.json"  # placeholders filled in per test, below
FILES = {"empty.json": "", "bad.json": "{bad", "list.json": "[1, 2]", "empty.csv": "",
         "header.csv": "method,numel,encode_s,decode_s\n", "wrong.csv": "a,b\n1,2\n",
         "cells.csv": "0,fast\nfast,0\n", "dict.json": '{"bandwidth_bps": "x"}',
         "negative.csv": "method,numel,encode_s,decode_s\ntopk,1024,0.1,0.1\ntopk,2048,-1,0.1\n",
         "huge.csv": "method,numel,encode_s,decode_s\ntopk,1024,1e300,0.1\ntopk,2048,1,1\n",
         "text.csv": "method,numel,encode_s,decode_s\ntopk,1024,fast,0.1\ntopk,2048,1,1\n",
         "twice.csv": "method,options,numel,dtype,device,device_name,encode_s,decode_s\n"
                      "topk,{},1024,float32,cpu,x,1,1\ntopk,{},1024,float32,cpu,x,2,2\n",
         "workers.csv": "collective,world_size,nbytes,time_s\nallreduce,1000000,64,0.1\n",
         "runs.csv": "method,world_size,bucket_cap_mb,t_iter_s,params\nnone,2,25,nan,10\n",
         "half.json": '{"format": "gradcomp-profile/1", "name": "x", "numel": [2.5], '
                      '"ready_s": [0.1], "forward_s": 0.1, "backward_s": 0.2, '
                      '"optimizer_s": 0.01}',
         "slow.json": '{"format": "gradcomp-profile/1", "name": "x", "numel": [2], '
                      '"ready_s": [0.1], "forward_s": 1e308, "backward_s": 0.2, '
                      '"optimizer_s": 0.01}'}

CASES = [
    # --profile: missing, empty, malformed JSON, JSON of the wrong shape
    (["whatif", "--profile", "{tmp}/nosuch.json"], ["profile=", "nosuch.json", "built-in"]),
    (["whatif", "--profile", "{tmp}/empty.json"], ["profile=", "empty.json", "empty"]),
    (["advise", "--profile", "{tmp}/bad.json"], ["profile=", "bad.json", "not valid JSON"]),
    (["whatif", "--profile", "{tmp}/list.json"], ["profile=", "list.json", "JSON list"]),
    (["run", "--profile", "{tmp}/dict.json"], ["profile=", "dict.json", "not a gradcomp "
                                                                        "profile"]),
    # --topology: the same, and a CSV of non-rates
    (["whatif", "--topology", "{tmp}/nosuch.json"], ["topology=", "nosuch.json", "two-racks"]),
    (["whatif", "--topology", "{tmp}/empty.json"], ["topology=", "empty.json", "empty"]),
    (["advise", "--topology", "{tmp}/bad.json"], ["topology=", "bad.json", "not valid JSON"]),
    (["whatif", "--topology", "{tmp}/list.json"], ["topology=", "list.json", "matrix"]),
    (["whatif", "--topology", "{tmp}/dict.json"], ["topology=", "dict.json", "matrix"]),
    (["topology", "--topology", "{tmp}/empty.csv"], ["topology=", "empty.csv", "empty"]),
    (["topology", "--topology", "{tmp}/cells.csv"], ["topology=", "cells.csv", "'fast'"]),
    # measurement tables: missing, empty, no rows, wrong columns, a folder
    (["fit", "{tmp}/nosuch.csv"], ["table=", "nosuch.csv", "no such file", "bench compress"]),
    (["fit", "{tmp}/empty.csv"], ["table=", "empty.csv", "empty"]),
    # values checked on read: the file, the column and the row
    (["fit", "{tmp}/negative.csv"], ["negative.csv", "column 'encode_s', row 2", "> 0"]),
    (["fit", "{tmp}/huge.csv"], ["huge.csv", "column 'encode_s', row 1", "86400"]),
    (["fit", "{tmp}/text.csv"], ["text.csv", "column 'encode_s', row 1", "give a number"]),
    (["fit", "{tmp}/twice.csv"], ["twice.csv", "rows 1, 2 hold the same measurement"]),
    (["fit", "{tmp}/workers.csv"], ["workers.csv", "column 'world_size', row 1", "100,000"]),
    (["advise", "--measured", "{tmp}/runs.csv"], ["runs.csv", "column 't_iter_s', row 1"]),
    (["whatif", "--profile", "{tmp}/half.json"], ["half.json", "field 'numel', entry 0",
                                                  "whole number"]),
    (["whatif", "--profile", "{tmp}/slow.json"], ["slow.json", "field 'forward_s'"]),
    (["fit", "{tmp}/wrong.csv"], ["table=", "wrong.csv", "lacks column(s) method"]),
    (["advise", "--costs", "{tmp}/nosuch.csv"], ["costs=", "nosuch.csv", "no such file"]),
    (["whatif", "--method", "topk", "--costs", "b200"], ["costs='b200'", "'h200'", "'assumed'"]),
    (["run", "--costs", "p100"], ["costs='p100'", "'h200'", "'v100'", "'measured'"]),
    (["advise", "--costs", "measured"], ["costs='measured'", "nothing was measured"]),
    (["advise", "--costs", "{tmp}/header.csv"], ["costs=", "header.csv", "no rows"]),
    (["advise", "--convergence", "{tmp}/empty.csv"], ["convergence=", "empty.csv", "empty"]),
    (["advise", "--convergence", "{tmp}"], ["convergence=", "a folder, not a file"]),
    (["advise", "--convergence", "{tmp}/wrong.csv"], ["convergence=", "wrong.csv",
                                                      "not a `bench converge`"]),
    # counts, numbers, rates, names
    (["compressors", "--numel", "-5"], ["--numel", "'-5'", ">= 1"]),
    (["compressors", "--numel", "0"], ["--numel", ">= 1"]),
    (["compressors", "--repeats", "0"], ["--repeats", ">= 1"]),
    (["compressors", "--numel", "64", "--device", "tpu"], ["--device", "'tpu'", "cpu"]),
    (["whatif", "--bandwidth", "fast"], ["--bandwidth", "'fast'", "10gbit"]),
    (["whatif", "--bandwidth", "0gbit"], ["--bandwidth", "positive"]),
    (["advise", "--latency", "-1"], ["--latency", ">= 0"]),
    (["whatif", "--latency", "slow"], ["--latency", "'slow' is not a number"]),
    (["whatif", "--workers", "0"], ["--workers", ">= 1"]),
    (["whatif", "--target-sf", "2"], ["--target-sf", "(0, 1]"]),
    (["whatif", "--compression", "0.5"], ["--compression", ">= 1"]),
    (["whatif", "--method", "nosuch"], ["'nosuch'", "fp16"]),
    (["advise", "--methods", "fp16,nosuch"], ["'nosuch'", "topk"]),
    (["whatif", "--bucketing", "fifo"], ["--bucketing", "'ddp', 'horovod'"]),
    (["topology", "--nbytes", "0"], ["--nbytes", ">= 1"]),
    (["topology", "--workers", "1"], ["workers=1", ">= 2"]),
    # conflicting or ignored options
    (["whatif", "--method", "topk", "--compression", "5"], ["--method with --compression"]),
    (["whatif", "--algorithm", "ring"], ["--algorithm needs --topology"]),
    (["whatif", "--sweep", "--topology", "two-racks"], ["--sweep is not allowed"]),
    (["advise", "--task", "teacher"], ["--task needs --convergence"]),
    (["advise", "--target", "0.9"], ["--target needs --convergence"]),
    (["advise", "--algorithms", "ring"], ["--algorithms needs --topology"]),
    (["bench", "compress", "--densities", "0.1"], ["--densities", "bench compress",
                                                   "collective --blocksparse"]),
    (["bench", "collective", "--methods", "fp16"], ["--methods", "bench collective"]),
    (["bench", "converge", "--repeats", "3"], ["--repeats", "bench converge"]),
    (["bench", "train", "--min-timed-seconds", "-1"], ["--min-timed-seconds", "'-1'", ">= 0"]),
    (["bench", "compress", "--min-timed-seconds", "5"], ["--min-timed-seconds",
                                                         "bench compress", "bench train"]),
    (["bench", "compress", "--device", "tpu", "--methods", "fp16"], ["device='tpu'"]),
    (["bench", "compress", "--out", "{tmp}", "--methods", "fp16", "--quick"],
     ["Is a directory"]),
    # profile MODULE:FACTORY
    (["profile", "nosuchmod:f", "--input-shape", "2,3", "--out", "{tmp}/p.json"],
     ["factory='nosuchmod:f'", "cannot import nosuchmod", "MODULE:FACTORY"]),
    (["profile", "torch.nn:Linear", "--input-shape", "2,3", "--out", "{tmp}/p.json"],
     ["factory='torch.nn:Linear'", "needs arguments", "in_features"]),
    (["profile", "torch.nn:Nope", "--input-shape", "2,3", "--out", "{tmp}/p.json"],
     ["factory=", "has no 'Nope'"]),
    (["profile", "torch.nn", "--input-shape", "2,3", "--out", "{tmp}/p.json"],
     ["factory='torch.nn'", "MODULE:FACTORY"]),
    (["profile", "torch.nn:Identity", "--input-shape", "2,3", "--out", "{tmp}/p.json"],
     ["factory=", "no parameters"]),
    (["profile", "tests_cli_models:small_mlp", "--input-shape", "8,x", "--out",
      "{tmp}/p.json"], ["input_shape='8,x'", "positive integers"]),
    (["profile", "tests_cli_models:small_mlp", "--input-shape", "8,3", "--out",
      "{tmp}/p.json"], ["input_shape=8,3", "forward fails"]),
    # report on a folder that is not a results folder
    (["report", "{tmp}/nosuch"], ["results=", "no such folder", "gradcomp run"]),
    (["report", "{tmp}"], ["results=", "holds none of compress.csv"]),
    (["report", "{tmp}/empty.csv"], ["results=", "not a folder"]),
    # the testbed's own checks (before any namespace is made)
    (["testbed", "--timeout", "0", "--", "true"], ["timeout=0.0", "> 0"]),
    (["testbed"], ["command=[]"]),
]


@pytest.fixture
def files(tmp_path):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("argv, expected", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_one_line_naming_the_option_exit_2(files, argv, expected):
    out = run_here(*[a.replace("{tmp}", str(files)) for a in argv])
    command = argv[0]
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"gradcomp {command}: error: "), lines[0]
    for text in expected:
        assert text.replace("{tmp}", str(files)) in lines[0], lines[0]
    assert out.stdout == ""
    assert not (files / "nosuch").exists()  # report created no folder
    assert not (files / "p.json").exists()


def test_argparse_errors_are_one_line_too():
    out = run_here("whatif", "--no-such-option")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("gradcomp whatif: error: unrecognized arguments: "
                                 "--no-such-option")
    out = run_here("compres")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "compressors" in out.stderr


def test_run_passes_latency_and_bucketing_to_its_predictions(monkeypatch, tmp_path):
    from gradcomp.evaluation import run as job

    seen = {}

    def run(*args, **options):
        seen.update(options)
        raise ValueError("stop here")

    monkeypatch.setattr(job, "run", run)
    out = run_here("run", "--out", str(tmp_path / "r"), "--latency", "0.001", "--bucketing",
                   "horovod")
    assert out.returncode == 2 and "stop here" in out.stderr
    cluster, nodes = seen["cluster"]
    assert cluster.latency_s == 0.001 and seen["bucketing"] == "horovod"
    assert nodes == 8 and cluster.gpus_per_node == 1


def command(*args):
    tests = os.path.dirname(__file__)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [os.path.dirname(tests), tests, *filter(None, [os.environ.get("PYTHONPATH")])])}
    return [sys.executable, "-m", "gradcomp.cli", *args], env


def test_version_closed_pipe_and_ctrl_c_end_without_a_traceback(tmp_path):
    # --version in this process (argparse's exit status and output); a closed pipe and Ctrl-C
    # on the real command line, in processes of their own.
    out = run_here("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"gradcomp {__version__}"

    # `gradcomp whatif --json | head -c 10`, where head has gone before the output comes (a
    # reader that goes after 10 bytes may leave it all in the pipe's buffer).
    argv, env = command("whatif", "--sweep", "--json")
    writer = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    writer.stdout.close()
    err = writer.stderr.read().decode()
    assert writer.wait(timeout=120) == 141
    assert err == "", err  # no traceback, no "Exception ignored ... BrokenPipeError"

    # Ctrl-C in the middle of a bench: a line, status 130, and the rows so far kept. A
    # CI-sized sweep of two blocks of methods (`bench_compress.BLOCK`, 4, measured together,
    # their rows written when the block is done): four cheap methods whose rows come within
    # a second or two, then four costlier ones still being measured when the signal comes.
    table = tmp_path / "compress.csv"
    argv, env = command("bench", "compress", "--methods", "none,fp16,bf16,powersgd,"
                        "qsgd,terngrad,natural,int8", "--quick", "--repeats", "20",
                        "--out", str(table))
    # As from an interactive shell: SIGINT at its default (a shell starting this suite as a
    # background job hands its children SIGINT ignored, and Python then never raises
    # KeyboardInterrupt).
    bench = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not table.exists() or
                                           len(table.read_text().splitlines()) < 3):
        time.sleep(0.05)
    bench.send_signal(signal.SIGINT)
    _, err = bench.communicate(timeout=120)
    assert bench.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "interrupted" in err.splitlines()[-1]
    assert len(ResultTable(table).frame()) >= 2


def test_a_full_disk_is_one_line_naming_the_table_which_stays_intact(tmp_path):
    """A real full disk: a 16 KiB tmpfs (mounting needs root), the table one page, the rest
    filled; the bench's next write fails with ENOSPC."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root (test_store covers a write past RLIMIT_FSIZE)")
    try:
        table = disk / "compress.csv"
        header = "method,options,numel,dtype,device,device_name,note\n"
        row = "fp16,{},64,float32,cpu,elsewhere,"
        table.write_text(header + row + "x" * (4095 - len(header) - len(row)) + "\n")
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 512):
                pass
        except OSError:  # ENOSPC: the disk is full
            pass
        finally:
            os.close(fd)
        before = table.read_bytes()
        out = run_here("bench", "compress", "--methods", "fp16", "--quick", "--out", str(table))
        assert out.returncode == 2, out.stderr
        lines = [ln for ln in out.stderr.strip().splitlines()
                 if "compress bench:" not in ln]  # its progress bar
        assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
        assert lines[0] == f"gradcomp bench: error: {table}: No space left on device", lines
        assert table.read_bytes() == before
    finally:
        subprocess.run(["umount", str(disk)], check=True)
