"""How often a perfect auto would meet "within 3% of its fastest candidate" on this testbed.

A perfect auto runs exactly as its truly fastest candidate, at no cost of its own. Its four
runs and each candidate's four are drawn from the run-to-run noise measured here. The noise is
each fixed run's ratio to the median of its method's runs at the same layout and rate, pooled
over NOISE_FOLDER (every method, four runs each). Deviations from a median of the same four
runs understate the spread, so these odds are if anything too high. The candidates' true
times are their medians in THIS_FOLDER, and auto's regret is taken as validate takes it: the
median of its runs over the least median among the candidates, minus 1.

    python noise_floor.py THIS_FOLDER NOISE_FOLDER [RUNS]   # runs of each (default 4)
"""
import sys
from pathlib import Path

import numpy as np
import pandas as pd

DRAWS, TARGET = 20000, 0.03


def noise(folder: Path) -> np.ndarray:
    """Each fixed run's time over its method's median at its layout and rate."""
    ratios = []
    for path in folder.glob("train-*.csv"):
        runs = pd.read_csv(path)
        runs = runs[runs.method != "auto"]
        for _, same in runs.groupby(["method", "options"]):
            ratios += list(same.t_iter_s / same.t_iter_s.median())
    return np.array(ratios)


def candidates(folder: Path) -> dict[str, np.ndarray]:
    """path stem -> the candidates' median times there."""
    out = {}
    for path in sorted(folder.glob("train-*.csv")):
        runs = pd.read_csv(path)
        fixed = runs[runs.method != "auto"]
        out[path.stem] = fixed.groupby(["method", "options"]).t_iter_s.median().to_numpy()
    return out


def main(here: Path, noise_folder: Path, runs: int = 4) -> None:
    rng = np.random.default_rng(0)
    ratios = noise(noise_folder)
    print(f"noise: {len(ratios)} runs, run / its median: 5-95% "
          f"{np.percentile(ratios, 5):.3f}-{np.percentile(ratios, 95):.3f}")
    passes = []
    for name, true in candidates(here).items():
        draw = lambda t: np.median(t * rng.choice(ratios, (DRAWS, runs)), axis=1)  # noqa
        fastest = np.min([draw(t) for t in true], axis=0)
        regret = draw(true.min()) / fastest - 1
        passes.append(regret <= TARGET)
        print(f"{name}: within 3% in {passes[-1].mean():.0%} of draws "
              f"(median regret {np.median(regret):+.1%})")
    print(f"within 3% at all {len(passes)}: {np.mean(np.all(passes, axis=0)):.0%} of draws")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), *map(int, sys.argv[3:4]))
