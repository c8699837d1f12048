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
from dataclasses import dataclass

import pandas as pd

from ..model.cluster import Cluster
from ..model.cost_tables import CostTable, hardware_note
from ..model.methods import resolve
from ..profiles.profiles import load_profile
from .evidence import Evidence

SAFE = ("none", "bf16", "fp16")
MARGIN = 0.05
"""How much sooner than the 16-bit baseline a lossy method must be at the low end of its
interval to be recommended (1.05x). The interval holds only what was measured (codec fits,
seeds, the network fit); what it leaves out moves a prediction by about this much: the
model's median error on the testbed's compressed runs is 4-5% with the fitted slowdown, 7-8%
without (docs/workload.md: fitted, not assumed), the proxy task stands in for the real
model's convergence, and contention is one fitted factor. A lossy method also brings tuning
and state that a 16-bit all-reduce does not, so a gain inside that error is not worth acting
on."""
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


def ranked(methods, device: str, table: CostTable | None = None) -> list:
    """The methods an `advise` ranking of `methods` on `device` holds, in its order: those
    `device` runs (`unsupported`; a `MethodCost` or ratio always) with the baselines none and
    `sixteen_bit(device)` put first where absent; with `table`, only what it prices (what
    `priced_ranking` keeps)."""
    priced = (lambda m: True) if table is None else table.priced
    chosen = [m for m in methods
              if not isinstance(m, str) or (not unsupported(m, device) and priced(m))]
    for i, baseline in enumerate(("none", sixteen_bit(device))):
        if priced(baseline) and not any(m == baseline or getattr(m, "name", None) == baseline
                                        for m in chosen):
            chosen.insert(i, baseline)
    return chosen


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


@dataclass(frozen=True)
class Wording:
    """How a verdict names its timeline's baselines: the uncompressed run (`plain`), the
    collective a 16-bit baseline compresses (`collective`), and how a lossy method's
    convergence would be checked (`check`)."""

    plain: str = "fp32 DDP"
    collective: str = "all-reduce"
    check: str = "run `gradcomp bench converge` and pass --convergence"

    def baseline(self, method: str) -> str:
        """A baseline as the object of a comparison: "fp32 DDP", "the bf16 all-reduce"."""
        return self.plain if method == "none" else f"the {method} {self.collective}"


DDP = Wording()
FSDP = Wording("FSDP's own reduce-scatter", "reduce-scatter",
               "`gradcomp bench converge` measures it on the convergence proxy with the DDP "
               "hook (the FSDP timeline takes no --convergence)")


def method_name(method: str, wording: Wording = DDP) -> str:
    """How a verdict names a method or variant (the baselines in words)."""
    return {"none": f"{wording.plain} (no compression)", "bf16": f"bf16 {wording.collective}",
            "fp16": f"fp16 {wording.collective}"}.get(method, method)


def _head(device: str, table: CostTable, question: str, compute_device: str | None) -> str:
    mix = hardware_note(device if compute_device is None else compute_device, table, device)
    return ("- **Recommendation**" + (f" ({mix})" if mix else "") + f" for {question}, "
            f"codec costs from table `{table.name}`: ")


def _times(row, column: str) -> str:
    """"1.57x (1.49-1.66x)": a speedup column of `row` with its interval (`evidence.weigh`)."""
    low, high = row.get(f"{column}_low", math.nan), row.get(f"{column}_high", math.nan)
    interval = "" if math.isnan(low) else f" ({low:.2f}-{high:.2f}x)"
    return f"{row[column]:.2f}x{interval}"


def _check_weighed(table: pd.DataFrame) -> None:
    if "vs_16bit_low" not in table:
        raise ValueError("the table carries no intervals: weigh it first (`evidence.weigh`)")


def candidates(tta: pd.DataFrame, table: CostTable, device: str) -> pd.DataFrame:
    """The variants of a `time_to_accuracy` table that may be recommended: priced by
    `table`, reached the target on every seed, runnable on `device`; fastest first."""
    return tta[tta["method"].map(table.priced) & tta["time_to_target_s"].notna()
               & ~tta["method"].map(lambda m: bool(unsupported(m, device)))]


