"""Per configuration (train-<rate>-<layout>.csv): each fixed method's runs (ms) and their
median, then auto's runs with what each decided on, and, per pass, auto over the fixed run of
the candidate it settled on in the same job. Usage: python runs.py FOLDER"""
import glob
import json
import statistics
import sys

import pandas as pd

CANDIDATES = {  # auto's default candidates as fixed runs (with its options)
    "none": lambda t, o: t["method"] == "none",
    "bf16": lambda t, o: t["method"] == "bf16",
    "powersgd": lambda t, o: (t["method"] == "powersgd") & o.map(lambda x: x.get("rank") == 4),
    "topk": lambda t, o: (t["method"] == "topk") & o.map(lambda x: bool(x.get("error_feedback"))),
}

for path in sorted(glob.glob(f"{sys.argv[1]}/train-*.csv")):
    t = pd.read_csv(path)
    o = t["options"].map(json.loads)
    print(f"== {path.split('train-')[1][:-4]}")
    for (method, options), runs in t[t["method"] != "auto"].groupby(["method", "options"],
                                                                      sort=False):
        ms = sorted(runs["t_iter_s"] * 1e3)
        print(f"  {method:9s} {options[:34]:34s} {[round(x) for x in ms]} "
              f"median {statistics.median(ms):.1f}")
    for _, run in t[t["method"] == "auto"].iterrows():
        chosen = run["auto_choices"].split(": ")[1].split(" since")[0]
        fixed = t[CANDIDATES[chosen](t, o) & (t["repeat"] == run["repeat"])]["t_iter_s"].iloc[0]
        switches = run["auto_switches"] if isinstance(run["auto_switches"], str) else "none"
        print(f"  auto pass {run['repeat']}: {run['t_iter_s'] * 1e3:.0f} ms, {chosen} "
              f"({run['t_iter_s'] / fixed - 1:+.1%} over its fixed run in the pass) | "
              f"{run['auto_decision']} | switches while timed: {switches}")
