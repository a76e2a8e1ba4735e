"""Units at the edge: strings such as ``400Gbps``, ``50GB/s``, ``10km``, ``2us`` become SI numbers once.

Inside flowmodel everything is bytes, seconds, bytes/s and km. A plain number is taken as already
in those units. An unknown unit is an error that names the field, the value and the units known.
"""

from __future__ import annotations

import math
import re

_DECIMAL = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}

UNITS = {
    "bandwidth": {**{f"{p}bps": f / 8 for p, f in _DECIMAL.items() if p != "k"},
                  **{f"{p}B/s": f for p, f in _DECIMAL.items() if p != "k"},
                  **{f"{p}B/s": f for p, f in _BINARY.items()}},
    "time": {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0},
    "length": {"km": 1.0, "m": 1e-3},
    "size": {**{f"{p}B": f for p, f in _DECIMAL.items() if p != "k"}, **{f"{p}B": f for p, f in _BINARY.items()}},
}
_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S*)\s*$")


def parse(value, kind: str, where: str) -> float:
    """``value`` (a number, or a string with a unit of ``kind``) in SI units."""
    if isinstance(value, bool):
        raise ValueError(f"{where}: expected a {kind}, got {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        m = _NUMBER.match(value)
        if not m:
            raise ValueError(f"{where}: cannot read {value!r} as a {kind} (e.g. {_example(kind)})")
        number, unit = float(m.group(1)), m.group(2)
        if unit:
            table = UNITS[kind]
            if unit not in table:
                raise ValueError(f"{where}: unknown {kind} unit {unit!r} in {value!r}; known: {', '.join(table)}")
            number *= table[unit]
    else:
        raise ValueError(f"{where}: expected a {kind}, got {value!r}")
    if not math.isfinite(number):
        raise ValueError(f"{where}: must be finite, got {value!r}")
    return number


def _example(kind: str) -> str:
    return {"bandwidth": "400Gbps or 50GB/s", "time": "2us", "length": "10km", "size": "256MiB"}[kind]
