"""What a two-tier validation (`validate_tiers`) measures: each layout's runs and the hook's
options for it, the stored keys each table needs, and what a folder still lacks."""
from __future__ import annotations

from pathlib import Path

import torch

from ..benches.hookpath import KEY_COLUMNS as CODEC_KEYS
from ..benches.hookpath import (case_keys, gradient_source, hook_methods, hook_sizes,
                                quarter_sizes)
from ..benches.train import train_table
from ..common.store import ResultTable
from ..model.methods import method_spec, parse_methods
from .pooled import train_keys, training_passes
from .ratecheck import TIER_KEYS, TIERS
from .validate import profile_path, rate_tag


def layout_cases(methods, layout: str, gpus_per_node: int) -> list[tuple[str, dict]]:
    """(method, options) of the training runs of `layout`: the method's own (`methods` as
    ``name[:key=value,...]``), hierarchical with the layout's (`layout_options`)."""
    cases = [parse_methods(m)[0] for m in methods]
    if layout == "flat":
        return cases
    return [(m, {**o, **layout_options(layout, gpus_per_node)}) for m, o in cases if m != "ddp"]


def layout_options(layout: str, gpus_per_node: int) -> dict:
    """The hook's options of `layout`."""
    return {} if layout == "flat" else {"hierarchical": True, "gpus_per_node": gpus_per_node}


def own_options(cases) -> list[tuple[str, dict]]:
    """`layout_cases` without the layout's options (as the hook-path bench takes them)."""
    return [(m, {k: v for k, v in o.items() if k not in ("hierarchical", "gpus_per_node")})
            for m, o in cases]


def train_file(out: Path, rate_bps: float, layout: str) -> Path:
    return out / f"train-{rate_tag(rate_bps)}-{layout}.csv"


def measured_once(out: Path, rate_bps: float, spec: dict, layout: str | None = None) -> Path:
    """The profile (`layout` None) or `layout`'s hook-path table that `rate_bps` uses. Neither
    times any communication, so neither depends on the rate: both are measured once, in the
    testbed of the first rate that needs them, for every rate
    (``profile-<model>-b<batch>.json``, ``hook-<layout>.csv``); a folder measured before they
    were shared holds them per rate (``profile-...-<rate>.json``, ``hook-<rate>-<layout>.csv``),
    used where they exist."""
    if layout is None:
        per_rate, shared = (profile_path(out, r, spec["model"], spec["batch_size"])
                            for r in (rate_bps, None))
    else:
        per_rate = out / f"hook-{rate_tag(rate_bps)}-{layout}.csv"
        shared = out / f"hook-{layout}.csv"
    return per_rate if per_rate.exists() else shared


def alone_path(out: Path, layout: str) -> Path:
    """`layout`'s hook-path table of one rank alone (`slowdown.codec_share`), measured once
    for every rate."""
    return out / f"hook-{layout}-alone.csv"


def planned_keys(methods, spec: dict, nodes: int, g: int, layouts, sizes,
                 train_repeats: int = 1) -> dict:
    """The stored keys each table needs: "tiers" (every tier of `ratecheck.TIERS`), and per
    layout "train-<layout>" (`train_repeats` runs of each method), "hook-<layout>" (flat:
    the bucket sizes over N G payloads; hierarchical: the shards' over N) and
    "hook-<layout>-alone" (the same cases on one rank alone)."""
    tiers = ResultTable("tiers.csv", TIER_KEYS)
    keys = {"tiers": {tiers.key({"tier": t, "groups": "all", "collective": c, "nbytes": n,
                                 "world_size": w})
                      for t, w in (("intra", g), ("inter", nodes), ("ring", nodes * g))
                      for c in ("allreduce", "allgather") for n in sizes}}
    codec = ResultTable("hook.csv", CODEC_KEYS)
    source = gradient_source(spec["model"], spec["batch_size"], spec["bucket_cap_mb"])
    for layout in layouts:
        cases = layout_cases(methods, layout, g)
        keys[f"train-{layout}"] = set(train_keys(cases, spec, nodes * g, train_repeats)
                                      .values())
        world, numel = codec_plan(spec, nodes, g, layout)
        keys[f"hook-{layout}"] = keys[f"hook-{layout}-alone"] = {
            codec.key(k) for m, o in hook_methods(own_options(cases))
            for k in case_keys(m, o, numel, world, "cpu", torch.float32, "cpu", source)}
    return keys


def codec_plan(spec: dict, nodes: int, g: int, layout: str) -> tuple[int, list[int]]:
    """(payloads aggregated, sizes) of `layout`'s hook-path costs."""
    sizes = hook_sizes(spec["model"], spec["batch_size"], spec["bucket_cap_mb"])
    if layout == "flat":
        return nodes * g, sizes
    return nodes, quarter_sizes(max(sizes) // g)


def to_measure(out: Path, rate_bps: float, spec: dict, layouts, planned: dict
               ) -> dict[str, bool]:
    """What `measure_rate` has to measure at `rate_bps`: per table of `planned`
    (`planned_keys`) whether it lacks rows, and "profile" whether the profile is missing (the
    profile and hook tables another rate measured count: `measured_once`)."""
    tables = {}
    for lay in layouts:
        tables[f"train-{lay}"] = train_table(train_file(out, rate_bps, lay))
        tables[f"hook-{lay}"] = ResultTable(measured_once(out, rate_bps, spec, lay), CODEC_KEYS)
        tables[f"hook-{lay}-alone"] = ResultTable(alone_path(out, lay), CODEC_KEYS)
    todo = {"tiers": bool(missing_tiers(out, rate_bps, planned)),
            **{name: not planned[name] <= table.done_keys() for name, table in tables.items()}}
    todo["profile"] = not measured_once(out, rate_bps, spec).exists()
    return todo


def missing_tiers(out: Path, rate_bps: float, planned: dict) -> list[str]:
    """The tiers (`ratecheck.TIERS`) whose rows of `planned` the tier table at `rate_bps`
    lacks; a table measured before the flat ring was timed lacks none of "ring" (its flat
    layout is priced as it was then: `tier_network`)."""
    table = ResultTable(out / f"tiers-{rate_tag(rate_bps)}.csv", TIER_KEYS)
    done = table.done_keys()
    missing = {dict(zip(TIER_KEYS, k))["tier"] for k in planned["tiers"] - done}
    if done and not any(dict(zip(TIER_KEYS, k))["tier"] == "ring" for k in done):
        missing.discard("ring")
    return [t for t in TIERS if t in missing]


def training_jobs(out: Path, rate_bps: float, methods, spec: dict, nodes: int, g: int,
                  layouts, repeats: int) -> list[tuple[int, str, list[str]]]:
    """(repeat, layout, methods) of the training jobs the tables at
    `rate_bps` lack (`pooled.training_passes` per layout), pass by pass, each pass in every
    layout in turn, so that the layouts' runs are measured side by side."""
    jobs = []
    for layout in layouts:
        cases = layout_cases(methods, layout, g)
        done = train_table(train_file(out, rate_bps, layout)).done_keys()
        jobs += [(repeat, layout, names) for repeat, names in training_passes(
            [method_spec(*c) for c in own_options(cases)],
            train_keys(cases, spec, nodes * g, repeats), done)]
    return sorted(jobs, key=lambda job: job[0])
