"""Sweeps: evaluate a model over many parameter points, batched with ``vmap`` and sharded over every
device, or one point at a time, whichever measures faster.

``sweep(evaluate, points)`` runs ``evaluate`` (a pure JAX function of a dict of scalar parameters,
returning a dict of scalar results) over N points: in chunks of ``chunk`` points (bounding memory),
each chunk ``vmap``-ed and split over a 1-D mesh of all devices with ``NamedSharding``, or (``batching
="loop"``) one jitted point after another. ``batching="auto"`` measures both on the first points (on
one device; with several devices or processes it shards) and keeps the faster: on an accelerator the
batched program usually wins, on a CPU the host engine's callbacks already spread a batch over the
cores and a loop can be as fast. Under
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
import time
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


BATCHING = ("auto", "vmap", "loop")


def sweep(evaluate: Callable[[dict], dict], points: Mapping[str, np.ndarray], *, chunk: int | None = None,
          devices=None, progress: bool = False, batching: str = "auto",
          info: dict | None = None) -> dict[str, np.ndarray]:
    """``evaluate`` at every point; returns the parameters and every output as float64 columns.

    Args:
      evaluate: pure JAX function ``{name: scalar} -> {output: scalar}``.
      points: ``{name: float[N]}`` (``grid`` / ``random_points``).
      chunk: points per vmapped call (default: all at once); rounded up to a multiple of the devices.
      devices: the devices to shard over (default ``jax.devices()``, every process's).
      progress: show a progress bar over chunks.
      batching: ``"vmap"`` (chunks batched and sharded), ``"loop"`` (one jitted point at a time, on the
        first device) or ``"auto"``: with one device, time both on the first ``probe`` points (at most
        8; the probe's results are kept) and run the rest the faster way; with several, vmap.
      info: a dict to fill with what was chosen and measured (``batching``, and with ``auto`` the
        seconds per point of each way, ``vmap_s_per_point`` / ``loop_s_per_point``).
    """
    if batching not in BATCHING:
        raise ValueError(f"batching: must be one of {', '.join(map(repr, BATCHING))}, got {batching!r}")
    names, table = _points(points)
    devices = list(jax.devices() if devices is None else devices)
    N = table.shape[0]
    if chunk is not None and int(chunk) < 1:
        raise ValueError(f"chunk: must be >= 1, got {chunk!r}")
    info = {} if info is None else info

    def one(row):
        return evaluate({n: row[i] for i, n in enumerate(names)})

    loop_fn, vmap_fn = jax.jit(one), jax.jit(jax.vmap(one))
    by_loop = lambda b: _loop(loop_fn, b, devices[0])  # noqa: E731
    by_vmap = lambda b, size=None: _vmap(vmap_fn, b, devices, size)  # noqa: E731
    done = 0
    results: dict[str, list[np.ndarray]] = {}
    if batching == "auto":
        if len(devices) > 1 or jax.process_count() > 1 or N < 4:
            batching = "vmap"
        else:
            probe = min(8, N // 2)
            block = table[:probe]
            loop_s, loop_out = _timed(by_loop, block, block[:1])
            vmap_s, vmap_out = _timed(by_vmap, block, block)
            info.update(loop_s_per_point=loop_s / probe, vmap_s_per_point=vmap_s / probe, probe_points=probe)
            batching = "loop" if loop_s < vmap_s else "vmap"
            _append(results, loop_out if batching == "loop" else vmap_out)
            done = probe
    info["batching"] = batching
    rest = table[done:]
    if rest.shape[0]:
        size = rest.shape[0] if chunk is None else int(chunk)
        run = by_loop if batching == "loop" else lambda b: by_vmap(b, size)  # every chunk one shape
        chunks = range(0, rest.shape[0], size)
        if progress:
            from tqdm import tqdm

            chunks = tqdm(chunks, desc="sweep", total=math.ceil(rest.shape[0] / size),
                          disable=jax.process_index() != 0)
        for start in chunks:
            _append(results, run(rest[start:start + size]))
    columns = {n: table[:, i] for i, n in enumerate(names)}
    for key, parts in results.items():
        if key in columns:
            raise ValueError(f"evaluate: output {key!r} has the name of a parameter")
        columns[key] = np.concatenate(parts)
    return columns


def _timed(run, block, warm):
    """(seconds of a run on ``block``, its outputs), after a first run on ``warm`` that compiles."""
    jax.block_until_ready(run(warm))
    t0 = time.perf_counter()
    out = jax.block_until_ready(run(block))
    return time.perf_counter() - t0, out


def _append(results, out):
    for key, value in out.items():
        results.setdefault(key, []).append(np.asarray(value, np.float64))


def _loop(fn, block, device):
    """Each point of ``block`` through the jitted ``fn``, on ``device``."""
    outs = [fn(jax.device_put(row, device)) for row in block]
    return {key: np.stack([np.asarray(o[key]) for o in outs]) for key in outs[0]}


def _vmap(fn, block, devices, size=None):
    """``block`` vmapped and sharded over a 1-D mesh of ``devices``, padded to ``size`` points rounded up
    to a multiple of the devices by repeating its last point (the padding is dropped). Under
    ``jax.distributed`` each process feeds its own slice and gets the whole block back."""
    n_dev = len(devices)
    mesh = Mesh(np.array(devices), ("points",))
    sharding = NamedSharding(mesh, PartitionSpec("points"))
    size = math.ceil((block.shape[0] if size is None else size) / n_dev) * n_dev
    pad = size - block.shape[0]
    if pad:
        block = np.concatenate([block, np.repeat(block[-1:], pad, axis=0)])
    local = [d for d in devices if d.process_index == jax.process_index()]
    per_process = size // n_dev * len(local)
    first_local = devices.index(local[0]) * (size // n_dev)
    x = jax.make_array_from_process_local_data(sharding, block[first_local:first_local + per_process], block.shape)
    out = fn(x)
    full = {key: np.asarray(multihost_utils.process_allgather(v, tiled=True)) if jax.process_count() > 1
            else np.asarray(v) for key, v in out.items()}
    return {key: v[:size - pad] for key, v in full.items()}


def _cell(value):
    """A table cell: a number as a float (a setting's integer as an integer), a setting's text (a
    policy name) as it is."""
    return value if isinstance(value, (str, int)) else float(value)


def write_table(columns: Mapping[str, np.ndarray], folder: str, name: str = "sweep", *,
                meta: Mapping | None = None) -> tuple[str, str]:
    """Write ``folder/name.csv`` and ``folder/name.json`` (``{**meta, "rows": [row, ...]}``), each atomically."""
    keys = list(columns)
    rows = [{k: _cell(columns[k][i]) for k in keys} for i in range(len(columns[keys[0]]))]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=keys)
    writer.writeheader()
    writer.writerows(rows)
    csv_path = os.path.join(folder, f"{name}.csv")
    write_text(csv_path, buffer.getvalue())
    json_path = os.path.join(folder, f"{name}.json")
    write_json(json_path, {**(meta or {}), "rows": rows})
    return csv_path, json_path
