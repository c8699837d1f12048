"""Option checks shared by every layer: each returns the value or raises a `ValueError` that
names the option and what is allowed."""
from __future__ import annotations

from typing import Any


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
