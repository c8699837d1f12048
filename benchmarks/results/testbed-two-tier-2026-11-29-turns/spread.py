"""Per job of `turns.py`: each candidate's rounds (its turns' second iterations, the slowest
rank's, median) over its fixed hook's median in the rotations; the spread of those ratios
within the job (largest over smallest), which is what can reorder candidates, and whether the
rounds ranked the candidates as the fixed hooks ran.

    python spread.py OUT.jsonl [OUT.jsonl ...]
"""
import json
import statistics
import sys

from analyse import steady, timed_turns


def main(paths: list[str]) -> None:
    print("| file | job | each candidate the rounds timed | spread | rounds' order | fixed order |")
    print("|:--|:--|:--|--:|:--|:--|")
    for path in paths:
        for j, r in enumerate(map(json.loads, open(path))):
            seen = {c: [s for s, _ in turns] for c, turns in timed_turns(r).items()}
            fixed = {n.removeprefix("flat-"): steady(r, n) for n in r["fixed"]}
            ratio = {c: statistics.median(seen[c]) / fixed[c] for c in fixed if c in seen}
            spread = max(ratio.values()) / min(ratio.values()) - 1
            order = lambda d: " < ".join(sorted(d, key=d.get))  # noqa: E731
            print(f"| {path} | {j} | " + ", ".join(f"{c} {ratio[c]:.3f}" for c in ratio)
                  + f" | {spread:.1%} | {order({c: statistics.median(seen[c]) for c in ratio})}"
                  f" | {order({c: fixed[c] for c in ratio})} |")


if __name__ == "__main__":
    main(sys.argv[1:])
