"""PowerSGD is priced as the hook runs it: one codec application per bucket and batched shape
group (not per tensor), 1-D tensors sent plain; the count is the real hook's on a DDP model."""
import importlib
import math

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import gradcomp.comm as gc
from gradcomp.evaluation.common.env import end_process_group
from gradcomp.evaluation.model.bucketing import DDP
from gradcomp.evaluation.model.cost_tables import cost_table
from gradcomp.evaluation.model.methods import PLAIN_COPY_S, resolve
from gradcomp.evaluation.profiles.measure import measure_ddp_profile
from gradcomp.evaluation.profiles.profiles import load_profile

BUCKET_CAP_MB = 1.5


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    yield
    end_process_group()  # the test's hooked DDP freed first


def _model() -> nn.Module:
    """Convolutions and linear layers, several of one shape, with biases and batch norms
    (1-D tensors the hook sends plain): about 4.4 MB of float32 gradients."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3), nn.BatchNorm2d(32), nn.ReLU(),
        *[layer for _ in range(3) for layer in (nn.Conv2d(32, 32, 3, padding=1), nn.ReLU())],
        nn.AdaptiveAvgPool2d(4), nn.Flatten(),
        *[layer for _ in range(4) for layer in (nn.Linear(512, 512), nn.ReLU())],
        nn.Linear(512, 10))


def _loss(out):
    return out.square().mean()


def test_the_model_counts_the_codec_calls_the_hook_makes(one_rank, monkeypatch):
    inputs = torch.randn(4, 3, 10, 10, generator=torch.Generator().manual_seed(1))
    profile = measure_ddp_profile(_model(), (inputs,), _loss, BUCKET_CAP_MB, repeats=1,
                                  warmup=1)
    method = resolve("powersgd")
    # torch's DDP given bucket_cap_mb caps its first bucket at the same size
    buckets = DDP(BUCKET_CAP_MB, first_bucket_mb=BUCKET_CAP_MB).assign(profile)
    modelled = [method.applications([profile.shapes[i] for i in b.params]) for b in buckets]

    powersgd = importlib.import_module("gradcomp.compressors.powersgd")
    real, calls = powersgd.orthogonalize_all, []

    def counted(flat, views, shapes, *args, **kwargs):  # the real function, its calls counted
        calls.append(len(shapes))
        return real(flat, views, shapes, *args, **kwargs)

    monkeypatch.setattr(powersgd, "orthogonalize_all", counted)
    ddp = DistributedDataParallel(_model(), bucket_cap_mb=BUCKET_CAP_MB)
    gc.register(ddp, "powersgd")
    for step in range(3):  # DDP rebuilds its buckets in ready order after the first step
        calls.clear()
        _loss(ddp(inputs)).backward()
    # Each bucket orthogonalises once in `begin` (Q) and once in `next_round` (P), one batch
    # per shape group.
    hook_groups = calls[::2]
    assert calls[1::2] == hook_groups and len(hook_groups) == len(buckets) > 2
    assert hook_groups == [groups for groups, _, _ in modelled]
    matrices = [s for s in profile.shapes if len(s) >= 2]
    assert sum(hook_groups) < len(matrices) < len(profile.shapes)  # batched, not per tensor
    plain = sum(math.prod(s) for s in profile.shapes if len(s) == 1)
    assert sum(kept for _, _, kept in modelled) == plain
    assert sum(n for _, n, _ in modelled) + plain == sum(profile.sizes)


def test_resnet50_codec_time_differs_between_tables_only_by_their_costs():
    profile = load_profile("resnet50")
    shapes = profile.shapes
    buckets = [[shapes[i] for i in b.params] for b in DDP().assign(profile)]
    applications = [resolve("powersgd").applications(b) for b in buckets]
    calls = sum(c for c, _, _ in applications)
    compressed = sum(n for _, n, _ in applications)
    plain = sum(k for _, _, k in applications)
    assert len(shapes) == 161 and sum(len(s) == 1 for s in shapes) == 107
    assert calls == 26 and plain == sum(math.prod(s) for s in shapes if len(s) == 1)
    for table in ("h200", "h100", "assumed"):
        method = resolve("powersgd", cost_table(table).costs)
        assert method.middle is None
        (ae, be), (ad, bd) = method.encode, method.decode
        expected = (ae + ad) * calls + (be + bd) * compressed + 2 * PLAIN_COPY_S * plain
        codec = sum(method.encode_s(b) + method.decode_s(b) for b in buckets)
        assert codec == pytest.approx(expected, rel=1e-12)
