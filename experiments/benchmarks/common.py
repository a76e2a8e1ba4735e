"""Helpers shared by the benchmark scripts: warm median timing and result files."""

from __future__ import annotations

import json
import statistics
import time

import jax


def median_time(fn, repeats: int):
    """(result, median seconds over ``repeats`` warm calls); the first call compiles and is not timed."""
    out = jax.block_until_ready(fn())
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times)


def write_json(path: str | None, results) -> None:
    if path:
        with open(path, "w") as fh:
            json.dump(results, fh, indent=1)


def print_table(rows: list[dict], columns: list[tuple[str, str, str]]) -> None:
    """Print ``rows`` as a table; columns are (header, key, format spec), missing keys show as nan."""
    widths = [max(len(h), 8) for h, _, _ in columns]
    print("\n" + " ".join(f"{h:>{w}}" for (h, _, _), w in zip(columns, widths)))
    for row in rows:
        cells = []
        for (_, key, spec), w in zip(columns, widths):
            value = row.get(key, float("nan"))
            cells.append(f"{value:>{w}{spec}}" if not isinstance(value, str) else f"{value:>{w}}")
        print(" ".join(cells))
