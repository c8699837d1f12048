"""How often R iterations of each of top-k and PowerSGD (hierarchical, 1 Gbit/s), taken side
by side, pick the one that was faster over the whole job (printed first): the median of R consecutive timed iterations of each, from the same place in their blocks
(hierdef.jsonl, tele.jsonl: blocks of 5, rotating; R = 5 is one round's blocks).

    python rounds.py [FOLDER]
"""
import json
import statistics
import sys
from pathlib import Path


def main(folder: Path) -> None:
    jobs = [r for name in ("hierdef", "tele") for r in
            map(json.loads, (folder / f"{name}.jsonl").read_text().splitlines()) if "times" in r]
    pairs = [(r["times"]["fixed"], r["times"]["fixed-psgd"]) for r in jobs]
    faster = sum(statistics.median(a) < statistics.median(b) for a, b in pairs)
    print(f"top-k faster over the whole job in {faster} of {len(pairs)} jobs")
    for window in (5, 10, 15, 20, 30):
        picks = [statistics.median(a[s:s + window]) < statistics.median(b[s:s + window])
                 for a, b in pairs for s in range(0, len(a) - window + 1, 5)]
        print(f"R = {window}: top-k picked in {sum(picks) / len(picks):.0%} of {len(picks)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
