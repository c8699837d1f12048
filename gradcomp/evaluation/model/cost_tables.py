"""Codec-cost tables by name: where a method's encode / decode costs come from, measured on
which device, and which of its fits are good enough to price with.

* ``h200`` (built in, `codec_data/`): `gradcomp bench compress` on an NVIDIA H200 of
  2026-11-27 (the current kernels), every method with its default options at 2^10-2^26
  elements; its provenance (file, date, commit, and the methods whose kernels changed since,
  if any) travels with it;
* ``h100``, ``v100``, ``a100-40gb``, ``a100-80gb`` (`GPUS`, not measured at the current
  kernels): the measured table of the nearest memory bandwidth scaled to the GPU's published
  bandwidth: each per-element cost b times (measured GPU's bandwidth / this GPU's), the
  launch-bound constants a as measured. Every verdict names them "scaled from <GPU>"
  (`CostTable.label`, `hardware_note`). (An H100 table of 2026-11-22 measured the kernels
  before 2026-11-23's; it stays in benchmarks/results/h100-2026-11-22.);
* ``measured``: the compress bench of a results folder (this machine), given by the caller;
* ``assumed``: the stated memory-bound floors of `methods.assumed_costs` (V100-like, never
  measured: a what-if, never the default);
* a path: any `bench compress` CSV, or a hook-path table (`bench train --hook-out`: what
  the hook computes per bucket, fitted by `fit.fit_hook_path`).

A method whose fit `fit.fit_problem` rejects is `excluded`: it is not priced at all (left
out of rankings and recommendations), never priced with a fit that does not describe it.
A question is priced with the table of its profile's GPU kind (`default_costs`); a table of
another device is a mix, which `hardware_note` states.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import pandas as pd

from ..common.store import read_table
from .fit import codec_costs, fit_codec, fit_hook_path, per_bucket_costs, poor_fits
from ...compressors import compressor
from ...diloco import outer_method
from .methods import variant_label

DATA = Path(__file__).parent / "codec_data"
BUILTIN_TABLES = ("h200",)  # measured: `codec_data/<name>.csv`


@dataclass(frozen=True)
class GPU:
    """A GPU kind: the table name, how its torch device name reads (all of `includes`, none
    of `excludes`), its peak memory bandwidth (bytes/s) and where that figure comes from."""

    name: str
    includes: tuple
    excludes: tuple
    memory_bps: float
    source: str

    def matches(self, device: str) -> bool:
        name = (device or "").upper()
        return all(t in name for t in self.includes) and not any(t in name for t in
                                                                 self.excludes)


GPUS = (  # peak memory bandwidths from NVIDIA's datasheets
    GPU("v100", ("V100",), ("V100S",), 900e9,
        "NVIDIA Tesla V100 datasheet (2020): 900 GB/s, V100 SXM2 and PCIe"),
    GPU("a100-80gb", ("A100", "80GB"), ("PCIE",), 2039e9,
        "NVIDIA A100 Tensor Core GPU datasheet (2021): 2,039 GB/s, A100 80GB SXM"),
    GPU("a100-40gb", ("A100",), ("80GB",), 1555e9,
        "NVIDIA A100 Tensor Core GPU datasheet (2021): 1,555 GB/s, A100 40GB"),
    GPU("h100", ("H100",), ("PCIE", "NVL"), 3.35e12,
        "NVIDIA H100 Tensor Core GPU datasheet (2023): 3.35 TB/s, H100 SXM"),
    GPU("h200", ("H200",), (), 4.8e12,
        "NVIDIA H200 Tensor Core GPU datasheet (2024): 4.8 TB/s"),
)
SCALED_TABLES = tuple(g.name for g in GPUS if g.name not in BUILTIN_TABLES)
MEASURED, ASSUMED = "measured", "assumed"
NAMES = (*BUILTIN_TABLES, *SCALED_TABLES, MEASURED, ASSUMED)
CSV = "a `gradcomp bench compress` or `bench train --hook-out` CSV"


@dataclass(frozen=True)
class CostTable:
    """Encode / decode costs of one source: `name`, the `device` measured on ("" for the
    assumed floors), a one-line `provenance`, the fits (`fit.fit_codec`; empty for the
    assumed floors), the methods whose kernels `changed` since it was measured, and `notes`
    (markdown lines) on how far that moved them."""

    name: str
    device: str
    provenance: str
    fits: dict = field(default_factory=dict)
    changed: tuple = ()
    notes: tuple = ()
    per_bucket: bool = False  # a hook-path table: its costs are a whole bucket's
    scaled_from: str = ""  # the measured device this table was scaled from (never measured)

    @property
    def costs(self) -> dict:
        """{method: (encode, decode)} of the usable fits, for `methods.resolve`
        (`fit.per_bucket_costs` for a hook-path table)."""
        if self.per_bucket:
            return per_bucket_costs(self.fits, usable_only=True)
        return codec_costs(self.fits, usable_only=True)

    @property
    def excluded(self) -> dict[str, str]:
        """{method: why} of the methods whose fits are too poor to price with."""
        return poor_fits(self.fits)

    @property
    def label(self) -> str:
        """How a verdict names it: the table and its device."""
        if self.scaled_from:
            return f"`{self.name}` ({self.device}, scaled from {self.scaled_from}, not measured)"
        return f"`{self.name}`" + (f" ({self.device})" if self.device else
                                   " (memory-bound floors, not measured)")

    def priced(self, method: str) -> bool:
        """Whether `method` (a base name, a variant ``name(...)`` or ``name:key=value``) is
        priced from this table: fitted and usable (a variant by its own row or its
        method's), or every method for the assumed floors; `none` always (it costs
        nothing); a DiLoCo variant by its outer method."""
        method = outer_method(method) or method
        method = method.split(":")[0].split("(")[0].split("+")[0]
        return method == "none" or (not self.fits and self.name == ASSUMED) or \
            method in self.costs


def measured_table(frame: pd.DataFrame, name: str = MEASURED,
                   provenance: str = "") -> CostTable:
    """A table fitted from a compress-bench or hook-path DataFrame (the latter told by its
    `communicator` column; its device from `device_name`); rows measured with options other
    than the method's defaults (`options` column) are the variant ``name(key=value, ...)``."""
    hook_path = "communicator" in frame
    if "options" in frame:
        frame = frame.assign(method=[variant_name(m, o) for m, o in zip(frame["method"],
                                                                     frame["options"])])
    device = str(frame["device_name"].iloc[0]) if "device_name" in frame else ""
    sizes = sorted(int(n) for n in frame["numel"].unique())
    dates = sorted(map(str, frame["date"])) if "date" in frame else []
    return CostTable(name, device, provenance or (
        ("the hook path (`gradcomp bench train --hook-out`)" if hook_path else
         "`gradcomp bench compress`") + f" on {device or 'an unrecorded device'}, "
        f"{len(sizes)} sizes {sizes[0]:,}-{sizes[-1]:,} elements"
        + (f", {dates[0][:10]}" if dates else "")),
        fit_hook_path(frame) if hook_path else fit_codec(frame), per_bucket=hook_path)


