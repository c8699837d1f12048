"""How much longer each candidate's iterations in auto's timed rounds took than its fixed
hook's timed iterations in the same job: per candidate, the ratio of its rounds' median (from
auto's `decision_text`) to the median of its fixed variant's timed iterations, over every
auto variant with rounds in the given files (`same_job.py`'s, or `first-look/job.py`'s).

    python rounds_bias.py OUT.jsonl [OUT.jsonl ...]
"""
import json
import re
import statistics
import sys
from collections import defaultdict


def main(paths: list[str]) -> None:
    ratios = defaultdict(list)
    for path in paths:
        for record in map(json.loads, open(path)):
            decisions = record.get("decision")  # first-look: some lines hold other records
            for auto, decision in (decisions.items() if isinstance(decisions, dict) else ()):
                rounds = re.search(r"rounds: ([^;]*)", decision)
                prefix = "flat-" if auto.startswith("flat-") else ""
                for part in rounds.group(1).split(", ") if rounds else []:
                    name, ms = part.rsplit(" ", 1)
                    fixed = record["times"].get(prefix + name)
                    if fixed:
                        ratios[name].append(float(ms) / 1000 / statistics.median(fixed))
    print("| candidate | rounds | median ratio | ratios |")
    print("|:--|--:|--:|:--|")
    for name, xs in sorted(ratios.items()):
        print(f"| {name} | {len(xs)} | {statistics.median(xs):.3f} | "
              + " ".join(f"{x:.2f}" for x in sorted(xs)) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
