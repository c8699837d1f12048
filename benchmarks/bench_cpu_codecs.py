#!/usr/bin/env python
"""CPU encode + decode of every method against the simplest plain-torch code of the same math
(issue #15 item 6): the same selection, the same packing, the same random draws, so the same
wire bytes and the same decoded tensor.

    # script mode: 25.6M float32 values, torch.set_num_threads(2), gradcomp and plain-torch
    # interleaved, medians of --repeats runs, a table of ms and ratios:
    python benchmarks/bench_cpu_codecs.py [--numel 25600000] [--repeats 7] [--only topk,...]
    # pytest-benchmark (CI runs every case once, untimed, at a small size):
    python -m pytest benchmarks/bench_cpu_codecs.py --benchmark-enable --benchmark-only \
        --benchmark-group-by=param:case

Every case checks that gradcomp's payload tensors and decoded tensor equal the reference's bit
for bit (top-k: the same set of positions, as torch.topk's order is arbitrary), which keeps the
reference honest. One timed step is compress + decompress (with error feedback: add the
residual, compress, decompress, keep the finite residual, then the receiver's decompress).
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time

import numpy as np
import pytest
import torch

try:
    import gradcomp
except ImportError:  # run from the repository root without PYTHONPATH
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import gradcomp

F32, U8 = torch.float32, torch.uint8


# -- plain-torch helpers -------------------------------------------------------------------
def count(ratio: float, n: int) -> int:
    return min(n, max(1, math.ceil(ratio * n * (1.0 - 1e-9))))


def plain_pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """MSB-first packing: codes of 1, 2 or 4 bits OR-ed per byte; others as 8 codes in one
    int64, cut into `bits` bytes."""
    n = codes.numel()
    codes = torch.cat([codes, codes.new_zeros(-n % 8)])
    if 8 % bits == 0:
        g = codes.view(-1, 8 // bits)
        out = g[:, 0] << (8 - bits)
        for j in range(1, 8 // bits):
            out |= g[:, j] << (8 - bits * (j + 1))
    else:
        g = codes.view(-1, 8).to(torch.int64)
        v = g[:, 0] << (7 * bits)
        for j in range(1, 8):
            v |= g[:, j] << ((7 - j) * bits)
        out = torch.stack([(v >> (8 * (bits - 1 - i))) & 255 for i in range(bits)], 1).to(U8)
    return out.reshape(-1)[: (n * bits + 7) // 8]


def plain_unpack(packed: torch.Tensor, n: int, bits: int) -> torch.Tensor:
    packed = torch.cat([packed, packed.new_zeros(-packed.numel() % bits)])
    if 8 % bits == 0:
        shifts = torch.arange(8 - bits, -1, -bits, dtype=U8)
        return ((packed[:, None] >> shifts) & ((1 << bits) - 1)).reshape(-1)[:n]
    g = packed.view(-1, bits).to(torch.int64)
    v = g[:, 0] << (8 * (bits - 1))
    for i in range(1, bits):
        v |= g[:, i] << (8 * (bits - 1 - i))
    shifts = torch.arange(7 * bits, -1, -bits)
    return ((v[:, None] >> shifts) & ((1 << bits) - 1)).to(U8).reshape(-1)[:n]


def blocks(x: torch.Tensor, size: int, edge: bool = False) -> torch.Tensor:
    pad = -x.numel() % size
    filler = x[-1:].expand(pad) if edge else x.new_zeros(pad)
    return torch.cat([x, filler]).view(-1, size)


def hash32(v):
    v = v ^ (v >> 16)
    v = (v * 0x21F0AAAD) & 0xFFFFFFFF
    v = v ^ (v >> 15)
    v = (v * 0x735A2D97) & 0xFFFFFFFF
    return v ^ (v >> 15)


def feistel_positions(n: int, k: int, keys: list[int]) -> torch.Tensor:
    """pi(0..k-1): a 4-round Feistel network on 2m bits, cycle-walked into [0, n)."""
    m = max(1, -(-(n - 1).bit_length() // 2))
    mask = (1 << m) - 1

    def network(v):
        left, right = v >> m, v & mask
        for key in keys:
            left, right = right, left ^ (hash32(right ^ key) & mask)
        return (left << m) | right

    v = network(torch.arange(k))
    out = v >= n
    while out.any():
        v[out] = network(v[out])
        out = v >= n
    return v


# -- the references: (encode, decode) per method, each a closure over its own random state --
def ref_cast(dtype):
    if dtype is None:
        return (lambda x: (x,)), (lambda w: w[0])
    return (lambda x: (x.to(dtype),)), (lambda w: w[0].float())


def ref_topk(ratio=0.01):
    def enc(x):
        idx = torch.topk(x.abs(), count(ratio, x.numel()), sorted=False).indices
        return x[idx], idx.int()
    return enc, sparse_decode


def sparse_decode(w, n=None):
    out = torch.zeros(SIZE[0])
    out.index_add_(0, w[1], w[0])
    return out


def ref_randomk(ratio=0.01, seed=0):
    gen = torch.Generator().manual_seed(seed)
    pos = {}

    def enc(x):
        n = x.numel()
        keys = torch.randint(0, 2**31, (4,), generator=gen).tolist()
        pos["p"] = p = feistel_positions(n, count(ratio, n), keys)
        return (torch.where(torch.isfinite(x).all(), x[p], math.nan),)

    def dec(w):
        out = torch.zeros(SIZE[0])
        out[pos["p"]] = w[0]
        return out
    return enc, dec


def ref_threshold(ratio=0.01, sample_ratio=0.01, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def enc(x):
        n = x.numel()
        k, s = count(ratio, n), count(sample_ratio, n)
        mags = x.abs().nan_to_num(nan=math.inf)
        sample = mags[torch.randint(0, n, (s,), generator=gen)] if s < n else mags
        thr = torch.topk(sample, count(ratio, s), sorted=False).values.min()
        inf = mags == math.inf
        idx = torch.cat([torch.nonzero(inf)[:, 0], torch.nonzero((mags >= thr) & ~inf)[:, 0]])
        idx = idx[:k]
        values = torch.cat([x[idx], x.new_zeros(k - idx.numel())])
        return values, torch.cat([idx, idx.new_zeros(k - idx.numel())]).int()
    return enc, sparse_decode


def ref_powersgd(rank=1):
    state = {"q": None, "res": None, "seeds": np.random.RandomState(0)}

    def enc(x):
        n = x.numel()
        work = x + state["res"] if state["res"] is not None else x.clone()
        rows = math.isqrt(n - 1) + 1
        cols = -(-n // rows)
        mat = torch.cat([work, work.new_zeros(rows * cols - n)]).view(1, rows, cols)
        q = state["q"]
        if q is None:
            g = torch.Generator().manual_seed(int(state["seeds"].randint(1_000_000_000)))
            q = torch.randn(cols, rank, generator=g).unsqueeze(0)
        q = q / torch.linalg.vector_norm(q, dim=1, keepdim=True)
        p = torch.bmm(mat, q)
        p = p / torch.linalg.vector_norm(p, dim=1, keepdim=True)
        q = torch.bmm(mat.transpose(1, 2), p)
        state["q"] = q
        state["res"] = (work - torch.bmm(p, q.transpose(1, 2)).view(-1)[:n]).nan_to_num_(
            0.0, 0.0, 0.0)
        return x.new_zeros(0), p.view(-1), q.view(-1)

    def dec(w):
        rows, cols = w[1].numel(), w[2].numel()
        return torch.mm(w[1].view(rows, 1), w[2].view(1, cols)).view(-1)[: SIZE[0]]
    return enc, dec


def ref_qsgd(levels=15, block_size=512, seed=0):
    gen = torch.Generator().manual_seed(seed)
    bits = 1 + levels.bit_length()

    def enc(x):
        xb = blocks(x, block_size)
        mag = xb.abs()
        amax = mag.amax(1)
        unit = torch.where((amax > 0) & torch.isfinite(amax), amax, 1.0)
        norm = (torch.linalg.vector_norm(xb / unit[:, None], dim=1) * unit).float()
        r = mag / torch.where(norm > 0, norm, 1.0)[:, None] * levels
        r = r.nan_to_num(nan=0.0).clamp(0, levels)
        lo = r.floor()
        level = lo + (torch.rand(r.shape, generator=gen) < r - lo)
        codes = level.to(U8) | (((xb < 0) & (level > 0)).to(U8) << (bits - 1))
        return plain_pack(codes.view(-1)[: x.numel()], bits), norm

    def dec(w):
        codes = blocks(plain_unpack(w[0], SIZE[0], bits), block_size)
        mag = (codes & ((1 << (bits - 1)) - 1)).float() * (w[1] / levels)[:, None]
        return torch.where(codes >> (bits - 1) == 1, -mag, mag).view(-1)[: SIZE[0]]
    return enc, dec


def ref_int(bits, block_size=256):
    qmax = (1 << (bits - 1)) - 1

    def enc(x):
        xb = blocks(x, block_size)
        scale = xb.abs().amax(1) / qmax
        r = (xb / torch.where(scale > 0, scale, 1.0)[:, None]).nan_to_num(nan=0.0)
        codes = (r.clamp(-qmax, qmax).round() + qmax).to(U8).view(-1)[: x.numel()]
        return (codes if bits == 8 else plain_pack(codes, bits)), scale

    def dec(w):
        q = w[0][: SIZE[0]] if bits == 8 else plain_unpack(w[0], SIZE[0], bits)
        return ((blocks(q, block_size).float() - qmax) * w[1][:, None]).view(-1)[: SIZE[0]]
    return enc, dec


def ref_terngrad(seed=0):
    gen = torch.Generator().manual_seed(seed)

    def enc(x):
        mag = x.abs()
        s = mag.amax().reshape(1)
        p = (mag / torch.where(s > 0, s, 1.0)).nan_to_num(nan=0.0).clamp(0, 1)
        keep = (torch.rand(x.shape, generator=gen) < p).to(U8)
        codes = 1 + keep - 2 * (keep & (x < 0).to(U8))
        return plain_pack(codes, 2), s

    def dec(w):
        return (plain_unpack(w[0], SIZE[0], 2).float() - 1) * w[1]
    return enc, dec


def ref_natural(seed=0):
    gen = torch.Generator().manual_seed(seed)

    def enc(x):
        mag = x.abs()
        mant, ex = torch.frexp(mag)
        small = mag < 2.0 ** -126
        exp = torch.where(small, 0, ex + 126)
        p_up = torch.where(small, mag * 2.0 ** 126, 2 * mant - 1)
        up = torch.rand(x.shape, generator=gen) < p_up
        exp = (exp + up).clamp(max=254)
        exp = torch.where(torch.isinf(mag) | (ex + 126 >= 255), 255, exp)
        nan = torch.isnan(x)
        exp = torch.where(nan, 0, exp)
        sign = (torch.signbit(x) & (exp > 0)) | nan
        return plain_pack(sign.to(U8), 1), exp.to(U8)

    def dec(w):
        sign = plain_unpack(w[0], SIZE[0], 1).bool()
        mag = (w[1].to(torch.int32) << 23).view(F32)
        out = torch.where(sign, -mag, mag)
        return torch.where(sign & (w[1] == 0), math.nan, out)
    return enc, dec


def ref_signsgd():
    def enc(x):
        flag = torch.where(torch.isfinite(x).all(), 1.0, math.nan).reshape(1)
        return plain_pack((x >= 0).to(U8), 1), flag

    def dec(w):
        return torch.where(plain_unpack(w[0], SIZE[0], 1).bool(), w[1], -w[1])
    return enc, dec


def ref_efsignsgd():
    def enc(x):
        return plain_pack((x >= 0).to(U8), 1), x.abs().mean().reshape(1)

    def dec(w):
        return torch.where(plain_unpack(w[0], SIZE[0], 1).bool(), w[1], -w[1])
    return enc, dec


def ref_onebit():
    def enc(x):
        pos = x >= 0
        npos = pos.sum()
        means = torch.stack([torch.where(pos, x, 0).sum() / npos.clamp(min=1),
                             torch.where(pos, 0, x).sum() / (x.numel() - npos).clamp(min=1)])
        return plain_pack(pos.to(U8), 1), means

    def dec(w):
        return torch.where(plain_unpack(w[0], SIZE[0], 1).bool(), w[1][0], w[1][1])
    return enc, dec


#: case -> (method, error feedback, reference factory); default options throughout.
CASES = {
    "none": ("none", False, lambda: ref_cast(None)),
    "fp16": ("fp16", False, lambda: ref_cast(torch.float16)),
    "bf16": ("bf16", False, lambda: ref_cast(torch.bfloat16)),
    "topk": ("topk", False, ref_topk),
    "topk+EF": ("topk", True, ref_topk),
    "randomk": ("randomk", False, ref_randomk),
    "threshold": ("threshold", False, ref_threshold),
    "powersgd": ("powersgd", None, ref_powersgd),
    "qsgd": ("qsgd", False, ref_qsgd),
    "int8": ("int8", False, lambda: ref_int(8)),
    "int4": ("int4", False, lambda: ref_int(4)),
    "terngrad": ("terngrad", False, ref_terngrad),
    "natural": ("natural", False, ref_natural),
    "signsgd": ("signsgd", False, ref_signsgd),
    "efsignsgd": ("efsignsgd", False, ref_efsignsgd),
    "efsignsgd+EF": ("efsignsgd", True, ref_efsignsgd),
    "onebit": ("onebit", False, ref_onebit),
    "onebit+EF": ("onebit", True, ref_onebit),
}
#: The decoders' output length (the references' decoders take only the wire tensors).
SIZE = [0]


def steps(case: str):
    """(gradcomp step, plain step): each maps x to (wire tensors, decoded tensor)."""
    method, ef, factory = CASES[case]
    c = gradcomp.compressor(method, error_feedback=ef)
    enc, dec = factory()
    res = {}

    def ours(x):
        p = c.compress(x)
        return p.tensors, c.decompress(p)

    def plain(x):
        if ef:
            corrected = x + res["r"] if "r" in res else x.clone()
            wire = enc(corrected)
            res["r"] = (corrected - dec(wire)).nan_to_num_(0.0, 0.0, 0.0)
        else:
            wire = enc(x)
        return wire, dec(wire)
    return ours, plain


def same(case: str, a, b) -> bool:
    (wa, da), (wb, db) = a, b
    if CASES[case][0] == "topk":  # torch.topk's order is arbitrary: compare the sets
        ia, ib = wa[1].sort(), wb[1].sort()
        wa, wb = (wa[0][ia.indices], ia.values), (wb[0][ib.indices], ib.values)
    return (len(wa) == len(wb) and all(torch.equal(u, v) for u, v in zip(wa, wb))
            and torch.equal(da, db))


def data(n: int, seed: int = 0, kind: str = "randn") -> torch.Tensor:
    """randn, or "columns": rows of 1024 whose magnitudes scale with the column, as a weight
    gradient's do with its inputs' sizes (what a strided sample can misjudge)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=gen)
    if kind == "columns":
        scale = torch.rand(1024, generator=gen) ** 4
        x *= scale.repeat(-(-n // 1024))[:n]
    x[:: max(1, n // 50)] = 0.0  # a few zeros: sign methods send them as non-negative
    return x


# -- pytest ----------------------------------------------------------------------------------
N_TEST = int(os.environ.get("GRADCOMP_BENCH_NUMEL", 65_536 + 37))


@pytest.mark.parametrize("impl", ["gradcomp", "plain"])
@pytest.mark.parametrize("case", list(CASES))
def test_cpu_codec(benchmark, case, impl):
    SIZE[0] = N_TEST
    ours, plain = steps(case)
    x = data(N_TEST)
    for step in range(3):  # with error feedback, steps 2 and 3 carry a residual
        assert same(case, ours(x * (1 + step)), plain(x * (1 + step))), (case, step)
    benchmark.group = case
    benchmark(ours if impl == "gradcomp" else plain, x)


# -- script ----------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=25_600_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated cases (default: all)")
    ap.add_argument("--data", choices=("randn", "columns"), default="randn",
                    help="the input: randn, or 1024-wide rows scaled by column (`data`)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    SIZE[0] = args.numel
    cases = args.only.split(",") if args.only else list(CASES)
    x = data(args.numel, kind=args.data)
    print(f"# {args.numel:,} float32 values ({args.data}), {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"median of {args.repeats} (interleaved)")
    print("| case | gradcomp ms | plain ms | ratio |\n| --- | ---: | ---: | ---: |")
    for case in cases:
        ours, plain = steps(case)
        assert same(case, ours(x), plain(x)), case  # also the warm-up
        times = {"gradcomp": [], "plain": []}
        for r in range(args.repeats):
            order = [("gradcomp", ours), ("plain", plain)]
            for name, fn in order if r % 2 == 0 else order[::-1]:
                t0 = time.perf_counter()
                fn(x)
                times[name].append(time.perf_counter() - t0)
        a, b = (statistics.median(times[k]) * 1e3 for k in ("gradcomp", "plain"))
        print(f"| {case} | {a:.2f} | {b:.2f} | {a / b:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
