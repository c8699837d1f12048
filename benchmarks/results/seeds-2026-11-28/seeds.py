"""The seeds side by side: NetAI 2020's measured scaling factors and MLSys 2022's headline
against what gradcomp predicts for those clusters described as they were (presets, V100 codec
costs, efficiency and slowdown stated). Prints the markdown of README.md in this folder.
Again after the built-in codec table became the H200 measurement of 2026-11-27: `v100` and
`h100` are that table scaled by memory bandwidth, `h200` is it as measured.

    python benchmarks/results/seeds-2026-11-28/seeds.py > benchmarks/results/seeds-2026-11-28/README.md
"""
import itertools

from gradcomp.evaluation.analyses.whatif import scenario
from gradcomp.evaluation.model.cluster import resolve_cluster
from gradcomp.evaluation.model.cost_tables import cost_table


def predict(profile, cluster, nodes, method, bucketing, costs, efficiency=None, flat=False):
    """The modelled iteration on `nodes` nodes of `cluster` (flat: as many single-GPU nodes,
    each with the node's NIC, the old one-tier question)."""
    chosen, nodes = resolve_cluster(cluster, nodes=nodes, efficiency=efficiency)
    q = chosen.question(nodes)
    if flat:
        q["tiers"] = {}
    return scenario(profile, q["workers"], q["bandwidth"], method, bucketing=bucketing,
                    latency_s=q["latency_s"], efficiency=q["efficiency"], tiers=q["tiers"],
                    costs=costs)


def netai():
    lines = ["## NetAI 2020: 64 V100s, 8 nodes x 8 at 100 Gbit/s per node, Horovod", "",
             "Measured (the paper): scaling factor 0.56-0.76 over ResNet-50, ResNet-101 and "
             "VGG-16. Modelled: `--cluster p3dn.24xlarge --nodes 8 --bucketing horovod`, "
             "fp32 (no codec), compute slowdown 1 (assumed). The transport's efficiency is not "
             "published; the rows at 0.5 and 0.25 are what-ifs, not fits.", "",
             "| profile | flat (64 x 100 Gbit/s) | two tiers, efficiency 1 | 0.5 | 0.25 |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for profile in ("resnet50", "resnet101", "vgg16"):
        flat = predict(profile, "p3dn.24xlarge", 8, "none", "horovod", None, flat=True).sf
        sfs = [predict(profile, "p3dn.24xlarge", 8, "none", "horovod", None, e).sf
               for e in (None, 0.5, 0.25)]
        lines.append(f"| {profile} | {flat:.3f} | " + " | ".join(f"{s:.3f}" for s in sfs)
                     + " |")
    return lines + [""]


MLSYS_METHODS = ("powersgd:rank=4", "topk:ratio=0.01", "signsgd")
MLSYS_GPUS = (8, 16, 32, 64, 96)
MLSYS_NODES = {"p3.8xlarge": 4, "p3.16xlarge": 8}  # 10 and 25 Gbit/s, GPUs per node


def mlsys(table: str):
    costs = cost_table(table).costs
    wins = {"two tiers": 0, "flat": 0}
    rows = []
    for profile, (preset, per_node), method, gpus in itertools.product(
            ("resnet50", "resnet101", "bert-base"), MLSYS_NODES.items(), MLSYS_METHODS,
            MLSYS_GPUS):
        for layout, flat in (("two tiers", False), ("flat", True)):
            pred = predict(profile, preset, gpus // per_node, method, "ddp", costs, flat=flat)
            wins[layout] += pred.speedup > 1
            if layout == "two tiers":
                rows.append((profile, preset, method, gpus, pred.speedup))
    return wins, rows


def main():
    out = ["# The seeds side by side (2026-11-28)", "",
           "Made by `seeds.py` in this folder at the commit that adds it; the README's "
           "section The seeds, side by side quotes it. Codec costs: `h200` is the built-in "
           "table (NVIDIA H200, 2026-11-27, the current kernels); `v100` and `h100` are it "
           "scaled by memory bandwidth, not measured.", ""]
    out += netai()
    total = len(("resnet50", "resnet101", "bert-base")) * len(MLSYS_NODES) \
        * len(MLSYS_METHODS) * len(MLSYS_GPUS)
    out += ["## MLSys 2022: compression against synchronous SGD", "",
            "Measured (the paper): compression faster than well-tuned synchronous SGD in 6 of "
            "200+ set-ups. Modelled: ResNet-50, ResNet-101, BERT-base; 8, 16, 32, 64 and 96 "
            "V100s on p3.8xlarge (4 per node, 10 Gbit/s) or p3.16xlarge (8 per node, 25 "
            f"Gbit/s); PowerSGD rank 4, top-k 1%, signSGD; DDP buckets; {total} set-ups; "
            "efficiency and slowdown 1 (assumed). Set-ups where the method is predicted "
            "faster than fp32 DDP:", "",
            "| codec costs | two tiers (the presets) | flat (one GPU per node) |",
            "| --- | ---: | ---: |"]
    details = None
    for table in ("v100", "h100", "h200", "assumed"):
        wins, rows = mlsys(table)
        out.append(f"| `{table}` | {wins['two tiers']} of {total} | {wins['flat']} of {total} |")
        details = rows if table == "v100" else details
    out += ["", "Speedup over fp32 DDP per set-up, two tiers, `v100` costs:", "",
            "| profile | preset | method | " + " | ".join(f"{g} GPUs" for g in MLSYS_GPUS) + " |",
            "| --- | --- | --- | " + " | ".join("---:" for _ in MLSYS_GPUS) + " |"]
    for key, group in itertools.groupby(details, key=lambda r: r[:3]):
        out.append("| " + " | ".join(key) + " | "
                   + " | ".join(f"{r[4]:.2f}" for r in group) + " |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
