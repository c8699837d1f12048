"""CPU top-k (+EF) compress + decompress with the sample stride before (n // TOPK_SAMPLE) and
after (`sample_stride`: a prime) in one process, interleaved, median of 21, 1 thread:
`python topk_stride_ab.py NUMEL` (run from the repository root)."""
import statistics, sys, time, torch
sys.path.insert(0, "benchmarks")
torch.set_num_threads(1)
import gradcomp.compressors.sparsify as SP
import bench_cpu_codecs as B
prime = SP.sample_stride
old = lambda n: max(1, n // SP.TOPK_SAMPLE)
n = int(sys.argv[1])
for kind in ("randn", "columns"):
    x = B.data(n, kind=kind); B.SIZE[0] = n
    for case in ("topk", "topk+EF"):
        ours, _ = B.steps(case)
        times = {"old": [], "new": []}
        for r in range(21):
            for name, f in (("old", old), ("new", prime)) if r % 2 else (("new", prime), ("old", old)):
                SP.sample_stride = f
                t0 = time.perf_counter(); ours(x); times[name].append(time.perf_counter() - t0)
        a, b = (statistics.median(times[k]) * 1e3 for k in ("old", "new"))
        print(f"| {n:,} | {kind} | {case} | {a:.1f} | {b:.1f} | {b / a:.2f} |", flush=True)
