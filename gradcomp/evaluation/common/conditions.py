"""The conditions of a validation's measurements: other work on the machine disturbs the
timings, so each rate's testbed appends the load seen while it measured (``conditions.csv``)
and the validation table carries it beside the rate's rows."""
from __future__ import annotations

import math
import os
import time
from pathlib import Path

from .env import environment
from .store import ResultTable


def record_conditions(path: Path, rate_bps: float, load: float, start: float) -> None:
    """Append the load seen while measuring at `rate_bps` (`load`: the 1-minute load average
    before, `start`: `time.monotonic()` then)."""
    ResultTable(path, ("rate_bps",)).append(
        {"rate_bps": rate_bps, "load_1min_before": load, "load_1min_after": os.getloadavg()[0],
         "seconds": time.monotonic() - start, "cpus": os.cpu_count(), **environment()})


def conditions_at(path: Path, rate_bps: float,
                  columns=("load_1min_before", "load_1min_after")) -> dict:
    """The `columns` (default: the load averages) `record_conditions` kept last for
    `rate_bps` (NaN when none)."""
    seen = ResultTable(path, ("rate_bps",)).frame()
    seen = seen[seen["rate_bps"] == rate_bps].tail(1) if len(seen) else seen
    return {c: float(seen[c].iloc[0]) if len(seen) and c in seen else math.nan
            for c in columns}
