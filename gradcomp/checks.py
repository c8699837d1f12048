"""Option checks shared by every layer: each returns the value or raises a `ValueError` that
names the option and what is allowed."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch


def check_int(value, option: str, minimum: int, maximum: int | None = None) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
    if ok and maximum is not None:
        ok = value <= maximum
    if not ok:
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{option}={value!r} is not allowed: {option} must be an integer {bound}")
    return value


def check_ratio(value, option: str = "ratio") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{option}={value!r} is not allowed: {option} must be a number in (0, 1]")
    return float(value)


def check_bool(value, option: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{option}={value!r} is not allowed: choose one of True, False")
    return value


def check_choice(value, option: str, allowed) -> Any:
    if value not in allowed:
        raise ValueError(
            f"{option}={value!r} is not allowed: choose one of {', '.join(map(repr, allowed))}"
        )
    return value


def check_number(value, option: str, minimum: float | None = None,
                 maximum: float | None = None, above: bool = False) -> float:
    """A finite number >= `minimum` (> `minimum` with `above`) and <= `maximum`."""
    ok = (not isinstance(value, bool) and isinstance(value, (int, float))
          and math.isfinite(value))
    if ok and minimum is not None:
        ok = value > minimum if above else value >= minimum
    if ok and maximum is not None:
        ok = value <= maximum
    if not ok:
        low = "" if minimum is None else f"{'>' if above else '>='} {minimum:g}"
        high = "" if maximum is None else f"<= {maximum:g}"
        bound = " and ".join(filter(None, [low, high]))
        raise ValueError(f"{option}={value!r} is not allowed: {option} must be a finite number"
                         + (f" {bound}" if bound else ""))
    return float(value)


def check_device(value, option: str = "device"):
    """A torch.device; cuda[:N] only where that device is present."""
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{option}={value!r} is not allowed: give a torch device such as "
                         "cpu, cuda or cuda:1") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{option}={value!r} is not allowed: no cuda device here; use cpu")
    if device.type == "cuda" and device.index is not None \
            and device.index >= torch.cuda.device_count():
        raise ValueError(f"{option}={value!r} is not allowed: this machine has "
                         f"{torch.cuda.device_count()} cuda device(s)")
    return device


def check_file(path, option: str, what: str = "file"):
    """`path` as a Path to an existing, non-empty, readable file."""
    path = Path(path)
    problem = ("no such file" if not path.exists() else
               "it is a folder, not a file" if path.is_dir() else
               "it is not a regular file" if not path.is_file() else
               "the file is empty" if path.stat().st_size == 0 else
               "the file is not readable" if not os.access(path, os.R_OK) else None)
    if problem:
        raise ValueError(f"{option}={str(path)!r} is not allowed: {problem}; give {what}")
    return path


def check_saved_method(state: dict, compressor, runs: str, fix: str) -> None:
    """That the checkpoint `state` was saved by `compressor`'s method with its options, else
    a ValueError naming both, what this one `runs` and what to `fix` ("register")."""
    saved = (state["method"], state["options"])
    mine = (compressor.name, compressor.options())
    if saved != mine:
        raise ValueError(f"this checkpoint was saved by method {saved[0]!r} with options "
                         f"{saved[1]}; this {runs} {mine[0]!r} with {mine[1]}: {fix} the same "
                         "method and options before loading")
