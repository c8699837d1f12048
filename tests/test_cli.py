"""The `gradcomp` command, run as a user runs it."""
import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

import gradcomp
from gradcomp import cli


def run_here(*args):
    """`gradcomp ARGS` inside this process (no interpreter start-up), as a CompletedProcess;
    test_cli_errors and test_extras run the real command line where the process is the
    subject (exit status, pipes, signals, missing packages), as does the test of what the
    command imports before it runs (`IMPORTED`)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_compressors_table_lists_every_method():
    out = run_here("compressors", "--numel", "4096", "--repeats", "1")
    assert out.returncode == 0, out.stderr
    for name in gradcomp.names():
        assert f"\n{name} " in out.stdout
    assert "bytes on wire" in out.stdout


def test_compressors_json_has_exact_bytes():
    out = run_here("compressors", "--numel", "4096", "--repeats", "1", "--json")
    rows = json.loads(out.stdout)
    assert [r["method"] for r in rows] == gradcomp.names()
    for r in rows:
        assert r["bytes_sent"] == gradcomp.compressor(r["method"]).wire_nbytes(4096)
        assert r["encode_s"] >= 0 and r["decode_s"] >= 0


def test_unknown_command_is_an_error_naming_the_choices():
    out = run_here("compress")
    assert out.returncode != 0 and "compressors" in out.stderr


#: Run in a fresh interpreter: for each command line, the modules of the command, the
#: evaluation suite and FSDP imported by the time it ends.
IMPORTED = """import sys
from gradcomp import cli
for argv in (["--version"], ["--help"], ["whatif", "--help"]):
    try:
        cli.main(argv)
    except SystemExit:
        pass
    print(" ".join(sorted(m for m in sys.modules if m.startswith(
        ("gradcomp.cli.", "gradcomp.evaluation", "torch.distributed.fsdp")))), file=sys.stderr)
"""


def test_version_and_help_import_no_commands_module():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", IMPORTED], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": root}, timeout=300)
    assert out.returncode == 0, out.stderr
    version, top, whatif = (set(line.split()) for line in out.stderr.splitlines())
    assert version == top == {"gradcomp.cli.parsing"}  # nothing of the library but its face
    assert {"gradcomp.cli.analyses", "gradcomp.cli.common"} <= whatif  # its own module
    assert not {"gradcomp.cli.bench", "gradcomp.cli.testbed", "gradcomp.cli.run"} & whatif
    assert not any(m.startswith("torch.distributed.fsdp") for m in whatif)
    assert "--version" in out.stdout and "whatif" in out.stdout


def test_whatif_reproduces_the_netai_result_for_resnet50():
    fast = json.loads(run_here("whatif", "--profile", "resnet50", "--workers", "8",
                               "--bandwidth", "100gbit", "--bucketing", "horovod",
                               "--json").stdout)
    slow = json.loads(run_here("whatif", "--profile", "resnet50", "--workers", "8",
                               "--bandwidth", "10gbit", "--bucketing", "horovod",
                               "--json").stdout)
    assert fast["sf"] >= 0.9 and fast["required_compression"] == 1.0
    assert slow["sf"] < 0.9 and 1.5 <= slow["required_compression"] <= 5


def test_whatif_with_a_method_reports_break_even_bandwidth():
    out = json.loads(run_here("whatif", "--profile", "vgg16", "--bandwidth", "10gbit",
                              "--method", "fp16", "--json").stdout)
    assert out["method"] == "fp16" and out["speedup"] > 1
    assert out["break_even_bandwidth_bps"] > 10e9


def test_whatif_sweep_covers_1_to_400_gbit():
    rows = json.loads(run_here("whatif", "--sweep", "--json").stdout)
    bandwidths = [r["bandwidth_bps"] for r in rows]
    assert min(bandwidths) == 1e9 and abs(max(bandwidths) - 400e9) < 1


def test_advise_ranks_methods_and_gives_a_verdict():
    out = run_here("advise", "--profile", "resnet50", "--workers", "8", "--bandwidth", "100gbit",
                   "--methods", "fp16,topk")
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()[-1]
    # One recommendation, priced with the V100 profile's GPU table, scaled from the H200's.
    assert last.startswith("- **Recommendation** (NVIDIA V100 compute with NVIDIA V100 codec "
                           "costs scaled from NVIDIA H200 by memory bandwidth, not measured)")
    assert "codec costs from table `v100`" in last and "No convergence runs" in last
    data = json.loads(run_here("advise", "--bandwidth", "1gbit", "--json").stdout)
    assert data["costs"] == "v100" and "**fp16 all-reduce**" in data["verdict"]  # V100: no bf16
    # every method but bf16, which a V100 lacks, and threshold, whose decode fit the table
    # excludes: the verdict says so for both
    assert {r["method"] for r in data["ranking"]} == set(gradcomp.names()) - {"bf16", "threshold"}
    assert "Not ranked: bf16 (the NVIDIA V100 has no bf16 arithmetic" in data["verdict"]
    assert "threshold (codec fit excluded by table `v100`: decode:" in data["verdict"]


def test_bad_bandwidth_names_the_option_and_the_forms():
    out = run_here("advise", "--bandwidth", "10furlongs")
    assert out.returncode == 2 and "bandwidth" in out.stderr and "10gbit" in out.stderr


def test_profile_measures_a_model_given_as_module_factory(tmp_path):
    path = tmp_path / "mlp.json"
    out = run_here("profile", "torch.nn:Identity", "--input-shape", "4,3", "--out", str(path))
    # Identity has no parameters: a clear error rather than an empty profile.
    assert out.returncode != 0
    out = run_here("profile", "tests_cli_models:small_mlp", "--input-shape", "8,16", "--out",
                   str(path), "--repeats", "2")
    assert out.returncode == 0, out.stderr
    whatif = json.loads(run_here("whatif", "--profile", str(path), "--workers", "2",
                                 "--json").stdout)
    assert whatif["t_iter_s"] > 0


def test_bench_compress_then_fit_then_report(tmp_path):
    table = tmp_path / "compress.csv"
    rows = json.loads(run_here("bench", "compress", "--quick", "--methods", "fp16,int8",
                               "--repeats", "1", "--out", str(table), "--json").stdout)
    assert {r["method"] for r in rows} == {"fp16", "int8"} and table.exists()
    again = json.loads(run_here("bench", "compress", "--quick", "--methods", "fp16,int8",
                                "--repeats", "1", "--out", str(table), "--json").stdout)
    assert len(again) == len(rows)  # resumed: nothing measured twice
    assert len(table.read_text().splitlines()) == len(rows) + 1
    fits = json.loads(run_here("fit", str(table), "--json").stdout)
    assert {(f["method"], f["phase"]) for f in fits} == {
        (m, p) for m in ("fp16", "int8") for p in ("encode", "decode")}
    out = run_here("report", str(tmp_path), "--bandwidth", "10gbit")
    assert out.returncode == 0, out.stderr
    assert "Verdict" in (tmp_path / "report.md").read_text()
