"""One recommendation a user can act on, with its speedup over fp32 DDP and over a 16-bit
all-reduce (bf16; fp16 on GPUs without bf16 support).

With convergence runs (`recommend_by_accuracy`): the variant (method, options, error
feedback) with the shortest predicted time to accuracy among those that reached the target
on every seed and are priced by the cost table; a variant that did not converge, or whose
codec fit was excluded, is never recommended (the line names them).

Without convergence runs (`recommend_by_iteration`): nothing says how a lossy method slows
learning, so only methods whose convergence is not in question (`SAFE`: fp32, fp16, bf16)
are recommended, by predicted iteration time; the fastest other method is named as
unverified, with the command that would check it.

On a GPU without bf16 (`NO_BF16`) bf16 is never recommended nor compared with: fp16 is the
16-bit baseline there (`unsupported` says why).
"""
from __future__ import annotations

import math

import pandas as pd

from ..model.cluster import Cluster
from ..model.cost_tables import CostTable, hardware_note
from ..model.methods import resolve
from ..profiles.profiles import load_profile

SAFE = ("none", "bf16", "fp16")
NO_BF16 = ("V100", "P100", "P40", "P4", "T4", "K80", "M40")  # GPUs without bf16 arithmetic


def sixteen_bit(device: str) -> str:
    """The 16-bit all-reduce a user of `device` would run: bf16, or fp16 where the GPU has
    no bf16 support (Volta and older, Turing)."""
    return "fp16" if any(tag in (device or "") for tag in NO_BF16) else "bf16"


def question_gpu(cluster: Cluster | None, profile_device: str) -> str:
    """The GPU a question runs on: the cluster's when it names one (its codecs and 16-bit
    all-reduce run there; the compute stays the profile's as measured), else the profile's
    device."""
    return cluster.device if cluster is not None and cluster.device else profile_device


def question_text(profile, cluster: Cluster, nodes: int, bucketing: str) -> str:
    """The question in words: the profile (and its device where the cluster's GPU is
    another), the cluster with where its network efficiency and compute slowdown come from
    (`Cluster.describe`), and the bucketing."""
    prof = load_profile(profile)
    other = cluster.device and prof.device and prof.device.lower() != cluster.device.lower()
    compute = f" (compute as measured on {prof.device})" if other else ""
    return f"`{prof.name}`{compute} on {cluster.describe(nodes)}; {bucketing} bucketing"


def unsupported(method: str, device: str) -> str | None:
    """Why `method` (a name or variant label) cannot run on `device`, or None when it can."""
    if method.split("(")[0].split("+")[0].strip() == "bf16" and sixteen_bit(device) != "bf16":
        return f"the {device} has no bf16 arithmetic; fp16 is the 16-bit baseline there"
    return None


def priced_ranking(ranking: pd.DataFrame, table: CostTable) -> pd.DataFrame:
    """`ranking` without the rows `table` does not price (a baseline `advise` always adds
    whose fit was excluded), ranks renumbered: nothing unpriced is ranked."""
    kept = ranking[ranking["method"].map(table.priced)]
    return kept.assign(rank=range(1, len(kept) + 1)).reset_index(drop=True)


def not_ranked(methods, ranking: pd.DataFrame, table: CostTable, device: str) -> dict:
    """{method: why} for each of `methods` that `ranking` lacks: not runnable on the
    profile's `device` (`unsupported`), its codec fit excluded or absent from `table`, or
    not predicted (``auto`` chooses per bucket at run time)."""
    ranked = set(ranking["method"])
    why = {}
    for method in dict.fromkeys(methods):
        if method in ranked or (":" in method and resolve(method).name in ranked):
            continue  # ranked under its label: name:key=value as name(key=value)
        why[method] = (unsupported(method, device) or (
            f"codec fit excluded by table `{table.name}`: {table.excluded[method]}"
            if method in table.excluded else
            f"not in codec table `{table.name}`" if not table.priced(method) else
            "chooses its method per bucket at run time, so it has no one prediction"
            if method == "auto" else "not asked for (--methods)"))
    return why


def _name(method: str) -> str:
    return {"none": "fp32 DDP (no compression)", "bf16": "bf16 all-reduce",
            "fp16": "fp16 all-reduce"}.get(method, method)


def _head(device: str, table: CostTable, question: str, compute_device: str | None) -> str:
    mix = hardware_note(device if compute_device is None else compute_device, table, device)
    return ("- **Recommendation**" + (f" ({mix})" if mix else "") + f" for {question}, "
            f"codec costs from table `{table.name}`: ")


def _ratio(ref, best, column: str) -> float:
    return ref[column] / best[column] if ref is not None else math.nan