@dataclass(frozen=True)
class Choice:
    """What `choose` recommends (`row`; None: no candidate), the faster lossy variant
    `held` back (its interval does not clear the margin; None: none), and the baseline the
    margin was taken over (`over`: a variant name, "" when no lossless variant reached the
    target, so that nothing could be weighed)."""

    row: pd.Series | None
    held: pd.Series | None
    over: str


def choose(tta: pd.DataFrame, table: CostTable, device: str, margin: float = MARGIN) -> Choice:
    """The recommendation of a weighed `time_to_accuracy` table (`evidence.weigh`): the
    fastest `candidates` variant, where a lossy one (not `SAFE`) must be at least 1 + `margin`
    times sooner than the 16-bit baseline (fp32 DDP where that did not reach the target)
    at the low end of its interval; else the fastest lossless variant."""
    _check_weighed(tta)
    rows = candidates(tta, table, device)
    if rows.empty:
        return Choice(None, None, "")
    lossless = rows[rows["method"].isin(SAFE)]
    half = sixteen_bit(device)
    over = next((b for b in (half, "none") if (lossless["variant"] == b).any()), "")
    if not over:
        return Choice(rows.iloc[0], None, "")
    low = "vs_16bit_low" if over == half else "speedup_to_target_low"
    clear = rows[~rows["method"].isin(SAFE) & (rows[low] >= 1 + margin)]
    pick = lossless.iloc[0]
    if len(clear) and clear.iloc[0]["time_to_target_s"] < pick["time_to_target_s"]:
        pick = clear.iloc[0]
    first = rows.iloc[0]
    return Choice(pick, None if first["variant"] == pick["variant"] else first, over)


def _would_change(held, over_row, over_label: str, low: str, evidence: Evidence,
                  margin: float) -> str:
    """What evidence would let the `held` variant clear the margin over `over_row`."""
    need, point = 1 + margin, held[low.removesuffix("_low")]
    if point < need:
        return (f"its point estimate ({point:.2f}x) is itself below {need:.2f}x, so more "
                "evidence would not change the answer; only another setting could")
    wanted = []
    if held["iterations_min"] < held["iterations_max"] or \
            over_row["iterations_min"] < over_row["iterations_max"]:
        wanted.append(
            f"more seeds (iterations to target {held['iterations_min']:.0f}-"
            f"{held['iterations_max']:.0f} for it, {over_row['iterations_min']:.0f}-"
            f"{over_row['iterations_max']:.0f} for {over_label}, over {held['seeds']} "
            "seed(s): `gradcomp bench converge --seeds 10`, then --convergence)")
    if not evidence.measured or evidence.spread(held["variant"]) or \
            evidence.spread(over_row["variant"]):
        wanted.append(f"codec costs measured on your GPU ({held['variant']} "
                      + (f"+-{evidence.spread(held['variant']):.0%} in table "
                         if evidence.measured else "from ") + f"{evidence.label}: "
                      "`gradcomp bench compress`, then --costs FILE)")
    if evidence.network:
        wanted.append(f"a tighter network fit (+-{evidence.network:.0%}: `gradcomp bench "
                      "collective` with more sizes and repeats)")
    return (f"{held['variant']} would need a lower bound above {need:.2f}x: "
            + ("; ".join(wanted) if wanted else "a narrower interval"))


def _margin_text(choice: Choice, tta: pd.DataFrame, evidence: Evidence,
                 margin: float, device: str) -> str:
    """The sentence on the margin: cleared (with the lower bound), or who was held back and
    what would change it."""
    half = sixteen_bit(device)
    label = f"the {half} all-reduce" if choice.over == half else "fp32 DDP"
    low = "vs_16bit_low" if choice.over == half else "speedup_to_target_low"
    rule = (f"a lossy method is recommended only when it is at least {1 + margin:.2f}x "
            f"sooner than the 16-bit baseline (else fp32 DDP) across its interval (margin "
            f"{margin:.0%})")
    best = choice.row
    if not choice.over:
        return (" No lossless variant reached the target, so its margin could not be "
                f"weighed ({rule}).") if best["method"] not in SAFE else ""
    if best["method"] not in SAFE:
        return (f" It clears the margin: at least {best[low]:.2f}x sooner than {label} "
                f"across its interval ({rule}).")
    if choice.held is None:
        return ""
    over_row = tta[tta["variant"] == choice.over].iloc[0]
    change = _would_change(choice.held, over_row, label, low, evidence, margin)
    return (f" Faster by the point estimate but not recommended: {choice.held['variant']}, "
            f"{_times(choice.held, low.removesuffix('_low'))} sooner than {label}: {rule}. "
            f"What would change it: {change}.")


