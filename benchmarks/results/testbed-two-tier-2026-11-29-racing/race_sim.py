"""What racing the confirmation rounds would do, drawn from measured iterations: each fixed
hook's steady iterations in `../testbed-two-tier-2026-11-29-turns` (rotations A and B of
`turns.py`, 120 per hook and job) stand for its timed turns, drawn at random; the rounds run
as `auto`'s (`trial.still_close` after every 5 rounds, up to MAX); per job and setting, the
mean regret of the pick (its median steady iteration over the fastest's), how often it was
over 3%, and the mean rounds run. Turns are drawn independently: a bias of the turns
themselves against steady iterations is not in it.

    python race_sim.py FILE.jsonl [FILE.jsonl ...]   (400 draws per job and setting, seed 1)
"""
import json
import random
import statistics
import sys

from gradcomp.comm.auto.trial import still_close

SETTINGS = ((2.0, 5), (2.0, 20), (3.0, 20), (2.0, 40))  # (standard errors, MAX)


def race(population: dict, behind: float, most: int, rng, stage: int = 5) -> tuple[str, int]:
    contenders, times, done = list(population), {c: [] for c in population}, 0
    while True:
        for c in contenders:
            times[c] += rng.choices(population[c], k=stage)
        done += stage
        close = still_close({c: times[c] for c in contenders}, behind)
        if len(close) < 2 or done >= most:
            break
        contenders = close
    medians = {c: statistics.median(t) for c, t in times.items()}
    return min(medians, key=medians.get), done


def main(paths: list[str]) -> None:
    rng = random.Random(1)
    print("| job | fixed hooks (ms) | " + " | ".join(f"{b:g} SE, max {m}" for b, m in SETTINGS)
          + " |")
    print("|:--|:--|" + "--:|" * len(SETTINGS))
    for path in paths:
        for j, r in enumerate(map(json.loads, open(path))):
            population = {n: r["rotation_a"][n] + r["rotation_b"][n] for n in r["fixed"]}
            median = {n: statistics.median(v) for n, v in population.items()}
            best = min(median.values())
            cells = []
            for behind, most in SETTINGS:
                runs = [race(population, behind, most, rng) for _ in range(400)]
                regret = [median[pick] / best - 1 for pick, _ in runs]
                cells.append(f"{100 * statistics.mean(regret):.1f}%, "
                             f"{sum(x > 0.03 for x in regret) / len(regret):.2f}, "
                             f"{statistics.mean(d for _, d in runs):.0f}")
            hooks = ", ".join(f"{n.removeprefix('flat-')} {1e3 * m:.0f}" for n, m in median.items())
            print(f"| {path.split('/')[-1]} {j} | {hooks} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