def variant_name(method: str, options) -> str:
    """A measured row's method, or its variant's label ``name(key=value, ...)`` where its
    options (`options`: the row's JSON) are not the method's defaults."""
    return variant_label(method, changed_options(method, options))


def changed_options(method: str, options) -> dict:
    """The options of a measured row (`options`: its JSON) that differ from `method`'s
    defaults; none for a method that is not registered (ddp, auto) or no JSON. Options a
    compressor does not have (the hook's, e.g. ``hierarchical``) are no change, but error
    feedback: a method without it by default lists no ``error_feedback``."""
    return dict(_changed(method, options))


@lru_cache(maxsize=256)
def _changed(method: str, options) -> tuple:
    try:
        defaults = compressor(method).options()
        given = json.loads(options) if isinstance(options, str) and options else {}
    except (ValueError, TypeError):  # not a registered method, or no JSON: as it is
        return ()
    defaults.setdefault("error_feedback", False)
    return tuple((k, v) for k, v in given.items() if defaults.get(k, v) != v)


def builtin_table(name: str) -> CostTable:
    """A shipped table by name (`BUILTIN_TABLES`) with its provenance."""
    meta = json.loads((DATA / f"{name}.json").read_text())
    frame = pd.read_csv(DATA / f"{name}.csv")
    table = measured_table(frame, name, (
        f"`gradcomp bench compress` on {meta['device']}, {meta['date']} (commit "
        f"{meta['commit']}, `{meta['file']}`): {meta['how']}"))
    if not meta["changed_since"]:
        return table
    notes = [f"Kernels changed since this table was measured: "
             f"{', '.join(meta['changed_since'])}. {meta['changes']}"]
    n = meta["final_call_numel"]
    for method, ms in meta["final_call_ms"].items():
        if method in table.costs:
            (ae, be), (ad, bd) = table.costs[method]
            notes.append(f"{method}: encode+decode of {n:,} elements {ms:.3f} ms at the "
                         f"current kernels, {(ae + ad + (be + bd) * n) * 1e3:.3f} ms in this "
                         "table")
    return CostTable(table.name, table.device, table.provenance, table.fits,
                     tuple(meta["changed_since"]), tuple(notes))


