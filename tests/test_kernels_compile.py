"""The Triton kernels compiled for a GPU (sm_90) without one: the code each method family's
kernels become on NVIDIA hardware, which the interpreter the other kernel tests use never builds.

Each check runs in a process without TRITON_INTERPRET, forked from one fresh interpreter that has
imported torch and Triton once (a fresh interpreter per check costs seconds of start-up each):
a check's patches and imports stay in its own child, and its exit status and output are its own.
(test_kernels.py compiles the quantizer, sign and packing kernels in its own fresh process.)
"""
import json
import os
import subprocess
import sys

import pytest
# test_kernels skips without Triton
from test_kernels import CUDA, nvidia_backend, without_interpreter

pytestmark = pytest.mark.skipif(CUDA, reason="the CUDA kernel tests compile and run every kernel")
_TESTS = os.path.dirname(os.path.abspath(__file__))  # holds compile_check.py

# Reads {name: code} on stdin; runs each code in a child forked from here, its stdout and
# stderr in files; prints {name: [exit status, stdout, stderr]}.
RUNNER = r"""
import json, os, sys, tempfile, traceback
import torch, triton, triton.backends.nvidia.compiler  # noqa: F401 - what every check imports

def run(code):
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        pid = os.fork()
        if pid == 0:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            status = 0
            try:
                exec(compile(code, "<check>", "exec"), {"__name__": "__main__"})
            except SystemExit as exc:  # as the interpreter exits with it
                status = exc.code
                if status is not None and not isinstance(status, int):
                    print(status, file=sys.stderr)
                    status = 1
            except BaseException:
                traceback.print_exc()
                status = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status or 0)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        out.seek(0)
        err.seek(0)
        return [status, out.read(), err.read()]

results = {name: run(code) for name, code in json.loads(sys.stdin.read()).items()}
sys.stdout.write(json.dumps(results))
"""


EF = f"import sys\nsys.path.insert(0, {_TESTS!r})\n" + r'''
import re
import compile_check as cc
from gradcomp.kernels import stats as KT
from gradcomp.kernels.quantize import jit as K
from gradcomp.kernels.sign import jit as KS
from gradcomp.kernels.launch import elem_cfg, inv, rows_cfg

def cfg(kernel, sig, ce, ef_sig, ef_ce):
    return [("plain", kernel, sig, ce), ("ef", kernel, dict(sig, **ef_sig), dict(ce, **ef_ce))]

dt, f32 = "fp16", "*fp32"
EF = dict(RES=True, EF=True, MANUAL_BF16=False)
todo = []
rows, g, _ = rows_cfg(512)
todo += cfg(K.quant_rows_kernel, dict(x_ptr="*" + dt, packed_ptr="*u8", stats_ptr="*fp32",
            seed_ptr="*i64", n="i32", nblocks="i32", nbytes="i32"),
            dict(METHOD=K.QSGD, BITS=5, BP2=8, LEVELS=15, INV=inv(15), RECIP=True, STOCH=True,
                 BS=512, ROWS=rows, G=g), dict(res_ptr=f32, newres_ptr=f32), EF)
rows, g, _ = rows_cfg(256)
todo += cfg(KS.sign_rows_kernel, dict(x_ptr="*" + dt, packed_ptr="*u8", stats_ptr="*fp32",
            n="i32", nblocks="i32", nbytes="i32"), dict(METHOD=KS.ONEBIT, BS=256, ROWS=rows, G=g),
            dict(res_ptr=f32, newres_ptr=f32), EF)
rows, g, _ = elem_cfg()
todo += cfg(KS.sign_elem_kernel, dict(x_ptr="*" + dt, packed_ptr="*u8", part_ptr="*fp32",
            n="i32", nbytes="i32"), dict(STATS=KT.P_ONEBIT, ROWS=rows, G=g),
            dict(res_ptr=f32), dict(RES=True, MANUAL_BF16=False))
todo += cfg(KT.partial_kernel, dict(x_ptr="*" + dt, part_ptr="*fp32", aux_ptr="*fp32", n="i32",
            BS="i32", nblocks="i32", CPB="i32"), dict(MODE=KT.P_SUMSQ, ROWS=1, CHUNK=g * 8),
            dict(res_ptr=f32), dict(RES=True, MANUAL_BF16=False))
todo.append(("ef", KS.sign_ef_kernel, dict(x_ptr="*" + dt, stats_ptr="*fp32", packed_ptr="*u8",
             newres_ptr=f32, n="i32", nbytes="i32", res_ptr=f32),
             dict(METHOD=KS.ONEBIT, BS=100, BITS_OUT=True, ROWS=rows, G=g, MANUAL_BF16=False,
                  RES=True)))

# compile_check compiles each (and checks the PTX for IEEE division and square root);
# keep the TTGIR of each, in order.
asm = {}
import triton
real_compile = triton.compile
def keep(src, target=None, options=None):
    out = real_compile(src, target=target, options=options)
    asm[len(asm)] = out.asm["ttgir"]
    return out
triton.compile = keep
cc.configs = lambda quick=False: [(f"{tag} {k.fn.__name__ if hasattr(k, 'fn') else k.__name__}",
                                   k, s, c) for tag, k, s, c in todo]
failures = cc.compile_all(90)

def reductions(ttgir):
    """Operand types (layouts spelled out) of every tt.reduce: they fix the summation order."""
    defs = dict(re.findall(r"^(#\w+) = (.*)$", ttgir, re.M))
    types = re.findall(r'"tt\.reduce".*?\}\) : \((tensor<[^>]*>)', ttgir, re.S)
    return [re.sub(r"#\w+", lambda m: defs.get(m.group(0), m.group(0)), t) for t in types]

for i in range(0, 8 if not failures else 0, 2):  # plain / ef pairs
    if reductions(asm[i]) != reductions(asm[i + 1]) or not reductions(asm[i]):
        failures.append(f"{todo[i][1]}: the EF variant reduces in other layouts")
print("\n".join(failures))
sys.exit(1 if failures else 0)
'''