def recommend_by_accuracy(tta: pd.DataFrame, table: CostTable, device: str, question: str,
                          compute_device: str | None = None) -> str:
    """The recommendation line from a `time_to_accuracy` table priced with `table` for a
    question on `device` (the GPU its codecs and 16-bit baseline run on); `compute_device`:
    the profile's device where it is another (its compute as measured), None: `device`."""
    priced = tta["method"].map(table.priced)
    reached = tta["time_to_target_s"].notna()
    runs_here = ~tta["method"].map(lambda m: bool(unsupported(m, device)))
    candidates = tta[priced & reached & runs_here]
    unpriced = list(tta[~priced]["variant"])
    failed = list(tta[~reached]["variant"])
    missing = list(tta[~runs_here]["variant"])
    tail = ("" if not failed else f" Never recommended, did not reach the target: "
            f"{', '.join(failed)}.") + ("" if not unpriced else
                                        f" Not priced (codec fit excluded or not in the "
                                        f"table): {', '.join(unpriced)}.") + (
        "" if not missing else f" Never recommended, {unsupported('bf16', device)}: "
        f"{', '.join(missing)}.")
    head = _head(device, table, question, compute_device)
    if candidates.empty:
        return head + f"none: no priced variant reached the target.{tail}"
    best = candidates.iloc[0]
    plain = tta[~tta["error_feedback"]].set_index("method")
    half = sixteen_bit(device)
    parts = []
    for base, label in (("none", "fp32 DDP"), (half, f"the {half} all-reduce")):
        if best["variant"] == base:
            continue
        ref = plain.loc[base] if base in plain.index else None
        if not table.priced(base):
            parts.append(f"no comparison with {label}: {base} is not priced by table "
                         f"`{table.name}` ({table.excluded.get(base, 'not in it')})")
        elif ref is not None and not math.isnan(ref["time_to_target_s"]):
            parts.append(f"{_ratio(ref, best, 'time_to_target_s'):.2f}x sooner than {label} "
                         f"({ref['iterations_to_target']:.0f} iterations x "
                         f"{ref['t_iter_s'] * 1e3:.1f} ms)")
        elif ref is not None:
            parts.append(f"{_ratio(ref, best, 't_iter_s'):.2f}x faster per iteration than "
                         f"{label}, which did not reach the target")
        else:
            parts.append(f"no {label} run to compare with")
    ref = plain.loc["none"] if "none" in plain.index else None
    if ref is not None and best["variant"] != "none" and \
            ref["iterations_min"] <= best["iterations_to_target"] <= ref["iterations_max"]:
        parts.append(f"its iteration count lies within fp32 DDP's seed spread "
                     f"({ref['iterations_min']:.0f}-{ref['iterations_max']:.0f}), so the gain "
                     "is the iteration time")
    if best["variant"] != best["method"]:  # options or error feedback the table lacks
        parts.append(f"its codec cost is {best['method']}'s with default options and without "
                     f"error feedback, as table `{table.name}` measured it: the variant's own "
                     "work is not priced")
    goal = (f"test {best['metric']} {'>=' if best['metric'] == 'accuracy' else '<='} "
            f"{best['target']:g} on task '{best['task']}' (the convergence proxy: iterations "
            "measured on this task, not on the profiled model)")
    return (head + f"**{_name(best['variant'])}**: reaches {goal} in "
            f"{best['iterations_to_target']:.0f} iterations x {best['t_iter_s'] * 1e3:.1f} ms "
            f"= {best['time_to_target_s']:.3g} s (iterations measured, iteration time "
            f"predicted){'; ' + '; '.join(parts) if parts else ''}.{tail}")


def best_safe(ranking: pd.DataFrame, table: CostTable, device: str = "") -> pd.Series:
    """The row `recommend_by_iteration` recommends: the first of `ranking` (fastest first)
    that is lossless enough without convergence runs (`SAFE`), priced by `table` and
    runnable on the profile's `device` (no bf16 where the GPU lacks it)."""
    safe = [m for m in SAFE if not unsupported(m, device)]
    return ranking[ranking["method"].isin(safe) & ranking["method"].map(table.priced)].iloc[0]


def recommend_by_iteration(ranking: pd.DataFrame, table: CostTable, device: str,
                           question: str, compute_device: str | None = None) -> str:
    """The recommendation line from an `advise` ranking when no convergence runs exist
    (`device`, `compute_device` as for `recommend_by_accuracy`)."""
    head = _head(device, table, question, compute_device)
    rows = ranking[ranking["method"].map(table.priced)]
    best = best_safe(ranking, table, device)
    by = rows.set_index("method")
    half = sixteen_bit(device)
    parts = [(f"{by.loc[base, 't_iter_s'] / best['t_iter_s']:.2f}x faster per iteration "
              f"than {label}") if base in by.index else
             (f"no comparison with {label}: {base} is not priced by table `{table.name}` "
              f"({table.excluded.get(base, 'not in it')})") if not table.priced(base) else
             f"no comparison with {label}: {base} was not ranked"
             for base, label in (("none", "fp32 DDP"), (half, f"the {half} all-reduce"))
             if base != best["method"]]
    if unsupported("bf16", device):
        parts.append(f"bf16 is not an option: {unsupported('bf16', device)}")
    other = rows[~rows["method"].isin(SAFE)]
    unverified = "" if other.empty or other.iloc[0]["t_iter_s"] >= best["t_iter_s"] else (
        f" Faster per iteration but unverified: {other.iloc[0]['method']} "
        f"({best['t_iter_s'] / other.iloc[0]['t_iter_s']:.2f}x); whether it reaches the "
        "same accuracy is unknown: run `gradcomp bench converge` and pass --convergence.")
    return (head + f"**{_name(best['method'])}** ({best['t_iter_s'] * 1e3:.1f} ms per "
            f"iteration{'; ' + '; '.join(parts) if parts else ''}). No convergence runs: "
            f"only {', '.join(m for m in SAFE if not unsupported(m, device))} are "
            f"recommended without them.{unverified}")