def recommend_by_accuracy(tta: pd.DataFrame, table: CostTable, device: str, question: str,
                          evidence: Evidence, flips: str = "", margin: float = MARGIN,
                          compute_device: str | None = None) -> str:
    """The recommendation line from a weighed `time_to_accuracy` table (`evidence.weigh`)
    priced with `table` (`choose`) for a question on `device` (the GPU its codecs and 16-bit
    baseline run on), its intervals, the margin, the `evidence` and where the answer flips
    (`flips`: `evidence.flips`'s sentence); `compute_device`: the profile's device where it
    is another (its compute as measured), None: `device`."""
    choice = choose(tta, table, device, margin)
    reached = tta["time_to_target_s"].notna()
    runs_here = ~tta["method"].map(lambda m: bool(unsupported(m, device)))
    unpriced = list(tta[~tta["method"].map(table.priced)]["variant"])
    failed = list(tta[~reached]["variant"])
    missing = list(tta[~runs_here]["variant"])
    tail = ("" if not failed else f" Never recommended, did not reach the target: "
            f"{', '.join(failed)}.") + ("" if not unpriced else
                                        f" Not priced (codec fit excluded or not in the "
                                        f"table): {', '.join(unpriced)}.") + (
        "" if not missing else f" Never recommended, {unsupported('bf16', device)}: "
        f"{', '.join(missing)}.")
    head = _head(device, table, question, compute_device)
    if choice.row is None:
        return head + f"none: no priced variant reached the target.{tail}"
    best = choice.row
    plain = tta[~tta["error_feedback"]].set_index("method")
    half = sixteen_bit(device)
    parts = []
    for base, label, column in (("none", "fp32 DDP", "speedup_to_target"),
                                (half, f"the {half} all-reduce", "vs_16bit")):
        if best["variant"] == base:
            continue
        ref = plain.loc[base] if base in plain.index else None
        if not table.priced(base):
            parts.append(f"no comparison with {label}: {base} is not priced by table "
                         f"`{table.name}` ({table.excluded.get(base, 'not in it')})")
        elif ref is not None and not math.isnan(ref["time_to_target_s"]):
            parts.append(f"{_times(best, column)} sooner than {label} "
                         f"({ref['iterations_to_target']:.0f} iterations x "
                         f"{ref['t_iter_s'] * 1e3:.1f} ms)")
        elif ref is not None:
            parts.append(f"{ref['t_iter_s'] / best['t_iter_s']:.2f}x faster per iteration "
                         f"than {label}, which did not reach the target")
        else:
            parts.append(f"no {label} run to compare with")
    if best["variant"] != best["method"]:  # options or error feedback the table lacks
        parts.append(f"its codec cost is {best['method']}'s with default options and without "
                     f"error feedback, as table `{table.name}` measured it: the variant's own "
                     "work is not priced")
    goal = (f"test {best['metric']} {'>=' if best['metric'] == 'accuracy' else '<='} "
            f"{best['target']:g} on task '{best['task']}' (the convergence proxy: iterations "
            "measured on this task, not on the profiled model)")
    spread = ("" if best["iterations_min"] == best["iterations_max"] else
              f" ({best['iterations_min']:.0f}-{best['iterations_max']:.0f} over the seeds)")
    shown = [best["variant"], half, *(() if choice.held is None else [choice.held["variant"]])]
    return (head + f"**{method_name(best['variant'])}**: reaches {goal} in "
            f"{best['iterations_to_target']:.0f} iterations{spread} x "
            f"{best['t_iter_s'] * 1e3:.1f} ms = {best['time_to_target_s']:.3g} s "
            f"({best['time_to_target_low_s']:.3g}-{best['time_to_target_high_s']:.3g} s; "
            f"iterations measured, iteration time predicted)"
            f"{'; ' + '; '.join(parts) if parts else ''}."
            f"{_margin_text(choice, tta, evidence, margin, device)} Intervals from: "
            f"{evidence.describe(shown, int(tta['seeds'].max()))}."
            + (f" {flips}" if flips else "") + tail)