def gpu_kind(device: str) -> GPU | None:
    """The `GPUS` entry a torch device name is (None: a CPU or a GPU of no known kind)."""
    return next((g for g in GPUS if g.matches(device)), None)


def scaled_table(name: str) -> CostTable:
    """The table of GPU kind `name` (`SCALED_TABLES`): the measured table of the nearest
    memory bandwidth, its per-element costs b scaled by the bandwidth ratio, its launch
    constants a kept (module docstring)."""
    gpu = next(g for g in GPUS if g.name == name)
    source = min((g for g in GPUS if g.name in BUILTIN_TABLES),
                 key=lambda g: abs(g.memory_bps / gpu.memory_bps - 1))
    measured = builtin_table(source.name)
    factor = source.memory_bps / gpu.memory_bps
    fits = {key: replace(fit, params={**fit.params, "b": fit.params["b"] * factor}, points=())
            for key, fit in measured.fits.items()}  # the measured points are not this GPU's
    device = f"NVIDIA {name.upper().replace('-', ' ')}"
    return CostTable(name, device, (
        f"table `{source.name}` ({measured.device}) scaled to {device}: per-element costs b x "
        f"{factor:.2f} (memory bandwidth {source.memory_bps / 1e9:,.0f} GB/s over "
        f"{gpu.memory_bps / 1e9:,.0f} GB/s; {source.source}; {gpu.source}), launch constants "
        f"a as measured; scaled from {measured.device}, not measured. Measured table: "
        f"{measured.provenance}"), fits, measured.changed,
        tuple(f"Of the measured table `{source.name}` this one is scaled from: {note}"
              for note in measured.notes), scaled_from=measured.device)


def assumed_table() -> CostTable:
    return CostTable(ASSUMED, "", "memory-bound floors of `methods.assumed_costs`: 20 us "
                     "per application plus the bytes moved at 800 GB/s (V100-like), stated, "
                     "not measured")


