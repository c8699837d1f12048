"""Per job of `turns.py`: each candidate's time in each phase over its fixed hook's median in
the rotations (A and B together), and auto's rounds by the turn that came before; then, over
every job given, each candidate's median (and range) of the mock rounds' and auto's rounds'
second iterations.

    python analyse.py OUT.jsonl [OUT.jsonl ...]
"""
import json
import statistics
import sys
from collections import defaultdict


def ratio(xs, base) -> str:
    return f"{statistics.median(xs) / base:.3f}" if xs else "-"


def steady(record: dict, name: str) -> float:
    """A fixed hook's median iteration in rotations A and B together."""
    return statistics.median(record["rotation_a"][name] + record["rotation_b"][name])


def timed_turns(record: dict) -> dict[str, list]:
    """contender -> its turns' second iterations in auto's rounds (turns of two from the
    rounds' start), each (slowest rank's seconds, every rank's or None)."""
    rounds, seen = (record["auto_rounds"] or [[]])[0], {}
    for k, (_, c, s, *ranks) in enumerate(rounds):
        if k % 2:
            seen.setdefault(c, []).append((s, ranks[0] if ranks else None))
    return seen


def main(paths: list[str]) -> None:
    seconds = defaultdict(lambda: defaultdict(list))  # candidate -> phase -> per-job ratios
    print("| job | candidate | rotation A | rotation B | warm-up (last half) | mock 1st | mock 2nd "
          "| auto 1st | auto 2nd | auto 2nd after none, bf16, powersgd, topk |")
    print("|:--|:--|--:|--:|--:|--:|--:|--:|--:|:--|")
    for path in paths:
        for j, r in enumerate(map(json.loads, open(path))):
            rounds = r["auto_rounds"][0] if r["auto_rounds"] else []
            by_turn = defaultdict(list)  # (contender, place in turn, predecessor) -> seconds
            for k, (i, c, s, *_) in enumerate(rounds):  # turns of two from the rounds' start
                place = k % 2
                before = rounds[k - 1 - place][1] if k > place else None  # the turn before's
                by_turn[c, place, before].append(s)
            for name in r["fixed"]:
                short = name.removeprefix("flat-")
                base = steady(r, name)
                mock = {p: [s for n, q, s in r["mock_before"] + r["mock_after"]
                            if n == name and q == p] for p in (0, 1)}
                auto = {p: [s for (c, q, _), xs in by_turn.items() if c == short and q == p
                            for s in xs] for p in (0, 1)}
                after = ", ".join(ratio(by_turn.get((short, 1, b), []), base)
                                  for b in ("none", "bf16", "powersgd", "topk"))
                for phase, xs in (("mock", mock[1]), ("auto", auto[1])):
                    if xs:  # a candidate auto did not time (no contender): none
                        seconds[short][phase].append(statistics.median(xs) / base)
                warm = r["warmups"][name][len(r["warmups"][name]) // 2:]
                print(f"| {j} | {short} ({base * 1e3:.1f} ms) "
                      f"| {ratio(r['rotation_a'][name], base)} "
                      f"| {ratio(r['rotation_b'][name], base)} | {ratio(warm, base)} "
                      f"| {ratio(mock[0], base)} | {ratio(mock[1], base)} "
                      f"| {ratio(auto[0], base)} | {ratio(auto[1], base)} | {after} |")
            auto_b = statistics.median(r["rotation_b"][r["auto"]])
            print(f"| {j} | auto: {r['choices']} | | {auto_b * 1e3:.1f} ms | | | | | | |")
    print("\n| candidate | mock rounds, 2nd iteration | auto's rounds, 2nd iteration |")
    print("|:--|:--|:--|")
    for c, phases in seconds.items():
        print(f"| {c} | " + " | ".join(f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"
                                       if xs else "-" for xs in (phases["mock"], phases["auto"]))
              + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
