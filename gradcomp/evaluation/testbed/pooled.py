"""The compute profile and the hook-path costs do not depend on the link's rate, yet a sweep
measures them at every rate (each in the testbed of its rate, right after the training runs):
repeated measurements of one quantity. Other work on the machine only ever adds time to a
measurement, so the least disturbed of the repeats is the best estimate of the quantity
(the minimum, as ``timeit``'s documentation advises for repeated timings), and a single
disturbed repeat then no longer moves one rate's predictions. The compute that training
runs lose to contention is the compute slowdown lambda's to explain (`slowdown`), fitted on
the uncompressed runs against this same profile.

Measured: on the flat sweep of ``benchmarks/results/testbed-2026-11-28-once`` the
single-worker iteration of the four rates' profiles was 110, 94, 50 and 43 ms (the first two
taken while other engineers' sessions started).

The training runs follow the same rule: `validate --train-repeats N` measures each rate's
runs N times, interleaved (every method once per pass, each pass in another order:
`pass_order`), and predicts, holds against the model and ranks per method the run of the
least median iteration time (`least_disturbed_runs`); every run stays in the table. One
sequential run per method varied 5-10% on this shared 2-core machine (spreads of 16-31 ms on
87-102 ms iterations in ``testbed-2026-11-28-auto``), more than the regret targets of 3-5%.
Interleaved, the two runs of one method at one rate still differed by a median of 5.2% (90th
percentile 15.7%; ``testbed-2026-11-28-repeats``): each timed 20 iterations, spread 17-56 ms
on 82-133 ms, and the median of 20 such varies by about 3.5%, two of them by about 5%. So each
run also times at least `MIN_TIMED_S` seconds (`benches.train`'s time budget): that sweep's
runs of 82-338 ms would time 24-99 iterations (median 75), whose median varies by about 1.9%
(3.5% x sqrt(20 / 75)); those of 0.65-1.45 s (ddp and none at 100 and 500 Mbit/s) keep their
20. On its 96 runs the budget adds about 7.6 minutes to the 27-minute sweep."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..benches.train import KEY_COLUMNS as TRAIN_KEYS
from ..benches.train import plan_runs, train_table
from ..model.fit import hook_costs
from ..profiles.profiles import Profile, load_profile


@dataclass(frozen=True)
class Pooled:
    """What a sweep's predictions share: the profile (and the file it was read from) and the
    hook-path costs (`fit.hook_costs`), each the least disturbed of the rates' measurements."""
    profile: Profile
    profile_file: Path
    costs: dict


#: Seconds each training run of `validate` times at least, besides its iterations (docstring).
MIN_TIMED_S = 8.0
#: The hook-path bench's phases, summed to rank its repeated rows (`least_disturbed_costs`).
PHASES = ("encode_s", "middle_s", "decode_s")


def least_disturbed_profile(paths) -> tuple[Profile, Path]:
    """Of the profiles stored at `paths` (those that exist), the one with the shortest
    single-worker iteration, and its path."""
    found = [(load_profile(p), Path(p)) for p in paths if Path(p).exists()]
    if not found:
        raise FileNotFoundError(f"no profile at any of {', '.join(map(str, paths))}")
    return min(found, key=lambda pair: pair[0].t_iter_single)


def least_disturbed_costs(tables, keys) -> pd.DataFrame:
    """One row per key (`keys`: the hook-path table's key columns) of the hook-path tables
    `tables` (one per rate): the row whose phases sum to the least time."""
    tables = [t for t in tables if len(t)]
    if not tables:
        return pd.DataFrame()
    rows = pd.concat(tables, ignore_index=True)
    total = rows[[c for c in PHASES if c in rows]].fillna(0.0).sum(axis=1)
    best = total.groupby([rows[k].astype(str) for k in keys], sort=False).idxmin()
    return rows.loc[sorted(best)].reset_index(drop=True)


def least_disturbed(profile_paths, hook_tables, keys, label) -> Pooled:
    """The least disturbed of the profiles at `profile_paths` and, per key (`keys`), of the
    rows of `hook_tables`, priced per bucket (`fit.hook_costs`) under the name `label(row)`
    gives each row (a method with its options)."""
    profile, path = least_disturbed_profile(profile_paths)
    codecs = least_disturbed_costs(hook_tables, keys)
    return Pooled(profile, path, hook_costs(codecs.assign(method=codecs.apply(label, axis=1)))
                  if len(codecs) else {})


