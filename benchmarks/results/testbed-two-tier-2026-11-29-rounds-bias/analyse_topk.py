"""Per job of `rounds_topk.py`: the CPU top-k selection (on every rank: median ms, mean passes
over the magnitudes, median candidates,
page faults and CPU ms of its thread) in the fixed top-k's rotation, in the mock rounds'
second iterations and in each auto variant's confirmation rounds (its turns' second
iterations) and after them (its steady state, in the rotation).

    python analyse_topk.py OUT.jsonl [OUT.jsonl ...]
"""
import json
import re
import statistics
import sys

from analyse import rounds_window


def summary(calls: list) -> str:
    if not calls:
        return "- | - | - | - | -"
    faults = [c[6] for c in calls if len(c) > 6]
    return (f"{1000 * statistics.median(c[3] for c in calls):.1f} | "
            f"{statistics.mean(c[4] for c in calls):.2f} | "
            f"{statistics.median(c[5] for c in calls):.0f} | "
            + (f"{statistics.median(faults):.0f}" if faults else "-") + " | "
            + (f"{1000 * statistics.median(c[7] for c in calls):.1f}" if faults else "-"))


def main(paths: list[str]) -> None:
    print("| job | where | selections | ms | passes | candidates | page faults | CPU ms |")
    print("|:--|:--|--:|--:|--:|--:|--:|--:|")
    for path in paths:
        for j, r in enumerate(map(json.loads, open(path))):
            calls = [c for rank in r["selections"] for c in rank]
            groups = {"fixed top-k, rotation": [c for c in calls if c[0] == "topk"
                                                and c[1] == "rotation"]}
            mock = [c for c in calls if c[0] == "topk" and c[1] == "mock"]
            groups["fixed top-k, mock 2nd"] = [c for c in mock
                                               if (c[2] - r["warmup"]) % 2 == 1]
            for name, decision in r["decision"].items():
                found = re.search(r"decided at (\d+)", decision)
                n = len(re.search(r"priced: ([^;]*)", decision).group(1).split(", "))
                rows = r["iterations"][name]
                window = rounds_window(rows, n, int(found.group(1)))
                timed = {i for i in window[1::2] if rows[i][1] == "topk" == rows[i - 1][1]}
                groups[f"{name} rounds, 2nd"] = [c for c in calls if c[0] == name
                                                 and c[2] in timed]
                groups[f"{name} rotation"] = [c for c in calls if c[0] == name
                                              and c[1] == "rotation"]
            for where, cs in groups.items():
                print(f"| {j} | {where} | {len(cs)} | {summary(cs)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
