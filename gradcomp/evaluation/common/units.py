"""Network rates: parse "10gbit", "25G", "1.5Gbps", "25GB" into bits per second, and back.

Rules: a bare number is bits per second; an optional prefix k, M, G, T (any case; decimal) or
Ki, Mi, Gi, Ti (binary); then a unit: none, ``b``, ``bit``, ``bits``, ``bps`` or ``bit/s`` mean
bits, an upper-case ``B``, ``Bps``, ``B/s``, ``byte`` or ``bytes`` mean bytes (times 8).
So "25G" and "25Gb" are 25 Gbit/s, "25GB" is 200 Gbit/s, and "100mbit" is 100 Mbit/s (the
``tc`` spelling: m is mega, never milli).
"""
from __future__ import annotations

import math
import numbers
import re

_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
           "ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30, "ti": 2.0**40}
_BITS = {"", "b", "bit", "bits", "bps", "bit/s", "b/s"}
_BYTES = {"byte", "bytes", "byte/s", "bytes/s"}
_PATTERN = re.compile(
    r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgGtT]i?)?\s*([A-Za-z/]*)\s*$")
FORMS = "a positive number of bit/s, or a number with a unit: 10gbit, 100mbit, 25G (Gbit/s), " \
        "1.5Gbps, 400gbit, 25GB (bytes/s, x8)"


def parse_rate(value, option: str = "bandwidth") -> float:
    """Bits per second from a number (already bit/s) or a string such as "10gbit"."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        rate = float(value)
    elif isinstance(value, str) and (m := _PATTERN.match(value)):
        number, prefix, unit = m.group(1), (m.group(2) or "").lower(), m.group(3)
        if unit in ("B", "Bps", "B/s") or unit.lower() in _BYTES:
            scale = 8.0
        elif unit.lower() in _BITS:
            scale = 1.0
        else:
            raise ValueError(f"{option}={value!r}: unknown unit {unit!r}; use {FORMS}")
        rate = float(number) * _PREFIX[prefix] * scale
    else:
        raise ValueError(f"{option}={value!r} is not a rate; use {FORMS}")
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"{option}={value!r} is not allowed: the rate must be positive and "
                         f"finite; use {FORMS}")
    return rate


def format_rate(bps: float) -> str:
    """A rate in bit/s written with a decimal prefix and 3 significant digits: "12.5 Gbit/s"."""
    if not math.isfinite(bps):
        return f"{bps} bit/s"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(bps) >= scale:
            return f"{bps / scale:.3g} {prefix}bit/s"
    return f"{bps:.3g} bit/s"