def profile_line(table: pd.DataFrame) -> str:
    """One line: the profile a validation table (columns profile_file, t_iter_single) was
    predicted with."""
    used = table.drop_duplicates("profile_file")
    return ("Compute profile and hook-path costs: measured at every rate, the least disturbed "
            "used at all (profile " + ", ".join(
                f"`{r['profile_file']}`: single-worker iteration {r['t_iter_single'] * 1e3:.1f} ms"
                for _, r in used.iterrows()) + ").")


def pass_order(items: list, repeat: int) -> list:
    """The order of `items` (a sweep's methods) in training pass `repeat` (0, 1, ...): rotated
    by ``repeat // 2``, reversed in the odd passes, so that a method follows other methods in
    other passes (a rotation alone keeps every neighbour but one) and the first of a pass
    changes."""
    k = repeat // 2 % len(items) if items else 0
    order = list(items[k:]) + list(items[:k])
    return order[::-1] if repeat % 2 else order


def train_keys(cases, spec: dict, workers: int, repeats: int) -> dict[tuple[int, int], tuple]:
    """{(index in `cases`, repeat): its key in a training table} of the runs of `cases`
    ((name, options)) with `spec` (`make_spec`), each measured `repeats` times, on the
    testbed's `workers` CPU processes on gloo (as the sub-jobs key them)."""
    table = train_table("train.csv")
    return {(i, r): key for r in range(repeats) for i, case in enumerate(cases)
            for key in plan_runs([case], {**spec, "repeat": r}, workers, "gloo", "cpu", table)}


def training_passes(methods, keys: dict, done: set) -> list[tuple[int, list[str]]]:
    """(repeat, methods) of each training job that measures what `done` (a table's keys)
    lacks of the interleaved passes over `methods` (names; `keys`: `train_keys` of them, the
    repeats to measure): one job per pass r, its methods in `pass_order`, `auto` among them
    (`benches.train` times it after its exploration), so that a job's conditions fall on
    auto and the fixed methods alike."""
    index = {m: i for i, m in enumerate(methods)}
    repeats = 1 + max((r for _, r in keys), default=-1)
    jobs = [(r, [m for m in pass_order(methods, r) if keys[index[m], r] not in done])
            for r in range(repeats)]
    return [(r, names) for r, names in jobs if names]


def least_disturbed_runs(train: pd.DataFrame, keys=TRAIN_KEYS) -> pd.DataFrame:
    """Per run of a training table (`train`; `keys`: its key columns, ``repeat`` among them)
    the repeat with the least median iteration time (``t_iter_s``), in the order the runs
    were first measured, with columns ``repeats``: how many of its repeats were measured, and
    ``t_iter_runs_median_s``: the median of their ``t_iter_s`` (what the regret compares:
    `regret.regret_time`)."""
    if not len(train):
        return train.assign(repeats=[], t_iter_runs_median_s=[])
    ids = train[[c for c in keys if c != "repeat"]].astype(str).apply(tuple, axis=1)
    first = {run: n for n, run in enumerate(dict.fromkeys(ids))}
    median = train["t_iter_s"].groupby(ids).median()
    best = train.assign(_run=ids, repeats=ids.map(ids.value_counts()),
                        t_iter_runs_median_s=ids.map(median)).sort_values(
        "t_iter_s", kind="stable", na_position="last").drop_duplicates("_run")
    return best.sort_values("_run", key=lambda runs: runs.map(first)).drop(
        columns="_run").reset_index(drop=True)


def timed_line(table: pd.DataFrame) -> str:
    """One line: how many iterations each training run of a validation table (column
    ``iterations``) timed."""
    many = _span(table["iterations"])
    return (f"Timed iterations per training run: {many} (at least `--iterations`, and with a "
            "time budget at least `--min-timed-seconds` seconds; column `iterations` of "
            "`train-<rate>*.csv`).")


def repeats_line(table: pd.DataFrame) -> str:
    """One line: how many training runs per method and rate a validation table (column
    ``repeats``) chose from, and the rule."""
    many = _span(table["repeats"])
    if many == "1":
        return "Training runs: one per method and rate, its time the measured time here."
    return (f"Training runs: {many} per method and rate, measured interleaved (every method "
            "once per pass, each pass in another order); the least disturbed, the one of least "
            "median iteration time, is the measured time here, every run is kept in "
            "`train-<rate>*.csv` (column `repeat`).")


def _span(column: pd.Series) -> str:
    """A count column's values as "n" or "least-most"."""
    n = column.dropna().astype(int)
    return f"{n.min()}" if n.min() == n.max() else f"{n.min()}-{n.max()}"
