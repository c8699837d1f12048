"""The command's everyday edges (issue 36): rates need a unit, misspellings get the nearest
name, help shows defaults and root, a JSON file where a table belongs is one line, --json is
strict JSON, `report` keeps a folder's report; `advise` coherent: no bf16 on a GPU without it,
nothing unpriced ranked, every measured method ranked or named, the fitted network named; and
the convergence proxy of the profile's model family, named as a proxy."""
import dataclasses
import json
import math

import pandas as pd
import pytest

from gradcomp import cli
from gradcomp.evaluation.analyses import weighed
from gradcomp.evaluation.analyses.advise import advise
from gradcomp.evaluation.analyses.evidence import evidence_of
from gradcomp.evaluation.analyses.recommend import recommend_by_accuracy, recommend_by_iteration
from gradcomp.evaluation.model.cost_tables import cost_table
from gradcomp.evaluation.profiles.profiles import load_profile, save_profile
from test_cli import run_here
from test_costs_verdict import convergence_runs


def test_a_rate_without_a_unit_is_an_error_naming_the_units():
    out = run_here("whatif", "--bandwidth", "10")
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1
    assert "--bandwidth" in out.stderr and "'10' has no unit" in out.stderr
    assert "10gbit" in out.stderr and "10GB" in out.stderr
    assert run_here("testbed", "--rate", "100", "--", "true").returncode == 2


def test_misspelt_options_choices_and_commands_get_the_nearest():
    out = run_here("whatif", "--bandwith", "10gbit")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("gradcomp whatif: error: unrecognized arguments: --bandwith")
    assert "did you mean --bandwidth?" in out.stderr
    assert "did you mean compressors?" in run_here("compres").stderr
    assert "did you mean horovod?" in run_here("advise", "--bucketing", "horovd").stderr
    assert "did you mean" not in run_here("whatif", "--zzzzzz").stderr


def test_every_subcommand_help_shows_its_defaults_and_what_needs_root():
    parser = cli.parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, command in commands.items():
        out = run_here(name, "--help")
        assert out.returncode == 0, (name, out.stderr)
        for action in command._actions:  # each option with a default says it
            if action.option_strings and action.default not in (None, False, "==SUPPRESS=="):
                shown = command.formatter_class(name)._get_help_string(action)
                assert action.help and "default" in shown.lower(), (name, action.dest)
        text = " ".join(out.stdout.split())
        if name in ("testbed", "validate"):
            assert "needs root" in text, name
    text = " ".join(run_here("whatif", "--help").stdout.split())
    assert "(default: 10 Gbit/s" in text and "(default: resnet50)" in text
    assert "(default: ddp)" in text and "(default: 8;" in text


def test_a_json_file_given_for_a_table_is_one_line(tmp_path):
    profile = tmp_path / "profile.json"
    save_profile(load_profile("resnet50"), profile)
    for argv in (["advise", "--measured", str(profile)], ["fit", str(profile)],
                 ["advise", "--convergence", str(profile)],
                 ["advise", "--costs", str(profile)], ["run", "--costs", str(profile)]):
        out = run_here(*argv)
        assert out.returncode == 2, out.stderr
        assert out.stderr.count("\n") == 1, out.stderr  # no warning per line first
        assert "is a JSON file, not a table" in out.stderr


def test_json_output_is_strict_null_never_nan_or_infinity():
    out = run_here("whatif", "--target-sf", "1", "--json")  # unreachable: infinite compression
    assert out.returncode == 0, out.stderr

    def refuse(name):
        raise AssertionError(f"{name} in --json output")

    data = json.loads(out.stdout, parse_constant=refuse)
    assert data["required_compression"] is None


def test_report_never_overwrites_a_folders_report(tmp_path):
    results = tmp_path / "results"
    out = run_here("bench", "compress", "--methods", "fp16", "--quick", "--repeats", "1",
                   "--out", str(results / "compress.csv"))
    assert out.returncode == 0, out.stderr
    question = ["--profile", "resnet50", "--costs", "assumed"]
    assert run_here("report", str(results), *question).returncode == 0
    first = (results / "report.md").read_text()
    again = run_here("report", str(results), *question, "--workers", "2")
    assert again.returncode == 2 and "--out" in again.stderr and "--force" in again.stderr
    assert (results / "report.md").read_text() == first
    beside = run_here("report", str(results), *question, "--workers", "2", "--out",
                      str(tmp_path / "two"))
    assert beside.returncode == 0, beside.stderr
    assert (results / "report.md").read_text() == first
    assert "on 2 workers" in (tmp_path / "two" / "report.md").read_text()
    assert (tmp_path / "two" / "compress.csv").read_text() == \
        (results / "compress.csv").read_text()
    assert run_here("report", str(results), *question, "--workers", "2", "--out",
                    str(tmp_path / "two")).returncode == 2  # never into an existing folder
    assert run_here("report", str(results), *question, "--workers", "2",
                    "--force").returncode == 0
    assert "on 2 workers" in (results / "report.md").read_text()


