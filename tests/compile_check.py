"""Compile every configuration of the quantizer, sign, statistics and packing kernels that
their wrappers launch for a GPU target, without a GPU (a test tool).

    python tests/compile_check.py [--arch 90] [--quick | --smoke]

Triton compiles ahead of time down to PTX and a cubin (its bundled ptxas) with no device, so
this catches what Triton's interpreter cannot: type errors of the compiler, unsupported ops,
layout problems. Run it without TRITON_INTERPRET. Exit status 0 when everything compiles.
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def configs(quick: bool = False):
    """(name, kernel, signature, constexprs) of the configurations to compile."""
    from gradcomp.kernels import stats as KT
    from gradcomp.kernels.packing import jit as KP
    from gradcomp.kernels.quantize import jit as K
    from gradcomp.kernels.sign import jit as KS
    from gradcomp.kernels.launch import FUSED_MAX, inv

    out = []
    dtypes = ["fp32"] if quick else ["fp32", "fp16", "bf16"]
    quant = [  # (label, method, bits, levels, INV)
        ("int8-absmax", K.ABSMAX, 8, 127, inv(127)),
        ("int4-absmax", K.ABSMAX, 4, 7, inv(7)),
        ("int8-minmax", K.MINMAX, 8, 255, inv(127.5)),
        ("int4-minmax", K.MINMAX, 4, 15, inv(7.5)),
        ("qsgd", K.QSGD, 5, 15, inv(15)),
        ("qsgd-l127", K.QSGD, 8, 127, inv(127)),
        ("terngrad", K.TERN, 2, 1, 1.0),
    ]
    for dt in dtypes:
        for label, method, bits, levels, rcp in quant:
            stochs = [True] if method == K.TERN else [False, True]
            for stoch in stochs:
                for recip in ([True] if quick else [True, False]):
                    bp2 = max(2, 1 << (bits - 1).bit_length())
                    common = dict(METHOD=method, BITS=bits, BP2=bp2, LEVELS=levels, INV=rcp,
                                  RECIP=recip, STOCH=stoch)
                    sig = {"x_ptr": f"*{dt}", "packed_ptr": "*u8", "stats_ptr": "*fp32",
                           "seed_ptr": "*i64" if stoch else "*u8", "n": "i32",
                           "nblocks": "i32", "nbytes": "i32"}
                    bss = [256, 512] if method == K.QSGD else [256]
                    if not quick:
                        bss += [FUSED_MAX]
                    for bs in bss:
                        bsp2 = max(8, 1 << (bs - 1).bit_length())
                        rows = max(1, 4096 // bsp2)
                        out.append((f"rows {label} bs={bs} {dt} stoch={stoch} recip={recip}",
                                    K.quant_rows_kernel, sig,
                                    dict(common, BS=bs, ROWS=rows, G=bsp2 // 8)))
                    for bs in ([0] if quick else [0, 100, 1 << 20]):
                        out.append((f"elem {label} bs={bs} {dt} stoch={stoch} recip={recip}",
                                    K.quant_elem_kernel, sig,
                                    dict(common, BS=bs, ROWS=1, G=512)))
        for label, method, bits, levels, rcp in quant:
            for bs in ([256, 0] if not quick else [256]):
                for recip in ([True] if quick else [True, False]):
                    sig = {"packed_ptr": "*u8", "stats_ptr": "*fp32", "out_ptr": f"*{dt}",
                           "n": "i32", "nblocks": "i32", "nbytes": "i32"}
                    out.append((f"decode {label} bs={bs} {dt} recip={recip}",
                                K.quant_decode_kernel, sig,
                                dict(METHOD=method, BS=bs, BLOCK=2048, BITS=bits, LEVELS=levels,
                                     INV=rcp, RECIP=recip, MANUAL_BF16=False)))
                    if dt == "fp32":  # the mean of W payloads: float32 buckets only
                        sig = {"packed_ptr": "*u8", "stats_ptr": "*fp32", "out_ptr": "*fp32",
                               "n": "i32", "nblocks": "i32", "nbytes": "i32",
                               "packed_stride": "i64", "stats_stride": "i64"}
                        out.append((f"decode-mean {label} bs={bs} recip={recip}",
                                    K.quant_decode_mean_kernel, sig,
                                    dict(W=8, METHOD=method, BS=bs, BLOCK=2048, BITS=bits,
                                         LEVELS=levels, INV=rcp, RECIP=recip,
                                         W_INV=inv(8))))
        for mode in (KT.P_ABSMAX, KT.P_MINMAX, KT.P_ABSSUM, KT.P_ONEBIT, KT.P_SUMSQ):
            sig = {"x_ptr": f"*{dt}", "part_ptr": "*fp32", "aux_ptr": "*fp32", "n": "i32",
                   "BS": "i32", "nblocks": "i32", "CPB": "i32"}
            for rows, chunk in ((1, 4096), (32, 128)):
                out.append((f"partial mode={mode} rows={rows} {dt}", KT.partial_kernel, sig,
                            dict(MODE=mode, ROWS=rows, CHUNK=chunk)))
        for m in (KS.EFSIGN, KS.ONEBIT):
            sig = {"x_ptr": f"*{dt}", "packed_ptr": "*u8", "stats_ptr": "*fp32", "n": "i32",
                   "nblocks": "i32", "nbytes": "i32"}
            out.append((f"sign rows method={m} {dt}", KS.sign_rows_kernel, sig,
                        dict(METHOD=m, BS=256, ROWS=16, G=32)))
        for stats in (KT.P_NONE, KT.P_ABSMAX, KT.P_ABSSUM, KT.P_ONEBIT):
            sig = {"x_ptr": f"*{dt}", "packed_ptr": "*u8", "part_ptr": "*fp32", "n": "i32",
                   "nbytes": "i32"}
            out.append((f"sign elem stats={stats} {dt}", KS.sign_elem_kernel, sig,
                        dict(STATS=stats, ROWS=1, G=512)))
        for m in (KS.SIGN, KS.EFSIGN, KS.ONEBIT):
            sig = {"packed_ptr": "*u8", "stats_ptr": "*fp32", "out_ptr": f"*{dt}", "n": "i32",
                   "nbytes": "i32"}
            for bs in (0, 256):
                out.append((f"sign decode method={m} bs={bs} {dt}", KS.sign_decode_kernel, sig,
                            dict(METHOD=m, BS=bs, BLOCK=2048, MANUAL_BF16=False)))
        sig = {"x_ptr": f"*{dt}", "packed_ptr": "*u8", "exp_ptr": "*u8", "seed_ptr": "*i64",
               "n": "i32", "nbytes": "i32"}
        out.append((f"natural encode {dt}", K.natural_encode_kernel, sig,
                    dict(CAP=142 if dt == "fp16" else 254, ROWS=1, G=512)))
        sig = {"packed_ptr": "*u8", "exp_ptr": "*u8", "out_ptr": f"*{dt}", "n": "i32",
               "nbytes": "i32"}
        out.append((f"natural decode {dt}", K.natural_decode_kernel, sig,
                    dict(BLOCK=2048, MANUAL_BF16=False)))
    for bits in (1, 2, 4, 5, 7):
        out.append((f"pack bits={bits}", KP.pack_kernel,
                    {"codes_ptr": "*u8", "packed_ptr": "*u8", "n": "i32", "nbytes": "i32"},
                    dict(BITS=bits, BP2=max(2, 1 << (bits - 1).bit_length()), ROWS=1, G=512)))
        out.append((f"unpack bits={bits}", KP.unpack_kernel,
                    {"packed_ptr": "*u8", "codes_ptr": "*u8", "n": "i32", "nbytes": "i32"},
                    dict(BITS=bits, BLOCK=2048)))
    return out


SMOKE = ("rows int4-absmax bs=256 fp32 stoch=True", "elem qsgd bs=0 fp32 stoch=False",
         "decode int4-minmax", "sign rows method=2", "sign elem stats=3",
         "natural encode", "pack bits=5", "decode-mean int4-minmax")


def compile_all(arch: int = 90, quick: bool = False, verbose: bool = True,
                smoke: bool = False) -> list[str]:
    """Compile every configuration for CUDA sm_`arch` (a handful with `smoke`); returns the
    failures' descriptions."""
    import triton
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", arch, 32)
    failures = []
    todo = configs(quick or smoke)
    if smoke:
        todo = [c for c in todo if any(c[0].startswith(s) for s in SMOKE)]
        todo = list({c[0].split(" recip")[0]: c for c in todo}.values())
    for name, kernel, sig, constexprs in todo:
        full_sig = dict(sig)
        for k in constexprs:
            full_sig[k] = "constexpr"
        # As the JIT specializes a launch on 25.6M values: 16-byte aligned pointers, integer
        # arguments divisible by 16.
        attrs = {(kernel.arg_names.index(k),): [["tt.divisibility", 16]]
                 for k, v in sig.items() if v.startswith("*") or v == "i32"}
        t0 = time.perf_counter()
        try:
            src = triton.compiler.ASTSource(fn=kernel, signature=full_sig, constexprs=constexprs,
                                            attrs=attrs)
            compiled = triton.compile(src, target=target,
                                      options={"num_warps": 8, "enable_fp_fusion": False})
            ptx = compiled.asm["ptx"]
            # Round-to-nearest arithmetic must be IEEE: no approximate division or sqrt.
            bad = [op for op in ("div.full.f32", "div.approx.f32", "sqrt.approx.f32") if op in ptx]
            if bad:
                raise AssertionError(f"approximate ops in PTX: {bad}")
            status = "ok"
        except Exception as exc:  # noqa: BLE001 - report every failure and go on
            status = f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            failures.append(f"{name}: {status}")
        if verbose:
            print(f"{time.perf_counter() - t0:6.2f}s  {name}: {status}", flush=True)
    return failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", type=int, default=90, help="CUDA compute capability (90 = H100)")
    ap.add_argument("--quick", action="store_true", help="fewer configurations")
    ap.add_argument("--smoke", action="store_true", help="a handful of configurations")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("unset TRITON_INTERPRET to compile", file=sys.stderr)
        return 2
    failures = compile_all(args.arch, args.quick, smoke=args.smoke)
    print(f"{len(failures)} failure(s)")
    for f in failures:
        print(" ", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    sys.exit(main())
