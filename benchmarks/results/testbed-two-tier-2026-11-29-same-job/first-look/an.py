"""Per job of a first-look file: each variant's median (ms) and, block by block, the median
of each variant's block over the first variant's block of the same round (their median).

    python an.py FILE.jsonl
"""
import json, sys, statistics as s
for l in open(sys.argv[1]):
    d = json.loads(l); names = d["names"]; b = d["block"]
    t = {n: [x*1000 for x in v] for n, v in d["times"].items()}
    base = names[0]
    line = []
    for n in names:
        line.append(f"{n} {s.median(t[n]):.1f}")
    # paired by round: block medians relative to base's same round
    rel = {n: [] for n in names[1:]}
    for r in range(len(t[base]) // b):
        bm = s.median(t[base][r*b:(r+1)*b])
        for n in names[1:]:
            rel[n].append(s.median(t[n][r*b:(r+1)*b]) / bm - 1)
    print(" | ".join(line), " || paired vs", base, ", ".join(f"{n} {100*s.median(v):+.1f}%" for n, v in rel.items()), d.get("choices"))
