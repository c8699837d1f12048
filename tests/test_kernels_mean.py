"""The one-launch mean of W gathered payloads (`kernels.*_decode_mean`, taken by the all-gather
communicator for int8/int4, QSGD and TernGrad) against the path it replaces: the compressor's
`aggregate` (each payload decoded, summed in payload order, divided by W), bit for bit.

Without a GPU the kernels run under Triton's interpreter on CPU tensors (TRITON_INTERPRET=1 set
below, before the kernels load); with one, on CUDA tensors, where `aggregate_rows` also
dispatches to them (on the CPU it declines and the communicator decodes payload by payload).
"""
import os

import torch

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ["TRITON_INTERPRET"] = "1"  # before gradcomp.kernels loads its Triton kernels

import pytest  # noqa: E402

pytest.importorskip("triton")

import gradcomp  # noqa: E402
from gradcomp import kernels  # noqa: E402
from gradcomp.comm import wire  # noqa: E402

DEVICE = "cuda" if CUDA else "cpu"
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
CASES = {  # name -> (options, the kernel for the mean given rows, offsets, numel, out)
    "int8": ({}, lambda c, *a: kernels.int_decode_mean(*a[:3], 8, c.block_size, c.scheme,
                                                         a[3])),
    "int4-minmax": ({"scheme": "minmax", "block_size": 64},
                    lambda c, *a: kernels.int_decode_mean(*a[:3], 4, c.block_size, c.scheme,
                                                          a[3])),
    "qsgd": ({}, lambda c, *a: kernels.qsgd_decode_mean(*a[:3], c.levels, c.block_size, a[3])),
    "terngrad": ({}, lambda c, *a: kernels.terngrad_decode_mean(*a[:3], c.block_size, a[3])),
    "terngrad-bs256": ({"block_size": 256},
                       lambda c, *a: kernels.terngrad_decode_mean(*a[:3], c.block_size, a[3])),
}


def gathered(payloads):
    """The payloads' wire bytes as rows of one tensor, as the all-gather receives them (rows
    padded to 16 bytes, the padding filled with noise)."""
    packed = [wire.pack_bytes(p.tensors) for p in payloads]
    stride = -(-packed[0].numel() // 16) * 16
    rows = torch.randint(0, 256, (len(packed), stride), dtype=torch.uint8, device=DEVICE)
    for row, bytes_ in zip(rows, packed):
        row[: bytes_.numel()] = bytes_
    return rows


def bits(t):
    return t.view(torch.int32)


@pytest.mark.parametrize("world", [1, 2, 5])
@pytest.mark.parametrize("case", sorted(CASES))
def test_mean_of_rows_equals_aggregate(case, world):
    options, mean = CASES[case]
    name = case.split("-")[0]
    numel = 3001
    gen = torch.Generator().manual_seed(world)
    xs = [torch.randn(numel, generator=gen) * 10.0 ** torch.randint(-3, 3, (numel,),
                                                                     generator=gen)
          for _ in range(world)]
    xs[0][:40] = 0.0  # whole zero blocks: all-zero statistics
    xs[-1][50:60] = -0.0
    xs[0][7] = float("nan")
    comps = [gradcomp.compressor(name, **options) for _ in range(world)]
    payloads = []
    for rank, (comp, x) in enumerate(zip(comps, xs)):
        comp.set_rank(rank)
        payloads.append(comp.compress(x.to(DEVICE)))
    want = comps[0].aggregate(payloads)
    rows = gathered(payloads)
    offsets = wire.offsets(payloads[0].tensors)
    got = mean(comps[0], rows, offsets, numel, torch.full((numel,), 7.0, device=DEVICE))
    nan = torch.isnan(want)
    assert torch.equal(nan, torch.isnan(got))
    assert torch.equal(bits(want)[~nan], bits(got)[~nan])
    fused = comps[0].aggregate_rows(rows, offsets, payloads[0], torch.empty_like(got))
    if CUDA:
        assert torch.equal(bits(fused), bits(got))
    else:
        assert fused is None  # CPU tensors stay on the torch path


def test_mean_refuses_unaligned_rows():
    comp = gradcomp.compressor("int8")
    payload = comp.compress(torch.randn(100, device=DEVICE))
    rows = gathered([payload])
    with pytest.raises(ValueError, match="4-byte aligned"):
        kernels.int_decode_mean(rows[:, 1:], wire.offsets(payload.tensors), 100, 8)
