"""Per job of `rounds_hook.py`: top-k's and PowerSGD's iterations, and their parts (the
hook's encode, communication and decode, and the rest of the iteration), in the fixed hooks'
rotation (their steady state), in the mock rounds (separate models alternating in turns of
two) and in each auto variant's confirmation rounds (its turns' second iterations, the ones
auto times), medians in ms; then top-k over PowerSGD in each, and the rounds' ratio over the
rotation's.

    python analyse.py OUT.jsonl [OUT.jsonl ...]
"""
import json
import re
import statistics
import sys

PARTS = ("iteration", "encode", "comm", "decode", "rest")
PAIR = ("topk", "powersgd")


def parts(rows: list) -> dict[str, float]:
    """Median ms of each part over `rows` ([phase, method, s, encode, comm, decode])."""
    columns = [[r[2], r[3], r[4], r[5], r[2] - r[3] - r[4] - r[5]] for r in rows]
    return {p: 1000 * statistics.median(c[k] for c in columns) for k, p in enumerate(PARTS)}


def rounds_window(rows: list, candidates: int, decided_at: int) -> range:
    """The confirmation rounds' iterations: after the exploration (from iteration 1 each
    candidate's run of 3, or 1 where its warm-up stopped it) up to the decision."""
    i = 1
    for _ in range(candidates):
        run = 1
        while rows[i + run][1] == rows[i][1] and run < 3:
            run += 1
        i += 3 if run == 3 else 1
    return range(i, decided_at)


def second_of_turns(rows: list, window: range) -> dict[str, list]:
    return {m: [rows[i] for i in window[1::2] if rows[i][1] == m == rows[i - 1][1]]
            for m in PAIR}


def line(label: str, by: dict[str, list]) -> dict[str, dict]:
    medians = {m: parts(rs) for m, rs in by.items() if rs}
    for m, p in medians.items():
        print(f"| {label} | {m} ({len(by[m])}) | " + " | ".join(f"{p[k]:.1f}" for k in PARTS)
              + " |")
    return medians


def main(paths: list[str]) -> None:
    print("| where | method (iterations) | " + " | ".join(PARTS) + " |")
    print("|:--|:--|" + "--:|" * len(PARTS))
    ratios = []
    for path in paths:
        for j, r in enumerate(map(json.loads, open(path))):
            its = r["iterations"]
            steady = line(f"job {j}: rotation", {m: [x for x in its[m] if x[0] == "rotation"]
                                                 for m in PAIR})
            mock = [x for x in its["topk"] + its["powersgd"] if x[0] == "mock"]
            pairs = {m: [x for k, x in enumerate(its[m]) if x[0] == "mock"][1::2] for m in PAIR}
            line(f"job {j}: mock, 2nd", pairs) if mock else None
            for name, decision in r["decision"].items():
                found = re.search(r"decided at (\d+).*rounds: ([^;]*)", decision)
                if not found:
                    continue
                n = len(re.search(r"priced: ([^;]*)", decision).group(1).split(", "))
                rows = its[name]
                window = rounds_window(rows, n, int(found.group(1)))
                turns = line(f"job {j}: {name} rounds", second_of_turns(rows, window))
                if all(m in turns for m in PAIR):
                    ratios.append((name, {k: (turns["topk"][k] / turns["powersgd"][k])
                                          / (steady["topk"][k] / steady["powersgd"][k])
                                          for k in ("iteration", "rest")}))
    print("\n(top-k / PowerSGD) in the rounds over the same in the rotation, per auto:")
    for name, q in ratios:
        print(f"- {name}: iteration {q['iteration']:.3f}, rest {q['rest']:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
