"""Input validation shared by the public kernels.

Checks run outside jit on concrete values and raise ``ValueError`` naming the argument and the first
offending index and value. Under a trace (jit/vmap/grad) only shapes can be checked.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from jax.core import Tracer


def is_traced(*xs) -> bool:
    return any(isinstance(x, Tracer) for x in xs)


def first_bad(mask: np.ndarray) -> tuple[int, ...] | None:
    idx = np.argwhere(mask)
    return tuple(int(i) for i in idx[0]) if idx.size else None


def _fmt(index: tuple[int, ...]) -> str:
    return "".join(f"[{i}]" for i in index)


def check_shape(name: str, x, shape: tuple[int, ...]) -> None:
    if tuple(np.shape(x)) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(np.shape(x))}")


def check_values(name: str, x, *, positive: bool = False, nonnegative: bool = False,
                 allow_inf: bool = True) -> None:
    """Reject NaN, and (optionally) non-positive / negative / infinite entries of a concrete array."""
    if is_traced(x):
        return
    a = np.asarray(x, dtype=np.float64)
    for bad_mask, what in (
        (np.isnan(a), "is NaN"),
        ((a <= 0) if positive else np.zeros(a.shape, bool), "must be > 0"),
        ((a < 0) if nonnegative else np.zeros(a.shape, bool), "must be >= 0"),
        (np.isinf(a) if not allow_inf else np.zeros(a.shape, bool), "must be finite"),
    ):
        where = first_bad(bad_mask)
        if where is not None:
            raise ValueError(f"{name}{_fmt(where)} {what}, got {a[where]}")


def check_routes(routes, num_links: int, values: bool = True) -> None:
    """routes: int[F, H], entries in [-1, num_links), no link twice in a route (the entries only when
    ``values`` and the routes are concrete)."""
    if np.ndim(routes) != 2:
        raise ValueError(f"routes must be a 2-D int array [F, H], got shape {tuple(np.shape(routes))}")
    if not np.issubdtype(np.asarray(routes).dtype if not is_traced(routes) else routes.dtype, np.integer):
        raise ValueError(f"routes must have an integer dtype, got {routes.dtype}")
    if np.shape(routes)[0] == 0:
        raise ValueError("routes is empty: at least one flow is needed")
    if is_traced(routes) or not values:
        return
    r = np.asarray(routes)
    where = first_bad((r < -1) | (r >= num_links))
    if where is not None:
        raise ValueError(
            f"routes{_fmt(where)} = {r[where]} names no link: valid link indices are 0..{num_links - 1}"
            " (-1 pads)")
    srt = np.sort(r, axis=1)
    dup = first_bad((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0))
    if dup is not None:
        raise ValueError(f"routes[{dup[0]}] lists link {srt[dup[0], dup[1] + 1]} twice: a route crosses a link once")


def check_endpoints(src, dst, count: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """int64 ``src`` and ``dst`` of equal 1-D shape, each in 0..count-1, never equal."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if src.ndim != 1 or src.shape != dst.shape:
        raise ValueError(f"src and dst must be 1-D of equal length, got shapes {src.shape} and {dst.shape}")
    for name, ends in (("src", src), ("dst", dst)):
        bad = np.flatnonzero((ends < 0) | (ends >= count))
        if bad.size:
            raise ValueError(f"{name}[{bad[0]}] = {ends[bad[0]]} is not a {what} (0..{count - 1})")
    same = np.flatnonzero(src == dst)
    if same.size:
        raise ValueError(f"src[{same[0]}] == dst[{same[0]}] = {src[same[0]]}: a flow needs two {what}s")
    return src, dst


def check_number(where: str, value, *, minimum: float = 0.0, strict: bool = False, integer: bool = False) -> None:
    """The one scalar check of the frozen descriptions: ``value`` is a finite real ``>= minimum``
    (``> minimum`` with ``strict``), or with ``integer`` an integer ``>= minimum``; otherwise a
    ``ValueError`` naming ``where`` and the value. Booleans are neither."""
    if integer:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
            raise ValueError(f"{where}: must be an integer >= {minimum:g}, got {value!r}")
        return
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < minimum or (strict and value == minimum):
        raise ValueError(f"{where}: must be {'>' if strict else '>='} {minimum:g} and finite, got {value!r}")
