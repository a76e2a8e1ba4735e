"""Sweeps: evaluate a model over many parameter points with ``vmap``, sharded over every device.

``sweep(evaluate, points)`` runs ``evaluate`` (a pure JAX function of a dict of scalar parameters,
returning a dict of scalar results) over N points: in chunks of ``chunk`` points (bounding memory),
each chunk ``vmap``-ed and split over a 1-D mesh of all devices with ``NamedSharding``. Under
``jax.distributed`` (several processes), the mesh spans every process's devices: each process feeds
its own slice of every chunk (``make_array_from_process_local_data``) and every process gets the
whole table back (``process_allgather``). Points are padded to a multiple of the device count by
repeating the last point; the padding is dropped from the results.

``grid(**axes)`` and ``random_points(n, seed, **boxes)`` make point sets; ``write_table`` writes
CSV and JSON atomically.

>>> import jax.numpy as jnp
>>> from flowmodel import sweep
>>> points = sweep.grid(capacity=[1.0, 2.0], size=[10.0, 20.0, 30.0])
>>> table = sweep.sweep(lambda p: {"time": p["size"] / p["capacity"]}, points, progress=False)
>>> table["time"].tolist()
[10.0, 20.0, 30.0, 5.0, 10.0, 15.0]
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import os
from collections.abc import Callable, Mapping

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .results import write_json, write_text


def grid(**axes) -> dict[str, np.ndarray]:
    """Every combination of the given 1-D value lists (the first axis varies slowest)."""
    if not axes:
        raise ValueError("grid: needs at least one axis")
    for name, values in axes.items():
        if np.ndim(values) != 1 or len(values) == 0:
            raise ValueError(f"grid.{name}: must be a non-empty 1-D list of values, got {values!r}")
    combos = list(itertools.product(*axes.values()))
    return {name: np.array([c[i] for c in combos], np.float64) for i, name in enumerate(axes)}


def random_points(n: int, *, seed: int = 0, log: tuple[str, ...] = (), **boxes) -> dict[str, np.ndarray]:
    """``n`` points uniform in each (low, high) box (log-uniform for names in ``log``), seeded."""
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n: must be an integer >= 1, got {n!r}")
    rng = np.random.default_rng(seed)
    out = {}
    for name, (low, high) in boxes.items():
        if not (low <= high) or (name in log and low <= 0):
            raise ValueError(f"random_points.{name}: bad box ({low}, {high})")
        u = rng.uniform(0, 1, n)
        out[name] = np.exp(np.log(low) + u * (np.log(high) - np.log(low))) if name in log else low + u * (high - low)
    return out


def _points(points: Mapping[str, np.ndarray]) -> tuple[list[str], np.ndarray]:
    names = list(points)
    if not names:
        raise ValueError("points: no parameters to sweep")
    columns = [np.asarray(points[n], np.float64) for n in names]
    sizes = {c.shape for c in columns}
    if len(sizes) != 1 or columns[0].ndim != 1 or columns[0].size == 0:
        raise ValueError(f"points: every parameter needs the same non-empty 1-D list, got shapes "
                         f"{ {n: c.shape for n, c in zip(names, columns)} }")
    return names, np.stack(columns, axis=1)


def sweep(evaluate: Callable[[dict], dict], points: Mapping[str, np.ndarray], *, chunk: int | None = None,
          devices=None, progress: bool = False) -> dict[str, np.ndarray]:
    """``evaluate`` at every point; returns the parameters and every output as float64 columns.

    Args:
      evaluate: pure JAX function ``{name: scalar} -> {output: scalar}``.
      points: ``{name: float[N]}`` (``grid`` / ``random_points``).
      chunk: points per vmapped call (default: all at once); rounded up to a multiple of the devices.
      devices: the devices to shard over (default ``jax.devices()``, every process's).
      progress: show a progress bar over chunks.
    """
    names, table = _points(points)
    devices = list(jax.devices() if devices is None else devices)
    mesh = Mesh(np.array(devices), ("points",))
    n_dev = len(devices)
    N = table.shape[0]
    size = N if chunk is None else int(chunk)
    if size < 1:
        raise ValueError(f"chunk: must be >= 1, got {chunk!r}")
    size = math.ceil(size / n_dev) * n_dev
    sharding = NamedSharding(mesh, PartitionSpec("points"))
    local = [d for d in devices if d.process_index == jax.process_index()]
    per_process = size // n_dev * len(local)
    first_local = devices.index(local[0]) * (size // n_dev)

    @jax.jit
    def run(x):
        return jax.vmap(lambda row: evaluate({n: row[i] for i, n in enumerate(names)}))(x)

    chunks = range(0, N, size)
    if progress:
        from tqdm import tqdm

        chunks = tqdm(chunks, desc="sweep", total=math.ceil(N / size), disable=jax.process_index() != 0)
    results: dict[str, list[np.ndarray]] = {}
    for start in chunks:
        block = table[start:start + size]
        pad = size - block.shape[0]
        if pad:
            block = np.concatenate([block, np.repeat(block[-1:], pad, axis=0)])
        mine = block[first_local:first_local + per_process]
        x = jax.make_array_from_process_local_data(sharding, mine, block.shape)
        out = run(x)
        for key, value in out.items():
            full = np.asarray(multihost_utils.process_allgather(value, tiled=True)) if jax.process_count() > 1 \
                else np.asarray(value)
            results.setdefault(key, []).append(full[:size - pad].astype(np.float64))
    columns = {n: table[:, i] for i, n in enumerate(names)}
    for key, parts in results.items():
        if key in columns:
            raise ValueError(f"evaluate: output {key!r} has the name of a parameter")
        columns[key] = np.concatenate(parts)
    return columns


def write_table(columns: Mapping[str, np.ndarray], folder: str, name: str = "sweep", *,
                meta: Mapping | None = None) -> tuple[str, str]:
    """Write ``folder/name.csv`` and ``folder/name.json`` (``{**meta, "rows": [row, ...]}``), each atomically."""
    keys = list(columns)
    rows = [{k: float(columns[k][i]) for k in keys} for i in range(len(columns[keys[0]]))]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=keys)
    writer.writeheader()
    writer.writerows(rows)
    csv_path = os.path.join(folder, f"{name}.csv")
    write_text(csv_path, buffer.getvalue())
    json_path = os.path.join(folder, f"{name}.json")
    write_json(json_path, {**(meta or {}), "rows": rows})
    return csv_path, json_path
