"""auto's runs against the fixed runs of the candidate each settled on, and its trials.

    python settled.py FOLDER
"""
import re
import sys
from pathlib import Path
from statistics import median

import pandas as pd

LABELS = {"powersgd": "powersgd", "topk": "topk", "bf16": "bf16", "none": "none"}


def main(folder: Path) -> None:
    for path in sorted(folder.glob("train-*.csv")):
        t = pd.read_csv(path)
        fixed = {m: list(g.t_iter_s * 1e3) for m, g in t[t.method != "auto"].groupby("method")}
        auto = t[t.method == "auto"]
        settled = [re.search(r"bucket 0: (\w+)", c).group(1) for c in auto.auto_choices]
        own = [ms / median(fixed[c]) - 1 for ms, c in zip(auto.t_iter_s * 1e3, settled)]
        trials = [d.split("trial at ")[1] for d in auto.auto_decision if "trial at" in d]
        print(f"{path.stem}: auto {median(auto.t_iter_s) * 1e3:.1f} ms, settled on "
              f"{', '.join(settled)}; each run over its candidate's median: "
              f"{', '.join(f'{o:+.1%}' for o in own)}; trials: {'; '.join(trials) or '-'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
