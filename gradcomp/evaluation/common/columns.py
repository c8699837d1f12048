"""Checks of the values a measurement table holds, as read from a user's file: times finite,
positive and under a day, counts whole numbers, workers between 1 and `MAX_WORKERS`, and no
measurement stored twice. Each error names the file (the table's ``attrs["source"]``, set by
`store.read_table`), the column and the row (1: the first row under the header)."""
from __future__ import annotations

import math

import pandas as pd

#: The most seconds a measured time (an iteration's phase, an encode, a collective) may take.
MAX_SECONDS = 86_400.0
#: The most data-parallel workers a table or question may name.
MAX_WORKERS = 100_000


def source_of(frame: pd.DataFrame, what: str) -> str:
    return frame.attrs.get("source") or f"the {what} table"


def check_values(frame: pd.DataFrame, what: str, *, times=(), optional_times=(), counts=(),
                 workers=(), positive=()) -> None:
    """Raise a ValueError naming the file, column and row of the first value that breaks its
    column's rule: `times` (finite, > 0, <= MAX_SECONDS; `optional_times` may be empty, i.e.
    NaN), `counts` (whole numbers >= 1), `workers` (whole numbers in 1..MAX_WORKERS),
    `positive` (finite and > 0). Columns the table lacks are skipped (their readers name them)."""
    rules = [(c, "time", True) for c in optional_times] + [(c, "time", False) for c in times]
    rules += [(c, "count", False) for c in counts] + [(c, "workers", False) for c in workers]
    rules += [(c, "positive", False) for c in positive]
    for column, rule, may_be_empty in rules:
        if column not in frame.columns:
            continue
        for row, value in enumerate(frame[column], start=1):
            why = _broken(value, rule, may_be_empty)
            if why:
                raise ValueError(f"{source_of(frame, what)}: column {column!r}, row {row}: "
                                 f"{value!r} is not allowed: {why}")


def _broken(value, rule: str, may_be_empty: bool) -> str | None:
    """Why `value` breaks `rule` (None: it does not)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "give a number"
    if math.isnan(number):
        return None if may_be_empty else "the cell is empty or NaN; give a number"
    if not math.isfinite(number):
        return "give a finite number"
    if rule == "time":
        return None if 0 < number <= MAX_SECONDS else \
            f"a time must be > 0 and <= {MAX_SECONDS:g} seconds"
    if rule == "positive":
        return None if number > 0 else "give a number > 0"
    if number != int(number) or number < 1:
        return "give a whole number >= 1"
    if rule == "workers" and number > MAX_WORKERS:
        return f"workers must be at most {MAX_WORKERS:,}"
    return None


def check_unique(frame: pd.DataFrame, what: str, key_columns) -> None:
    """Raise a ValueError naming the rows that repeat a key: two runs that wrote one table
    measured the same thing, and pooling them silently would weigh it twice. Only a table with
    every one of `key_columns` is checked (one a bench wrote; repeated sizes in a table of
    fewer columns are the user's own design)."""
    key = list(key_columns)
    if not key or frame.empty or any(c not in frame.columns for c in key):
        return
    groups = frame.reset_index(drop=True).groupby(key, dropna=False, sort=False).indices
    rows = next((list(i) for i in groups.values() if len(i) > 1), None)
    if rows is None:
        return
    first = frame.iloc[rows[0]]
    raise ValueError(f"{source_of(frame, what)}: rows {', '.join(str(i + 1) for i in rows)} "
                     "hold the same measurement (" + ", ".join(f"{c}={first[c]!r}" for c in key)
                     + "): two runs wrote it to one table; delete all but one of those rows")
