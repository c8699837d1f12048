"""The hooks (every method and `auto`) on CUDA tensors: NCCL with one rank per GPU, and 2 gloo ranks sharing a GPU (so
that a single-GPU machine still checks cross-rank agreement). Skipped without CUDA."""
import pytest
import torch

from ddp_workers import HOOKS, cuda_cases, spawn

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def runs():
    nccl_ranks = torch.cuda.device_count()
    return {"nccl": spawn(cuda_cases, 1, backend="nccl") if nccl_ranks == 1
            else spawn(cuda_cases, nccl_ranks, backend="nccl"),
            "gloo": spawn(cuda_cases, 2, backend="gloo")}


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
@pytest.mark.parametrize("name", HOOKS)
def test_every_method_trains_on_cuda(runs, backend, name):
    results = runs[backend]
    first = results[0][name]
    assert torch.isfinite(first["params"]).all()
    assert first["after"] < 0.5 * first["before"], (first["before"], first["after"])
    for other in results[1:]:
        assert torch.equal(other[name]["params"], first["params"])