SPARSE = """
import triton
from triton.backends.compiler import GPUTarget
from gradcomp.kernels.sparse import jit as K
P, I = "*{dt}", "*i32"
cases = [
    (K.topk_hist_kernel, dict(x_ptr=P, ghist_ptr=I, ccum_ptr=I, n="i32", CHUNK="i32",
     nchunks="i32"), dict(TILE=4096), 4),
    (K.topk_split_kernel, dict(x_ptr=P, vals_ptr=P, idx_ptr=I, ckey_ptr=I, cidx_ptr=I,
     state_ptr=I, lhist_ptr=I, ghist_ptr=I, ccum_ptr=I, n="i32", k="i32", CHUNK="i32",
     nchunks="i32"), dict(TILE=2048, PB=2048), 4),
    (K.cand_write_kernel, dict(x_ptr=P, ckey_ptr=I, cidx_ptr=I, vals_ptr=P, idx_ptr=I,
     state_ptr=I, lhist_ptr=I, bcum_ptr=I), dict(TILE=4096, QB=256), 8),
    (K.thr_count_kernel, dict(x_ptr=P, thr_ptr="*fp32", cnt_ptr=I, n="i32", CHUNK="i32",
     nchunks="i32"), dict(TILE=2048), 4),
    (K.thr_write_kernel, dict(x_ptr=P, thr_ptr="*fp32", cnt_ptr=I, vals_ptr=P, idx_ptr=I,
     n="i32", k="i32", CHUNK="i32", nchunks="i32"), dict(TILE=2048, PB=2048), 4),
] + [(K.cand_hist_kernel, dict(ckey_ptr=I, state_ptr=I, lhist_ptr=I, bcum_ptr=I),
      dict(LEVEL=lev, TILE=4096), 8) for lev in range(4)]
for dt in ("fp32", "bf16"):
    for fn, sig, cx, warps in cases:
        if dt != "fp32" and "x_ptr" not in sig:
            continue
        sig = {a: v.format(dt=dt) for a, v in sig.items()}
        attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a, v in sig.items()
                 if v.startswith("*") or a in ("n", "CHUNK")}
        src = triton.compiler.ASTSource(fn=fn, signature={**sig, **dict.fromkeys(cx,
                                        "constexpr")}, constexprs=cx, attrs=attrs)
        triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": warps, "enable_fp_fusion": False})
print("ok")
"""

