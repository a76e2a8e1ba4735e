"""Units at the edge: strings such as ``400Gbps``, ``50GB/s``, ``10km``, ``2us`` become SI numbers once.

Inside flowmodel everything is bytes, seconds, bytes/s and km. From Python a plain number is taken as
already in those units; a scenario file must write the unit (``parse(..., unit=True)``): a plain
``400`` for a bandwidth is an error that suggests ``400Gbps`` (only 0, the same in every unit, may go
without). An unknown unit is an error that names the field, the value and the units known.

>>> parse("400Gbps", "bandwidth", "nic_bandwidth")
50000000000.0
>>> parse(400, "bandwidth", "nic_bandwidth", unit=True)
Traceback (most recent call last):
...
ValueError: nic_bandwidth: 400: needs a unit, e.g. 400Gbps
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


SUGGESTED = {"bandwidth": "Gbps", "time": "us", "length": "km", "size": "GB"}  # what a unitless value is told


def parse(value, kind: str, where: str, *, unit: bool = False) -> float:
    """``value`` (a number, or a string with a unit of ``kind``) in SI units; with ``unit`` (a scenario
    file) a number other than 0 without a unit is an error naming ``where`` and suggesting one."""
    if isinstance(value, bool):
        raise ValueError(f"{where}: expected a {kind}, got {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
        if unit and number != 0 and math.isfinite(number):
            raise ValueError(f"{where}: {value}: needs a unit, e.g. {value}{SUGGESTED[kind]}")
    elif isinstance(value, str):
        m = NUMBER.match(value)
        if not m:
            raise ValueError(f"{where}: cannot read {value!r} as a {kind} (e.g. {_example(kind)})")
        number, suffix = float(m.group(1)), m.group(2)
        if unit and not suffix and number != 0:
            raise ValueError(f"{where}: {m.group(1)}: needs a unit, e.g. {m.group(1)}{SUGGESTED[kind]}")
        if suffix:
            table = UNITS[kind]
            if suffix not in table:
                raise ValueError(f"{where}: unknown {kind} unit {suffix!r} in {value!r}; known: {', '.join(table)}")
            number *= table[suffix]
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
    """An SI number in the unit a config would write it in (``50e9`` bandwidth -> ``400Gbps``; float
    residue such as ``-0.0`` -> ``0``)."""
    if kind == "bandwidth":
        units = [("Pbps", 1e15 / 8), ("Tbps", 1e12 / 8), ("Gbps", 1e9 / 8), ("Mbps", 1e6 / 8), ("bps", 1 / 8)]
    elif kind == "time":
        units = [("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)]
    elif kind == "size":
        units = [("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3), ("B", 1.0)]
    else:
        units = [("km", 1.0), ("m", 1e-3)]
    if abs(value) < 1e-6 * units[-1][1]:  # residue below a millionth of the smallest unit
        return f"0{units[-1][0]}"
    for unit, factor in units:
        if abs(value) >= factor:
            return f"{value / factor:.6g}{unit}"
    return f"{value / units[-1][1]:.6g}{units[-1][0]}"


def tidy(value: float, scale: float = 1.0) -> float:
    """``value`` with float residue (-0.0, 5.55e-17 left by a sum of parts) as 0: anything within
    1e-12 of ``scale`` (the magnitude it is read against) of zero."""
    return 0.0 if abs(value) <= 1e-12 * abs(scale) else float(value)


def show(value: float, unit: str) -> str:
    """A link group's value as a config writes it (``unit``: the group's ``bytes/s`` or ``ratio``):
    ``50e9`` -> ``400Gbps``, ``4.0`` -> ``4``."""
    if unit == "bytes/s":
        return format_value(value, "bandwidth")
    return f"{value:.6g}"
