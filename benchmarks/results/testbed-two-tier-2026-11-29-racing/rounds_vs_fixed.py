"""How auto's confirmation rounds rank two candidates against how their fixed hooks do, in
the same job: per auto variant that timed both in its rounds (its decision's "rounds: ..."),
A's median over B's in the rounds and in the fixed hooks' timed iterations, and the
difference; then the median and mean difference. Same-job files (`same_job.py`'s lines).

    python rounds_vs_fixed.py A B FILE.jsonl [FILE.jsonl ...]    (e.g. topk powersgd)
"""
import json
import re
import statistics
import sys


def rounds_of(decision: str) -> dict[str, float]:
    found = re.search(r"rounds: ([^;]*)", decision)
    if not found:
        return {}
    return {name: float(ms) for name, ms in (x.split() for x in found.group(1).split(", "))}


def main(a: str, b: str, paths: list[str]) -> None:
    print(f"| file | job | variant | fixed {a} / {b} | rounds {a} / {b} | difference |")
    print("|:--|--:|:--|--:|--:|--:|")
    differences = []
    for path in paths:
        for j, r in enumerate(map(json.loads, open(path))):
            median = {n.removeprefix("flat-"): statistics.median(t)
                      for n, t in r["times"].items()}
            for name, decision in r["decision"].items():
                timed = rounds_of(decision)
                if a in timed and b in timed and a in median and b in median:
                    fixed, rounds = median[a] / median[b], timed[a] / timed[b]
                    differences.append(rounds - fixed)
                    print(f"| {path} | {j} | {name} | {fixed:.3f} | {rounds:.3f} "
                          f"| {rounds - fixed:+.3f} |")
    if differences:
        print(f"\n{len(differences)} variants: difference median "
              f"{statistics.median(differences):+.3f}, mean {statistics.mean(differences):+.3f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
