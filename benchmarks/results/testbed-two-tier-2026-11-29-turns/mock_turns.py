"""The mock rounds of `turns.py` by place in the turn: each fixed hook's median iteration at
each place over its median in the rotations, median over the jobs given (for turns longer
than auto's: MOCK_TURN).

    python mock_turns.py OUT.jsonl [OUT.jsonl ...]
"""
import json
import statistics
import sys
from collections import defaultdict

from analyse import steady


def main(paths: list[str]) -> None:
    ratios = defaultdict(lambda: defaultdict(list))  # candidate -> place -> per-job ratios
    for path in paths:
        for r in map(json.loads, open(path)):
            for name in r["fixed"]:
                base = steady(r, name)
                places = defaultdict(list)
                for n, place, s in r["mock_before"] + r["mock_after"]:
                    if n == name:
                        places[place].append(s)
                for place, xs in places.items():
                    ratios[name][place].append(statistics.median(xs) / base)
    for name, places in ratios.items():
        print(name, " ".join(f"{p + 1}: {statistics.median(xs):.3f}"
                             for p, xs in sorted(places.items())))


if __name__ == "__main__":
    main(sys.argv[1:])
