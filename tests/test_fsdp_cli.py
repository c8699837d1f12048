"""The `--parallelism fsdp` paths of the `gradcomp` command: `bench train` (FSDP2 iterations on
2 gloo workers), `whatif` and `advise` (the FSDP timeline), and the options they refuse."""
import json
import re

import pandas as pd
import pytest

from gradcomp.evaluation.model.fsdp import predict_fsdp
from gradcomp.evaluation.model.methods import resolve
from gradcomp.evaluation.model.network import Network
from test_cli import run_here as run

TRAIN = ("bench", "train", "--parallelism", "fsdp", "--model", "tiny", "--methods",
         "fsdp,int8", "--workers", "2", "--quick")


def test_bench_train_fsdp_writes_and_resumes_its_table(tmp_path):
    path = tmp_path / "fsdp.csv"
    out = run(*TRAIN, "--out", str(path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["method", "world_size", "t_iter_s", "bytes_sent",
                                "bytes_original", "ratio"]
    assert [line.split()[0] for line in lines[2:]] == ["fsdp", "int8"]
    rows = pd.read_csv(path).set_index("method")
    assert list(rows.index) == ["fsdp", "int8"]
    assert (rows["parallelism"] == "fsdp").all() and (rows["world_size"] == 2).all()
    assert (rows["iterations"] == 3).all() and (rows["t_iter_s"] > 0).all()
    assert rows.loc["fsdp", "ratio"] == 1.0
    assert rows.loc["int8", "ratio"] > 3
    assert rows.loc["int8", "bytes_original"] == rows.loc["fsdp", "bytes_sent"]
    # Run again: every row is already in the table, so nothing is measured again.
    again = run(*TRAIN, "--out", str(path), "--json")
    assert again.returncode == 0, again.stderr
    shown = {r["method"]: r for r in json.loads(again.stdout)}
    assert shown.keys() == {"fsdp", "int8"}
    for method in shown:
        assert shown[method]["t_iter_s"] == rows.loc[method, "t_iter_s"]
    assert len(pd.read_csv(path)) == 2


@pytest.mark.parametrize("option, message", [
    (("--autocast", "bf16"), "--autocast is not allowed with `bench train --parallelism fsdp`: "
                             "it is for bench train (DDP)"),
    (("--bucket-cap-mb", "5"), "--bucket-cap-mb is not allowed with `bench train "
                               "--parallelism fsdp`"),
    (("--profile-out", "p.json"), "--profile-out is not allowed with `bench train "
                                  "--parallelism fsdp`"),
    (("--device", "cpu"), "--device is not allowed with `bench train --parallelism fsdp`"),
    (("--methods", "powersgd"), "method='powersgd' is not allowed: choose one of 'fsdp', "
                                "'none', 'bf16'"),
])
def test_bench_train_fsdp_refuses_what_does_not_apply(option, message):
    out = run("bench", "train", "--parallelism", "fsdp", *option)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_parallelism_is_only_for_bench_train():
    out = run("bench", "compress", "--parallelism", "fsdp")
    assert out.returncode == 2
    assert "--parallelism is not allowed with `bench compress`: it is for bench train" \
        in out.stderr


def test_whatif_fsdp_is_the_fsdp_timeline():
    text = run("whatif", "--parallelism", "fsdp", "--profile", "gpt2", "--method", "int8",
               "--costs", "assumed")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("FSDP timeline")
    assert "speedup vs FSDP's own reduce-scatter" in text.stdout
    row = json.loads(run("whatif", "--parallelism", "fsdp", "--profile", "gpt2", "--method",
                         "int8", "--costs", "assumed", "--json").stdout)
    network = Network(8, "10gbit")
    none = predict_fsdp("gpt2", network, "none")
    int8 = predict_fsdp("gpt2", network, resolve("int8"))
    assert row["parallelism"] == "fsdp" and row["costs"] == "assumed"
    assert row["t_iter_s"] == pytest.approx(int8.t_iter_s)
    assert row["speedup"] == pytest.approx(none.t_iter_s / int8.t_iter_s)
    assert row["rs_compression"] == pytest.approx(1 / (1 / 4 + 1 / 256), rel=0.01)
    assert f"iteration {int8.t_iter_s * 1e3:.1f} ms" in text.stdout
    own = json.loads(run("whatif", "--parallelism", "fsdp", "--profile", "gpt2",
                         "--json").stdout)
    assert own["method"] == "none" and own["speedup"] == 1.0
    assert own["t_iter_s"] == pytest.approx(none.t_iter_s)


def test_whatif_ddp_is_still_the_default():
    assert run("whatif", "--parallelism", "ddp").stdout == run("whatif").stdout


def test_advise_fsdp_ranks_against_fsdps_own_reduce_scatter():
    out = run("advise", "--parallelism", "fsdp", "--profile", "gpt2", "--costs", "assumed",
              "--json")
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    ranking = pd.DataFrame(answer["ranking"])
    # gpt2 is a V100 profile: no bf16 there (fp16 is its 16-bit reduce-scatter)
    assert set(ranking["method"]) == {"none", "fp16", "int8", "int4", "topk", "randomk"}
    assert list(ranking["rank"]) == list(range(1, 7))
    assert ranking["t_iter_s"].is_monotonic_increasing
    none = ranking.set_index("method").loc["none"]
    assert none["speedup"] == 1.0
    assert (ranking["speedup"] == none["t_iter_s"] / ranking["t_iter_s"]).all()
    # without convergence runs only a lossless method is recommended, as on the DDP timeline
    assert answer["verdict"].startswith("- **Recommendation**")
    assert re.search(r"\*\*(fp16 reduce-scatter|FSDP's own reduce-scatter \(no "
                     r"compression\))\*\*", answer["verdict"])
    text = run("advise", "--parallelism", "fsdp", "--methods", "int8").stdout
    assert text.startswith("FSDP timeline")
    assert sorted(line.split()[1] for line in text.splitlines()[3:6]) == ["fp16", "int8",
                                                                          "none"]


@pytest.mark.parametrize("command, option, name", [
    ("whatif", ("--sweep",), "--sweep"),
    ("whatif", ("--compression", "4"), "--compression"),
    ("whatif", ("--topology", "two-racks"), "--topology"),
    ("whatif", ("--bucketing", "horovod"), "--bucketing"),
    ("whatif", ("--target-sf", "0.5"), "--target-sf"),
    ("advise", ("--convergence", "c.csv"), "--convergence"),
    ("advise", ("--measured", "m.csv"), "--measured"),
    ("advise", ("--topology", "two-racks"), "--topology"),
])
def test_fsdp_timeline_refuses_ddp_options(command, option, name):
    out = run(command, "--parallelism", "fsdp", *option)
    assert out.returncode == 2
    assert (f"{name} is not allowed with `{command} --parallelism fsdp`: it is for the DDP "
            "timeline") in out.stderr


@pytest.mark.parametrize("command, option", [("whatif", "--method"), ("advise", "--methods")])
def test_fsdp_timeline_names_its_methods(command, option):
    out = run(command, "--parallelism", "fsdp", option, "powersgd")
    assert out.returncode == 2
    assert ("method='powersgd' is not allowed with FSDP: choose one of none, bf16, fp16, int8, "
            "int4, topk, randomk") in out.stderr
