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
