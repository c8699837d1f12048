"""One job, several DDP models of the same MLP with different hooks, timed in alternating
blocks of iterations on the same processes (per-iteration times, slowest rank)."""
import json, os, sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from gradcomp import comm
from gradcomp.evaluation.workloads.load import load_workload

TOPK = ["topk", {"ratio": 0.01, "error_feedback": True}]
LAYOUT = {"hierarchical": True, "gpus_per_node": 2}
VARIANTS = {
    "fixed": ("topk", {"ratio": 0.01, "error_feedback": True, **LAYOUT}),
    "auto-topk": ("auto", {**LAYOUT, "candidates": [TOPK]}),
    "auto-topk-noslow": ("auto", {**LAYOUT, "candidates": [TOPK], "slowdown": None}),
    "fixed-psgd": ("powersgd", {"rank": 4, "error_feedback": True, "min_compression_rate": 2, **LAYOUT}),
    "auto-default": ("auto", dict(LAYOUT)),
    "flat-auto-default": ("auto", {}),
    "flat-fixed-psgd": ("powersgd", {"rank": 4, "error_feedback": True, "min_compression_rate": 2}),
    "auto2": ("auto", {**LAYOUT, "candidates": [["powersgd", {"rank": 4, "error_feedback": True, "min_compression_rate": 2}], TOPK]}),
    "auto2-r30": ("auto", {**LAYOUT, "confirm_rounds": 30, "confirm_margin": 10.0, "candidates": [["powersgd", {"rank": 4, "error_feedback": True, "min_compression_rate": 2}], TOPK]}),
    "flat-fixed": ("topk", {"ratio": 0.01, "error_feedback": True}),
    "flat-auto-topk": ("auto", {"candidates": [TOPK]}),
}

def main(out, names, rounds, block, warmup):
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    models = {}
    for name in names:
        w = load_workload("mlp", "model", batch_size=64)
        torch.manual_seed(0)
        ddp = DistributedDataParallel(w.model, bucket_cap_mb=25.0)
        method, options = VARIANTS[name]
        state = comm.register(ddp, method, **options)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        models[name] = (w, ddp, opt, w.batch(rank, 0, torch.device("cpu")), state)
    times = {n: [] for n in names}
    def step(name):
        w, ddp, opt, (x, y), _ = models[name]
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        w.loss(ddp(x), y).backward()
        opt.step()
        return time.perf_counter() - t
    for name in names:
        for _ in range(warmup):
            step(name)
    first = {n: len(models[n][4].telemetry_rows()) for n in names}
    import cProfile, pstats
    prof = cProfile.Profile() if os.environ.get("PROF") and rank == 0 else None
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            if prof and name == os.environ["PROF"]: prof.enable()
            times[name].extend(step(name) for _ in range(block))
            if prof: prof.disable()
    if prof:
        st = pstats.Stats(prof, stream=open(os.environ["PROF_OUT"], "w")); st.sort_stats("tottime").print_stats(40)
    for name in names:
        t = torch.tensor(times[name], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times[name] = t.tolist()
    if rank == 0 and os.environ.get("ALLTELE"):
        with open(os.environ["ALLTELE"], "a") as f:
            for name in names:
                f.write(json.dumps({"name": name, "rows": [{k: v for k, v in r.items() if isinstance(v, (int, float, str))} for r in models[name][4].telemetry_rows()],
                                    "switches": [list(x) for x in getattr(models[name][4], "switches", [])],
                                    "decision": models[name][4].decision_text() if hasattr(models[name][4], "decision_text") else ""}) + "\n")
    tele = {}
    for name in names:
        rows = models[name][4].telemetry_rows()[first[name]:]
        per = {}
        for row in rows:
            acc = per.setdefault(row["iteration"], [0.0, 0.0, 0.0])
            acc[0] += row["encode_s"]; acc[1] += row["comm_s"]; acc[2] += row["decode_s"]
        v = torch.tensor([per[i] for i in sorted(per)], dtype=torch.float64)
        dist.all_reduce(v, op=dist.ReduceOp.MAX)
        tele[name] = v.tolist()
    if rank == 0:
        with open(out, "a") as f:
            f.write(json.dumps({"tele": tele}) + "\n")
        with open(out, "a") as f:
            f.write(json.dumps({"names": names, "block": block, "times": times,
                                "switches": {n: [list(x) for x in models[n][4].switches] for n in names if hasattr(models[n][4], "switches")}, "decision": {n: models[n][4].decision_text() for n in names if hasattr(models[n][4], "decision_text")}, "choices": {n: models[n][4].choices_text() for n in names if hasattr(models[n][4], "choices_text")}}) + "\n")
    dist.destroy_process_group()

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[5:], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