def best_safe(ranking: pd.DataFrame, table: CostTable, device: str = "") -> pd.Series:
    """The row `recommend_by_iteration` recommends: the first of `ranking` (fastest first)
    that is lossless enough without convergence runs (`SAFE`), priced by `table` and
    runnable on the profile's `device` (no bf16 where the GPU lacks it)."""
    safe = [m for m in SAFE if not unsupported(m, device)]
    return ranking[ranking["method"].isin(safe) & ranking["method"].map(table.priced)].iloc[0]


def recommend_by_iteration(ranking: pd.DataFrame, table: CostTable, device: str,
                           question: str, evidence: Evidence, flips: str = "",
                           compute_device: str | None = None, margin: float = MARGIN,
                           wording: Wording = DDP) -> str:
    """The recommendation line from a weighed `advise` ranking (`evidence.weigh`) when no
    convergence runs exist, with its intervals, the `evidence` and where the answer flips
    (`flips`); `device`, `compute_device` as for `recommend_by_accuracy`. The faster lossy
    method it names as unverified is weighed against the `margin` over the 16-bit baseline
    (fp32 where that is not ranked); `wording`: how the timeline's baselines read."""
    _check_weighed(ranking)
    head = _head(device, table, question, compute_device)
    rows = ranking[ranking["method"].map(table.priced)]
    best = best_safe(ranking, table, device)
    by = rows.set_index("method")
    half = sixteen_bit(device)
    own = {"none": "speedup", half: "vs_16bit"}  # the columns of speedups over each baseline
    parts = [(f"{_times(best, own[base])} faster per iteration than {wording.baseline(base)}")
             if base in by.index else
             (f"no comparison with {wording.baseline(base)}: {base} is not priced by table "
              f"`{table.name}` ({table.excluded.get(base, 'not in it')})")
             if not table.priced(base) else
             f"no comparison with {wording.baseline(base)}: {base} was not ranked"
             for base in ("none", half) if base != best["method"]]
    if unsupported("bf16", device):
        parts.append(f"bf16 is not an option: {unsupported('bf16', device)}")
    other = rows[~rows["method"].isin(SAFE)]
    faster = not other.empty and other.iloc[0]["t_iter_s"] < best["t_iter_s"]
    unverified = "" if not faster else _unverified(other.iloc[0], best, own, margin, wording)
    shown = [best["method"], half, *([other.iloc[0]["method"]] if faster else [])]
    return (head + f"**{method_name(best['method'], wording)}** ({best['t_iter_s'] * 1e3:.1f} "
            f"ms per iteration, {best['t_iter_low_s'] * 1e3:.1f}-"
            f"{best['t_iter_high_s'] * 1e3:.1f} ms"
            f"{'; ' + '; '.join(parts) if parts else ''}). No convergence runs: "
            f"only {', '.join(m for m in SAFE if not unsupported(m, device))} are "
            f"recommended without them.{unverified} Intervals from: "
            f"{evidence.describe(shown)}." + (f" {flips}" if flips else ""))


def _unverified(other: pd.Series, best: pd.Series, own: dict, margin: float,
                wording: Wording) -> str:
    """The sentence on the fastest lossy method `other` of a ranking whose recommendation
    `best` is slower: how much faster, whether it clears the `margin` over the 16-bit
    baseline across its interval (fp32's where that is not ranked), how to check it."""
    ratio = _times(other, own[best["method"]]) if best["method"] in own else \
        f"{best['t_iter_s'] / other['t_iter_s']:.2f}x"
    over = next((b for b, c in own.items() if b != "none" and math.isfinite(other[c])), "none")
    low, need = other[f"{own[over]}_low"], 1 + margin
    weighed = (f"it clears the margin, at least {low:.2f}x faster than "
               f"{wording.baseline(over)} across its interval" if low >= need else
               f"it does not clear the margin, {low:.2f}x faster than "
               f"{wording.baseline(over)} at the low end of its interval")
    return (f" Faster per iteration but unverified: {other['method']}, {ratio} faster; "
            f"{weighed} (the margin a lossy method must clear to be recommended once its "
            f"convergence is known: {need:.2f}x, {margin:.0%}); whether it reaches the same "
            f"accuracy is unknown: {wording.check}.")