ORTHOGONAL = """
import triton
from triton.backends.compiler import GPUTarget
from gradcomp.kernels.orthogonal.jit import orthogonalize_kernel as K
sig = {"x_ptr": "*fp32", "table_ptr": "*i64", "n_all": "i32", "r_all": "i32", "eps": "fp32",
       "UNIFORM": "constexpr", "FIX": "constexpr", "CHUNK": "constexpr", "RP": "constexpr"}
src = triton.compiler.ASTSource(fn=K, signature=sig,
                                constexprs=dict(UNIFORM=False, FIX=True, CHUNK=64, RP=4))
ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                     options={"num_warps": 8, "enable_fp_fusion": False}).asm["ptx"]
bad = [op for op in ("div.full.f32", "div.approx.f32", "sqrt.approx.f32") if op in ptx]
assert not bad, f"approximate ops in PTX: {bad}"
"""

RANDOMK = """import triton
from triton.backends.compiler import GPUTarget
from gradcomp.kernels.randomk import jit as K
from gradcomp.kernels.randomk.launcher import GPU_TILES as T
i32 = "i32"
todo = [(K.positions_kernel, dict(out_ptr="*i64", n=i32, k=i32, m=i32, mask=i32,
         k0=i32, k1=i32, k2=i32, k3=i32), dict(BLOCK=T["positions"]))]
todo.append((K.finite_kernel, dict(x_ptr="*bf16", flags_ptr="*i8", n=i32),
             dict(BLOCK=T["finite"])))
todo.append((K.finite_positions_kernel, dict(x_ptr="*fp32", flags_ptr="*i8",
             pos_ptr="*i64", n=i32, k=i32, m=i32, mask=i32, k0=i32, k1=i32, k2=i32,
             k3=i32, every=i32, ntiles=i32),
             dict(BLOCK=T["finite"], PBLOCK=T["encode_positions"])))
todo.append((K.scatter_kernel, dict(values_ptr="*bf16", idx_ptr="*i64",
             out_ptr="*bf16", n=i32, k=i32), dict(BLOCK=T["scatter"])))
todo.append((K.gather_kernel, dict(x_ptr="*fp16", idx_ptr="*i64", flags_ptr="*i8",
             out_ptr="*fp16", n=i32, k=i32, nflags=i32),
             dict(BLOCK=T["gather"], FBLOCK=T["flags"])))
for fn, sig, cx in todo:
    full = dict(sig, **{k: "constexpr" for k in cx})
    src = triton.compiler.ASTSource(fn=fn, signature=full, constexprs=cx)
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                         options={"num_warps": 4}).asm["ptx"]
    if fn in (K.positions_kernel, K.finite_positions_kernel):
        assert "mul.lo.s64" not in ptx, "32-bit hash"
print("ok", len(todo))
"""


@pytest.fixture(scope="module")
def compiled():
    """{check: CompletedProcess} of every check, from one fresh interpreter."""
    if not nvidia_backend():
        pytest.skip("this Triton has no NVIDIA backend")
    checks = {"ef": EF, "sparse": SPARSE, "orthogonal": ORTHOGONAL, "randomk": RANDOMK}
    proc = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(checks),
                          env=without_interpreter(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {name: subprocess.CompletedProcess(name, *res)
            for name, res in json.loads(proc.stdout).items()}


def test_ef_kernels_compile_for_sm90_and_sum_in_the_same_order(compiled):
    """The EF variants compile for a GPU, and their reductions use the same layouts as the
    plain kernels' (so sums, e.g. QSGD's norm and onebit's means, agree bit for bit there too),
    for float16 gradients, whose loads are wider than the float32 residual's."""
    res = compiled["ef"]
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


def test_sparse_kernels_compile_for_sm90(compiled):
    res = compiled["sparse"]
    assert res.returncode == 0 and "ok" in res.stdout, res.stdout[-3000:] + res.stderr[-3000:]


def test_orthogonal_kernel_compiles_for_sm90(compiled):
    res = compiled["orthogonal"]
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


def test_randomk_kernels_compile_for_sm90(compiled):
    res = compiled["randomk"]
    assert res.returncode == 0 and "ok 5" in res.stdout, res.stdout[-3000:] + res.stderr[-3000:]
