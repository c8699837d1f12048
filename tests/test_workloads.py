"""The workload contract (`gradcomp.Workload`, MODULE:FACTORY or FILE.py:FACTORY), the built-in
workloads, a user's transformer file through profile, bench train, bench converge and advise
--measured on 2 CPU workers (bench train under torchrun: tests/test_readme_ddp.py, in the
README script's launch)."""
import io
import json
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pandas as pd
import pytest
import torch

import gradcomp
from gradcomp import cli
from gradcomp.evaluation.benches import converge, train
from gradcomp.evaluation.profiles.measure import profile_of
from gradcomp.evaluation.profiles.profiles import load_profile
from gradcomp.evaluation.workloads.load import BUILTIN, load_workload

USER_LM = str(Path(__file__).parent / "data" / "user_lm.py")


def gradcomp_cli(*args):
    """`gradcomp ARGS` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def test_the_contract_is_gradcomp_workload_and_bad_factories_are_named():
    workload = load_workload(f"{USER_LM}:small_lm")
    assert isinstance(workload, gradcomp.Workload) and workload.metric == "loss"
    inputs, targets = workload.batches(1, 3)
    assert inputs.dtype == torch.long and inputs.shape == targets.shape == (8, 16)
    cases = [("nosuch", ["model='nosuch'", "MODULE:FACTORY", "mlp"]),
             ("tests/data/nosuch.py:f", ["no such file"]),
             (f"{USER_LM}:nope", ["has no 'nope'"]),
             ("torch.nn:Linear", ["needs arguments"]),
             ("tests_cli_models:small_mlp", ["returned a Sequential", "not a gradcomp.Workload"])]
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        for spec, words in cases:
            with pytest.raises(ValueError) as info:
                load_workload(spec)
            assert all(w in str(info.value) for w in words), (spec, str(info.value))
    finally:
        sys.path.remove(str(Path(__file__).parent))
    with pytest.raises(ValueError, match="batch_size=4 is not allowed.*takes no batch_size"):
        train.make_spec(f"{USER_LM}:small_lm", 4, 2, 1, 25.0, None)
    with pytest.raises(ValueError, match="autocast='fp8'"):
        train.make_spec("tiny", None, 2, 1, 25.0, None, autocast="fp8")
    with pytest.raises(ValueError, match="target=None is not allowed.*metric='accuracy'"):
        converge.make_spec(f"{USER_LM}:small_lm", metric="accuracy")
    spec = converge.make_spec(f"{USER_LM}:small_lm")
    assert (spec["metric"], spec["target"], spec["lr"], spec["batch_size"]) == (
        "loss", 2.0, 0.1, 8)
    code, _, err = gradcomp_cli("bench", "train", "--model", "nosuch", "--workers", "2")
    assert code == 2 and "model='nosuch' is not allowed" in err


def test_builtin_workloads_have_real_layer_shapes_and_learn():
    assert set(BUILTIN) == {"mlp", "tiny", "cnn", "gpt", "teacher", "digits"}
    cnn, gpt = load_workload("cnn", batch_size=4), load_workload("gpt", batch_size=4)
    shapes = {name: {tuple(p.shape) for p in w.model.parameters()}
              for name, w in (("cnn", cnn), ("gpt", gpt))}
    assert (16, 3, 3, 3) in shapes["cnn"] and (32, 16, 1, 1) in shapes["cnn"]  # conv, shortcut
    assert (64, 64) in shapes["gpt"] and (192, 64) in shapes["gpt"]  # embedding, fused qkv
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in cnn.model.modules())
    assert any(isinstance(m, torch.nn.LayerNorm) for m in gpt.model.modules())
    ids, targets = gpt.batches(0, 0)
    assert ids.dtype == torch.long and ids.shape == (4, 32) and ids[:, 1:].equal(targets[:, :-1])
    before = gpt.scores(gpt.model)["loss"]
    opt = torch.optim.SGD(gpt.model.parameters(), lr=gpt.lr, momentum=0.9)
    for step in range(30):
        opt.zero_grad()
        gpt.loss(gpt.model(gpt.batches(0, step)[0]), gpt.batches(0, step)[1]).backward()
        opt.step()
    assert gpt.scores(gpt.model)["loss"] < before - 0.5  # 4.17 (uniform) falls
    profile = profile_of(load_workload("gpt", batch_size=2), repeats=1, warmup=0)
    assert profile.numel == sum(p.numel() for p in gpt.model.parameters())


@pytest.mark.slow
def test_a_users_transformer_file_runs_through_every_command(tmp_path):
    factory = f"{USER_LM}:small_lm"
    profile, runs, conv = tmp_path / "lm.json", tmp_path / "train.csv", tmp_path / "conv.csv"
    code, out, err = gradcomp_cli("profile", factory, "--out", profile, "--repeats", "2")
    assert code == 0, err
    code, out, err = gradcomp_cli("bench", "train", "--model", factory, "--methods",
                                  "ddp,fp16,powersgd,topk", "--workers", 2, "--repeats", 2,
                                  "--out", runs, "--profile-out", tmp_path / "rank0.json",
                                  "--json")
    assert code == 0, err
    assert sorted(load_profile(profile).sizes) == sorted(
        load_profile(tmp_path / "rank0.json").sizes)  # the same workload, two ways
    rows = pd.read_csv(runs)
    assert rows["method"].tolist() == ["ddp", "fp16", "powersgd", "topk"]
    assert (rows["model"] == factory).all() and (rows["batch_size"] == 8).all()
    assert (rows["t_iter_s"] > 0).all() and (rows["world_size"] == 2).all()
    sent = rows.set_index("method")["bytes_sent"]
    assert sent["powersgd"] < sent["fp16"] < sent["ddp"]
    code, out, err = gradcomp_cli("bench", "converge", "--task", factory, "--methods",
                                  "fp16", "--seeds", 1, "--max-iters", 30, "--workers", 2,
                                  "--out", conv, "--json")
    assert code == 0, err
    summary = pd.read_csv(conv)
    assert len(summary) == 2 and (summary["metric"] == "loss").all()  # without and with EF
    assert summary["reached"].all() and (summary["final_test_loss"] <= 2.0).all()
    assert (summary["iterations_run"] < 30).all() and (summary["target"] == 2.0).all()
    assert len(pd.read_csv(converge.curve_path(conv))) >= len(summary)
    code, out, err = gradcomp_cli("advise", "--profile", profile, "--measured", runs,
                                  "--costs", "assumed", "--workers", 2, "--bandwidth", "10gbit",
                                  "--json")
    assert code == 0, err
    measured = pd.DataFrame(json.loads(out)["measured"])
    assert measured["method"].tolist() == ["ddp", "fp16", "powersgd", "topk"]
    assert measured["measured"].tolist() == rows["t_iter_s"].tolist()
    assert (measured["predicted"] > 0).all()
    assert measured["rel_error"].tolist() == pytest.approx(
        ((measured["predicted"] - measured["measured"]) / measured["measured"]).tolist())
    code, _, err = gradcomp_cli("advise", "--profile", "resnet50", "--measured", runs)
    assert code == 2 and "give the profile of the same workload" in err


def test_the_readme_vision_example_loads_from_its_file_and_learns():
    workload = load_workload(str(Path(__file__).parent / "data" / "user_vision.py") +
                             ":small_cnn", batch_size=16)
    assert workload.batches(0, 0)[0].shape == (16, 3, 32, 32)
    before = workload.scores(workload.model)["accuracy"]
    opt = torch.optim.SGD(workload.model.parameters(), lr=0.01, momentum=0.9)
    for step in range(20):
        opt.zero_grad()
        inputs, labels = workload.batches(0, step)
        workload.loss(workload.model(inputs), labels).backward()
        opt.step()
    assert workload.scores(workload.model)["accuracy"] > max(before, 0.5)
