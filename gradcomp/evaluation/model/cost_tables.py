"""Codec-cost tables by name: where a method's encode / decode costs come from, measured on
which device, and which of its fits are good enough to price with.

* ``h100`` (built in, `codec_data/`): `gradcomp bench compress` on an NVIDIA H100 of
  2026-11-22, every method with its default options at 2^10-2^26 elements; its provenance
  (file, date, commit, and the methods whose kernels changed since) travels with it;
* ``measured``: the compress bench of a results folder (this machine), given by the caller;
* ``assumed``: the stated memory-bound floors of `methods.assumed_costs` (V100-like, never
  measured: a what-if, never the default);
* a path: any `bench compress` CSV, or a hook-path table (`bench train --hook-out`: what
  the hook computes per bucket, fitted by `fit.fit_hook_path`).

A method whose fit `fit.fit_problem` rejects is `excluded`: it is not priced at all (left
out of rankings and recommendations), never priced with a fit that does not describe it.
A question is priced with the table of its profile's device (`default_costs`); a table of
another device is a mix, which `hardware_note` states.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..common.store import read_table
from .fit import codec_costs, fit_codec, fit_hook_path, poor_fits
from .methods import PerBucket

DATA = Path(__file__).parent / "codec_data"
BUILTIN_TABLES = ("h100",)
MEASURED, ASSUMED = "measured", "assumed"
NAMES = (*BUILTIN_TABLES, MEASURED, ASSUMED)
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

    @property
    def costs(self) -> dict:
        """{method: (encode, decode)} of the usable fits, for `methods.resolve`
        (`PerBucket` for a hook-path table)."""
        costs = codec_costs(self.fits, usable_only=True)
        return {m: PerBucket(c) for m, c in costs.items()} if self.per_bucket else costs

    @property
    def excluded(self) -> dict[str, str]:
        """{method: why} of the methods whose fits are too poor to price with."""
        return poor_fits(self.fits)

    @property
    def label(self) -> str:
        """How a verdict names it: the table and its device."""
        return f"`{self.name}`" + (f" ({self.device})" if self.device else
                                   " (memory-bound floors, not measured)")

    def priced(self, method: str) -> bool:
        """Whether `method` (a base name) is priced from this table: fitted and usable, or
        every method for the assumed floors; `none` always (it costs nothing)."""
        method = method.split("(")[0].split("+")[0]
        return method == "none" or (not self.fits and self.name == ASSUMED) or \
            method in self.costs


def measured_table(frame: pd.DataFrame, name: str = MEASURED,
                   provenance: str = "") -> CostTable:
    """A table fitted from a compress-bench or hook-path DataFrame (the latter told by its
    `communicator` column; its device from `device_name`)."""
    hook_path = "communicator" in frame
    device = str(frame["device_name"].iloc[0]) if "device_name" in frame else ""
    sizes = sorted(int(n) for n in frame["numel"].unique())
    dates = sorted(map(str, frame["date"])) if "date" in frame else []
    return CostTable(name, device, provenance or (
        ("the hook path (`gradcomp bench train --hook-out`)" if hook_path else
         "`gradcomp bench compress`") + f" on {device or 'an unrecorded device'}, "
        f"{len(sizes)} sizes {sizes[0]:,}-{sizes[-1]:,} elements"
        + (f", {dates[0][:10]}" if dates else "")),
        fit_hook_path(frame) if hook_path else fit_codec(frame), per_bucket=hook_path)


def builtin_table(name: str) -> CostTable:
    """A shipped table by name (`BUILTIN_TABLES`) with its provenance."""
    meta = json.loads((DATA / f"{name}.json").read_text())
    frame = pd.read_csv(DATA / f"{name}.csv")
    table = measured_table(frame, name, (
        f"`gradcomp bench compress` on {meta['device']}, {meta['date']} (commit "
        f"{meta['commit']}, `{meta['file']}`): {meta['how']}"))
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
    """The table a question about a profile measured on `device` is priced with: `h100`
    for a GPU (the only GPU table shipped), this machine's `measured` costs for a CPU
    profile when there are some; else a ValueError asking for --costs."""
    if is_gpu(device):
        return "h100"
    if measured and device:
        return MEASURED
    raise ValueError(f"costs: the profile was measured on {device or 'an unrecorded device'} "
                     "and no codec costs of that device are at hand; give --costs (a "
                     f"`{MEASURED}` results folder's table, {CSV}, "
                     f"{', '.join(map(repr, BUILTIN_TABLES))} or 'assumed')")


def hardware_note(profile_device: str, table: CostTable) -> str | None:
    """None when the profile's compute and the codec costs come from the same device; else
    the sentence saying which two devices are mixed."""
    compute = profile_device or "an unrecorded device"
    if table.name == ASSUMED:
        return f"{compute} compute with assumed codec costs (memory-bound floors, not measured)"
    if profile_device and profile_device.lower() == table.device.lower():
        return None
    both_gpu = is_gpu(profile_device) and is_gpu(table.device)
    return (f"mixed hardware: {compute} compute with {table.device} codec costs"
            + (", two different GPUs: the codecs would be slower on the profile's GPU"
               if both_gpu else ""))
