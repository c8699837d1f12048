"""Profiles: the converted NetAI 2020 logs, the generated transformers, file round trips and
measuring a model."""
import json
import os
from pathlib import Path

import pytest
import torch

from gradcomp.evaluation import measure_profile
from gradcomp.evaluation.profiles.architectures import resnet_shapes, vgg16_bn_shapes
from gradcomp.evaluation.profiles.netai import T_ITER, netai_profile
from gradcomp.evaluation.profiles.profiles import (Profile, builtin_profiles, load_profile,
                                                   save_measured, save_profile)

LOGS = Path("/work/shared/profiles/netai20")

# totals stated with the logs (parameters, tensors, backward ms)
NETAI = {"resnet50": (25_557_032, 161, 64.8), "resnet101": (44_549_160, 314, 106.4),
         "vgg16": (138_365_992, 58, 111.6)}


def test_builtin_names():
    assert builtin_profiles() == ["resnet50", "resnet101", "vgg16", "bert-base", "gpt2"]


@pytest.mark.parametrize("name", list(NETAI))
def test_converted_logs_keep_the_measured_totals(name):
    params, tensors, backward_ms = NETAI[name]
    p = load_profile(name)
    assert p.numel == params and len(p.sizes) == tensors
    assert p.nbytes == 4 * params
    assert p.backward_s * 1e3 == pytest.approx(backward_ms, abs=0.05)
    assert p.ready_s[-1] == pytest.approx(p.backward_s)
    assert p.t_iter_single == pytest.approx(T_ITER[name], rel=1e-12)
    assert p.forward_s > 0 and p.optimizer_s > 0
    assert "Apache-2.0" in p.source and "NetAI 2020" in p.source
    assert p.add_time(8 * 2**20) == pytest.approx(4.82224e-05 * 0.6 + 2.89296e-05 * 0.4)


def test_resnet50_starts_with_the_classifier():
    p = load_profile("resnet50")
    assert p.shapes[:2] == ((1000,), (1000, 2048))
    assert p.shapes[-1] == (64, 3, 7, 7)


@pytest.mark.skipif(not LOGS.is_dir(), reason="the NetAI 2020 logs are not here")
@pytest.mark.parametrize("name", list(NETAI))
def test_shipped_files_are_the_conversion_of_the_logs(name):
    shapes = resnet_shapes(int(name[6:])) if name.startswith("resnet") else vgg16_bn_shapes()
    converted = netai_profile(name, LOGS / f"{name}.bk.log", LOGS / "cuda_vec_add.log",
                              list(reversed(shapes)))
    assert converted == load_profile(name)


@pytest.mark.parametrize("name,params", [("bert-base", 109_482_240), ("gpt2", 124_439_808)])
def test_generated_transformers(name, params):
    p = load_profile(name)
    assert p.numel == params
    assert p.backward_s == pytest.approx(2 * p.forward_s)
    assert list(p.ready_s) == sorted(p.ready_s) and p.ready_s[-1] == pytest.approx(p.backward_s)
    assert "TFLOP/s" in p.assumptions and p.vec_add is not None


def test_gpt2_tied_embedding_is_ready_last():
    p = load_profile("gpt2")
    assert p.shapes[-1] == (50257, 768) and p.ready_s[-1] == p.backward_s


def test_save_load_round_trip(tmp_path):
    p = load_profile("resnet50")
    path = save_profile(p, tmp_path / "r50.json")
    assert load_profile(str(path)) == p
    assert os.listdir(tmp_path) == ["r50.json"]  # no temporary file left behind
    assert json.loads(path.read_text())["format"] == "gradcomp-profile/1"


def test_round_trip_without_shapes(tmp_path):
    p = Profile("tiny", [3, 5], [0.001, 0.002], 0.01, 0.002, 0.0, source="test")
    assert load_profile(save_profile(p, tmp_path / "t.json")) == p


def test_a_testbed_job_saves_the_profile_measured_on_every_rank(tmp_path):
    """`save_measured` (a testbed job's --profile-out): measured after a barrier with the
    arguments given, saved by rank 0 (here the only one); without a path, not measured."""
    import torch.distributed as dist

    p = Profile("tiny", [3, 5], [0.001, 0.002], 0.01, 0.002, 0.0, source="test")
    calls = []
    own = not dist.is_initialized()
    if own:
        dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0,
                                world_size=1)
    try:
        save_measured(None, calls.append, "not measured")
        save_measured(tmp_path / "p.json", lambda *a, **k: calls.append((a, k)) or p, "tiny",
                      repeats=2)
    finally:
        if own:
            dist.destroy_process_group()
    assert calls == [(("tiny",), {"repeats": 2})]
    assert load_profile(str(tmp_path / "p.json")) == p


def test_unknown_profile_lists_the_builtins():
    with pytest.raises(ValueError, match="resnet50, resnet101, vgg16, bert-base, gpt2"):
        load_profile("resnet9000")


@pytest.mark.parametrize("kwargs,match", [
    ({"ready_s": [0.001, 0.5]}, "after backward"),
    ({"ready_s": [0.002, 0.001]}, "non-decreasing"),
    ({"sizes": [3]}, "equal length"),
    ({"shapes": [(3,), (2, 2)]}, "shapes"),
    ({"forward_s": float("nan")}, "finite"),
    ({"dtype_bytes": 3}, "dtype_bytes"),
])
def test_invalid_profiles_are_refused(kwargs, match):
    args = {"name": "bad", "sizes": [3, 5], "ready_s": [0.001, 0.002], "forward_s": 0.01,
            "backward_s": 0.002, "optimizer_s": 0.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        Profile(**args)


class _Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(8, 16)
        self.second = torch.nn.Linear(16, 4)
        self.unused = torch.nn.Linear(2, 2)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


def test_measure_profile_on_a_tiny_cpu_model():
    torch.manual_seed(0)
    model = _Tiny()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    p = measure_profile(model, torch.randn(5, 8), repeats=3, warmup=1, name="tiny")
    assert p.name == "tiny"
    assert sorted(p.sizes) == sorted([16 * 8, 16, 4 * 16, 4])  # `unused` left out
    assert set(p.shapes[:2]) == {(4, 16), (4,)}  # the last layer's gradients come first
    assert list(p.ready_s) == sorted(p.ready_s) and p.ready_s[-1] <= p.backward_s
    assert p.forward_s > 0 and p.backward_s > 0 and p.optimizer_s > 0
    assert p.dtype_bytes == 4 and "2 parameters without gradient" in p.assumptions
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(q.grad is None for q in model.parameters())


def test_measure_profile_with_a_loss_and_keyword_inputs():
    model = torch.nn.Linear(3, 2)
    p = measure_profile(model, {"input": torch.randn(4, 3)}, loss_fn=lambda y: y.pow(2).sum(),
                        repeats=1, warmup=0)
    assert sorted(p.sizes) == [2, 6]
    with pytest.raises(ValueError, match="repeats"):
        measure_profile(model, torch.randn(4, 3), repeats=0)
