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
# Physical ranges, checked where a value enters: (lowest, whether it is allowed, highest, the bound as
# the message writes it, why). No link carries more than 10 Pbit/s; no fibre route is longer than the
# Earth's circumference; sizes (buffers, memory, checkpoints, storage) stay below an exabyte.
RANGES = {
    "bandwidth": (0.0, False, 1.25e15, "10Pbps", "no single link carries more"),
    "time": (0.0, True, None, None, None),
    "length": (0.0, True, 40_075.0, "40075km", "the Earth's circumference"),
    "size": (0.0, False, 1e18, "1EB", "more than any storage system holds"),
}
NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S*)\s*$")


def parse(value, kind: str, where: str) -> float:
    """``value`` (a number, or a string with a unit of ``kind``) in SI units."""
    if isinstance(value, bool):
        raise ValueError(f"{where}: expected a {kind}, got {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        m = NUMBER.match(value)
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
    low, closed, high, bound, why = RANGES[kind]
    if number < low or (number == low and not closed):
        raise ValueError(f"{where}: must be {'>=' if closed else '>'} 0, got {value!r}")
    if high is not None and number > high:
        raise ValueError(f"{where}: must be at most {bound} ({why}), got {value!r}")
    return number


def coerce(value, kind: str, where: str):
    """A Python argument at the API's edge: a string is read as YAML reads it (a ``kind`` with its
    unit, or for ``"ratio"`` a plain number), with the same errors; anything else (SI floats, arrays,
    traced values) is returned unchanged for the caller's own checks."""
    if not isinstance(value, str):
        return value
    if kind != "ratio":
        return parse(value, kind, where)
    m = NUMBER.match(value)
    if not m or m.group(2):
        raise ValueError(f"{where}: expected a number (a ratio), got {value!r}")
    return float(m.group(1))


def _example(kind: str) -> str:
    return {"bandwidth": "400Gbps or 50GB/s", "time": "2us", "length": "10km", "size": "256MiB"}[kind]


def format_value(value: float, kind: str) -> str:
    """An SI number in the unit a config would write it in (``50e9`` bandwidth -> ``400Gbps``)."""
    if kind == "bandwidth":
        units = [("Pbps", 1e15 / 8), ("Tbps", 1e12 / 8), ("Gbps", 1e9 / 8), ("Mbps", 1e6 / 8), ("bps", 1 / 8)]
    elif kind == "time":
        units = [("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)]
    elif kind == "size":
        units = [("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3), ("B", 1.0)]
    else:
        units = [("km", 1.0), ("m", 1e-3)]
    if value == 0:
        return f"0{units[-1][0]}"
    for unit, factor in units:
        if abs(value) >= factor:
            return f"{value / factor:.6g}{unit}"
    return f"{value / units[-1][1]:.6g}{units[-1][0]}"
