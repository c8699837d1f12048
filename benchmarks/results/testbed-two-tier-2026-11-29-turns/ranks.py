"""auto's rounds per candidate (each turn's second iteration) over its fixed hook's median in
the rotations, with the iteration reduced over the ranks four ways: the slowest rank's (what
auto takes), the mean, the fastest, and each rank's own; and how far apart the slowest and the
fastest lay (`turns.py`'s files with every rank's times).

    python ranks.py OUT.jsonl [OUT.jsonl ...]
"""
import json
import statistics
import sys
from collections import defaultdict

from analyse import steady, timed_turns


def main(paths: list[str]) -> None:
    print("| job | candidate | fixed, ms | slowest | mean | fastest | apart | rank 0, 1, 2, 3 |")
    print("|:--|:--|--:|--:|--:|--:|--:|:--|")
    apart = []
    for path in paths:
        for j, r in enumerate(map(json.loads, open(path))):
            seen = defaultdict(lambda: defaultdict(list))
            for c, turns in timed_turns(r).items():
                for _, ranks in turns:
                    for how, f in (("slowest", max), ("mean", statistics.mean), ("fastest", min)):
                        seen[c][how].append(f(ranks))
                    for q, s in enumerate(ranks):
                        seen[c][q].append(s)
            for name in r["fixed"]:
                c, base = name.removeprefix("flat-"), steady(r, name)
                if c not in seen:  # not a contender: no turns
                    continue
                ratio = {how: statistics.median(xs) / base for how, xs in seen[c].items()}
                own = ", ".join(f"{ratio[q]:.3f}" for q in ratio if isinstance(q, int))
                apart.append(ratio["slowest"] - ratio["fastest"])
                print(f"| {j} | {c} | {base * 1e3:.1f} | {ratio['slowest']:.3f} "
                      f"| {ratio['mean']:.3f} | {ratio['fastest']:.3f} | {apart[-1]:.3f} "
                      f"| {own} |")
    print(f"\napart: median {statistics.median(apart):.3f}, {min(apart):.3f}-{max(apart):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
