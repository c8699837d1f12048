import sys, statistics, pandas as pd, glob, json
d = sys.argv[1]
for f in sorted(glob.glob(f"{d}/train-*.csv")):
    t = pd.read_csv(f)
    t["label"] = t.apply(lambda r: r["method"] + ("" if r["method"] in ("none","bf16","auto") else ""), axis=1)
    rate = f.split("train-")[1][:-4]
    rows = {}
    for (m, o), g in t.groupby(["method", "options"], sort=False):
        rows[m] = sorted(g["t_iter_s"] * 1e3)
    auto = rows.pop("auto")
    print(f"== {rate}")
    for m, v in rows.items():
        print(f"  {m:9s} runs {[round(x) for x in v]} min {min(v):.1f} median {statistics.median(v):.1f} mean {statistics.mean(v):.1f}")
    print(f"  auto      runs {[round(x) for x in auto]} min {min(auto):.1f} median {statistics.median(auto):.1f} mean {statistics.mean(auto):.1f}")
    print("  choices:", list(t[t.method=="auto"]["auto_choices"]))
    for stat, fn in (("min", min), ("median", statistics.median), ("mean", statistics.mean)):
        best = min(rows, key=lambda m: fn(rows[m]))
        print(f"  by {stat}: fastest {best} {fn(rows[best]):.1f}, auto {fn(auto):.1f}, regret {fn(auto)/fn(rows[best])-1:+.1%}")
