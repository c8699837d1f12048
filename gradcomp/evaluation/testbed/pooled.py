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
taken while other engineers' sessions started)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..model.fit import hook_costs
from ..profiles.profiles import Profile, load_profile


@dataclass(frozen=True)
class Pooled:
    """What a sweep's predictions share: the profile (and the file it was read from) and the
    hook-path costs (`fit.hook_costs`), each the least disturbed of the rates' measurements."""
    profile: Profile
    profile_file: Path
    costs: dict


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
