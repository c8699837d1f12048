"""How often the model's picks in this folder would measure within 5% of the fastest, drawn
from the run-to-run noise, if every method's true time were its median here.

Each method's four runs are drawn from the noise: each fixed run's ratio to the median of its
method's runs at the same layout and rate, pooled over this folder (deviations from a median
of the same four runs understate the spread). The pick's regret is taken as validate takes it:
its median over the least median of every fixed method, minus 1.

    PYTHONPATH=REPO python advice_floor.py THIS_FOLDER [RUNS]   # runs of each (default 4)
"""
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from gradcomp.evaluation.testbed.validate_diloco import run_label

DRAWS, TARGET = 20000, 0.05


def main(folder: Path, runs: int = 4) -> None:
    rng = np.random.default_rng(0)
    medians, ratios = {}, []
    for path in folder.glob("train-*.csv"):
        table = pd.read_csv(path)
        table = table[table.method != "auto"]
        table["label"] = [run_label(r) for _, r in table.iterrows()]
        for label, same in table.groupby("label"):
            ratios += list(same.t_iter_s / same.t_iter_s.median())
            medians[path.stem, label] = same.t_iter_s.median()
    ratios = np.array(ratios)
    passes = []
    for _, row in pd.read_csv(folder / "regret.csv").iterrows():
        stem = f"train-{row.rate.replace(' ', '').replace('/s', '').lower()}-{row.layout}"
        true = {m: t for (s, m), t in medians.items() if s == stem}
        draw = {m: np.median(t * rng.choice(ratios, (DRAWS, runs)), axis=1)
                for m, t in true.items()}
        regret = draw[row.pick] / np.min(list(draw.values()), axis=0) - 1
        passes.append(regret <= TARGET)
        print(f"{row.layout} {row.rate}: pick {row.pick}, true regret "
              f"{true[row.pick] / min(true.values()) - 1:+.1%}; within 5% in "
              f"{passes[-1].mean():.0%} of draws")
    count = np.sum(passes, axis=0)
    print(f"configurations within 5%, of {len(passes)}: "
          + ", ".join(f"{k}: {np.mean(count == k):.0%}" for k in range(len(passes) + 1)))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *map(int, sys.argv[2:3]))