def cost_table(choice, measured: pd.DataFrame | None = None) -> CostTable:
    """The table named `choice` (`NAMES`) or read from a `bench compress` CSV path;
    "measured" is `measured` (a compress-bench DataFrame of this machine). Anything else is
    a ValueError naming the option and the choices."""
    if isinstance(choice, CostTable):
        return choice
    key = str(choice)
    if key in BUILTIN_TABLES:
        return builtin_table(key)
    if key in SCALED_TABLES:
        return scaled_table(key)
    if key == ASSUMED:
        return assumed_table()
    if key == MEASURED:
        if measured is None or measured.empty:
            raise ValueError("costs='measured' is not allowed here: nothing was measured "
                             "(it means a results folder's compress.csv); give "
                             f"{', '.join(map(repr, BUILTIN_TABLES))}, 'assumed' or {CSV}")
        return measured_table(measured)
    if key.endswith(".csv") or "/" in key or Path(key).is_file():
        return measured_table(read_table(key, "costs", CSV), Path(key).name)
    raise ValueError(f"costs={key!r} is not allowed: choose one of "
                     f"{', '.join(map(repr, NAMES))} or give {CSV}")


def is_gpu(device: str) -> bool:
    """Whether a device name names a GPU (not "cpu", not unrecorded)."""
    return bool(device) and not device.lower().startswith("cpu")


def default_costs(device: str, measured: bool) -> str:
    """The table a question about a profile measured on `device` is priced with: its GPU
    kind's (`GPUS`: measured, or scaled from the nearest measured one), the measured table
    (`h200`) for a GPU of no known kind, this machine's `measured` costs for a CPU profile when there are some;
    else a ValueError asking for --costs."""
    if is_gpu(device):
        kind = gpu_kind(device)
        return kind.name if kind else BUILTIN_TABLES[0]
    if measured and device:
        return MEASURED
    raise ValueError(f"costs: the profile was measured on {device or 'an unrecorded device'} "
                     "and no codec costs of that device are at hand; give --costs (a "
                     f"`{MEASURED}` results folder's table, {CSV}, "
                     f"{', '.join(map(repr, BUILTIN_TABLES))} or 'assumed')")


def same_gpu(a: str, b: str) -> bool:
    """Whether two device names name one device: the same name, or the same `GPUS` kind
    ("NVIDIA H100" and "NVIDIA H100 80GB HBM3")."""
    kind = gpu_kind(a or "")
    return (a or "").lower() == (b or "").lower() or (kind is not None and kind == gpu_kind(b))


def hardware_note(profile_device: str, table: CostTable, gpu: str = "") -> str | None:
    """None when the profile's compute and the codec costs come from the same device; else
    the sentence saying which two devices are mixed, or that the costs were scaled from
    another GPU. `gpu`: the cluster's GPU when it names another than the profile's device (its
    codecs and 16-bit all-reduce run there, the compute is the profile's as measured)."""
    compute = profile_device or "an unrecorded device"
    other = bool(gpu) and not same_gpu(gpu, profile_device)
    device = gpu if other else profile_device
    if other:
        compute = (f"{compute} compute as measured (the profile's), codecs and the 16-bit "
                   f"baseline on the cluster's {gpu},")
    else:
        compute += " compute"
    if table.name == ASSUMED:
        return f"{compute} with assumed codec costs (memory-bound floors, not measured)"
    kind = gpu_kind(device)
    if table.scaled_from and kind is not None and kind.name == table.name:
        return (f"{compute} with {table.device} codec costs scaled from "
                f"{table.scaled_from} by memory bandwidth, not measured")
    if device and same_gpu(device, table.device):
        return f"{compute} with {table.device} codec costs as measured" if other else None
    both_gpu = is_gpu(device) and is_gpu(table.device)
    ours, theirs = kind, gpu_kind(table.device)
    speed = ("at another speed" if ours is None or theirs is None else
             "slower" if ours.memory_bps < theirs.memory_bps else "faster")
    return (f"mixed hardware: {compute} with {table.device} codec costs"
            + (f" (scaled from {table.scaled_from}, not measured)" if table.scaled_from else "")
            + (f", two different GPUs: the codecs would run {speed} on the "
               f"{'cluster' if other else 'profile'}'s GPU" if both_gpu else ""))