def test_no_bf16_is_ranked_or_recommended_for_a_gpu_without_it():
    ranking = advise("gpt2", 8, "10gbit")  # gpt2: generated at V100 rates
    assert "bf16" not in set(ranking["method"]) and "fp16" in set(ranking["method"])
    # even where bf16 would be the faster 16-bit all-reduce
    rows = pd.DataFrame({"method": ["bf16", "fp16", "none"], "t_iter_s": [0.1, 0.2, 0.3]})
    rows = rows.assign(t_iter_low_s=rows["t_iter_s"], t_iter_high_s=rows["t_iter_s"],
                       speedup=0.3 / rows["t_iter_s"], vs_16bit=math.nan)
    for column in ("speedup", "vs_16bit"):  # as `evidence.weigh` gives them: no spread
        rows = rows.assign(**{f"{column}_low": rows[column], f"{column}_high": rows[column]})
    assumed = cost_table("assumed")
    text = recommend_by_iteration(rows, assumed, "NVIDIA V100", "q", evidence_of(assumed))
    assert "**fp16 all-reduce**" in text and "no bf16" in text
    text = recommend_by_iteration(rows, assumed, "NVIDIA H100", "q", evidence_of(assumed))
    assert "**bf16 all-reduce**" in text


@pytest.fixture
def measured(tmp_path):
    """A CPU profile, `bench train` runs of it, a collective bench of a 5 Gbit/s network and
    codec costs whose fp16, bf16 and PowerSGD fits are excluded (noise, as under load)."""
    profile = tmp_path / "profile.json"
    save_profile(dataclasses.replace(load_profile("resnet50"), device="cpu"), profile)
    params = load_profile(profile).numel
    runs = [dict(method=m, world_size=2, bucket_cap_mb=25.0, t_iter_s=t, params=params,
                 model="r50", batch_size=32)
            for m, t in (("ddp", 0.040), ("fp16", 0.030), ("bf16", 0.030),
                         ("powersgd", 0.018), ("topk", 0.025))]
    pd.DataFrame(runs).to_csv(tmp_path / "train.csv", index=False)
    sizes = [2**k for k in range(10, 27, 2)]
    pd.DataFrame([dict(collective=c, world_size=2, nbytes=n, time_s=1e-4 + n * 8 / 5e9)
                  for c in ("allreduce", "allgather") for n in sizes]
                 ).to_csv(tmp_path / "collective.csv", index=False)
    noisy = [1e-5, 9e-3, 2e-5, 1e-2, 1e-5, 8e-3, 3e-5]
    pd.DataFrame([dict(method=m, numel=n, device_name="cpu",
                       encode_s=z if m in ("fp16", "bf16", "powersgd") else 1e-5 + n * 1e-9,
                       decode_s=z if m in ("fp16", "bf16", "powersgd") else 1e-5 + n * 1e-9)
                  for m in ("fp16", "bf16", "powersgd", "topk", "int8")
                  for n, z in zip([2**k for k in range(10, 23, 2)], noisy)]
                 ).to_csv(tmp_path / "compress.csv", index=False)
    return tmp_path


def test_advise_measured_ranks_or_names_every_method_on_the_fitted_network(measured):
    argv = ["advise", "--profile", str(measured / "profile.json"), "--workers", "2",
            "--measured", str(measured / "train.csv"), "--collectives",
            str(measured / "collective.csv"), "--costs", str(measured / "compress.csv")]
    out = run_here(*argv, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    ranked = [r["method"] for r in data["ranking"]]
    assert {"fp16", "bf16", "powersgd"}.isdisjoint(ranked)  # unpriced: never ranked ...
    for method in ("fp16", "bf16", "powersgd"):  # ... but named, with why
        assert f"{method} (codec fit excluded" in data["verdict"]
    assert {"none", "topk"} <= set(ranked)
    safe = [m for m in ranked if m in ("none", "bf16", "fp16")]
    assert safe[0] == "none" and "**fp32 DDP (no compression)**" in data["verdict"]
    # asked and predicted on the network fitted from the collective bench, and so named
    assert "fitted from the collective bench (all-reduce 5 Gbit/s" in data["network"]
    head = data["verdict"].split(" Intervals from: ")[0]  # flips may search 10 Gbit/s
    assert data["network"] in head and "10 Gbit/s" not in head
    assert [r["bandwidth_bps"] for r in data["ranking"]] == \
        pytest.approx([5e9] * len(ranked), rel=1e-3)
    text = run_here(*argv).stdout
    assert "at the network fitted from the collective bench" in text


def test_the_convergence_proxy_matches_the_profiles_family_and_is_named_so():
    from gradcomp.evaluation.run import proxy_task

    assert [proxy_task(p) for p in ("resnet50", "resnet101", "vgg16", "bert-base", "gpt2")] \
        == ["cnn", "cnn", "cnn", "gpt", "gpt"]
    mlp = dataclasses.replace(load_profile("gpt2"), name="my-mlp", shapes=None)
    assert proxy_task(mlp) == "teacher"
    # bf16 converged fastest, but a V100 has none: the fp16 all-reduce is the answer
    runs = convergence_runs({("none", False): 70, ("bf16", False): 60, ("fp16", False): 70})
    h100 = cost_table("h100")
    evidence = evidence_of(h100)
    tta = weighed.accuracy(runs, "resnet50", dict(workers=8, bandwidth="10gbit"), h100,
                           evidence, "NVIDIA V100")
    line = recommend_by_accuracy(tta, h100, "NVIDIA V100", "q", evidence)
    assert "**fp16 all-reduce**" in line and "the NVIDIA V100 has no bf16" in line
    assert "on task 'teacher' (the convergence proxy" in line
