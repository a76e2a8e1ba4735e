"""Latency, window, queueing and bound models that the step-time layer can switch on.

Each function is small, pure and differentiable; units are SI (bytes, seconds, bytes/s).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._types import Array, Float, Int
from ._incidence import link_sums, pad_routes


def route_latency(routes: Int[Array, "F H"], latency: Float[Array, "L"]) -> Float[Array, "F"]:
    """One-way propagation latency of each route: the sum of its links' latencies (s)."""
    routes, latency = jnp.asarray(routes), jnp.asarray(latency)
    L = latency.shape[0]
    lat = jnp.concatenate([latency, jnp.zeros((1,), latency.dtype)])
    return jnp.sum(lat[pad_routes(routes, L)], axis=1)


def window_limited_rate(routes, latency, window, *, rtt_factor: float = 2.0) -> Float[Array, "F"]:
    """Rate cap of a window-based transport: ``window / RTT`` bytes/s (inf where RTT is 0).

    ``window`` is the bytes in flight per flow (scalar or float[F]: the congestion window, or the
    receive buffer, times the number of connections); RTT = ``rtt_factor`` x the one-way route latency
    (2 for a symmetric reverse path). Pass the result as ``rate_limit``: a 1,000 km scale-across link
    (RTT ~ 10 ms) needs ~500 MB in flight to fill 50 GB/s (62.5 MB gives 6.25 GB/s), which is why
    long-haul links need deep buffers or many connections.

    >>> import flowmodel as fm
    >>> rate = fm.window_limited_rate([[0]], [5e-3], 62.5e6)   # 1,000 km: 5 ms one way
    >>> round(float(rate[0]) / 1e9, 3)                         # GB/s
    6.25
    """
    rtt = rtt_factor * route_latency(routes, latency)
    ok = rtt > 0
    return jnp.where(ok, window / jnp.where(ok, rtt, 1.0), jnp.inf)


def rtt_weights(routes, latency) -> Float[Array, "F"]:
    """Weights 1 / route latency: the RTT-unfair sharing of SimGrid's CM02 model.

    CM02 gives each flow a share inversely proportional to its route latency; passing these as
    ``weights`` reproduces it (flowmodel's default, ``weights=1``, is plain max-min).
    """
    return 1.0 / route_latency(routes, latency)


def queueing_delay(load, capacity, *, packet_bytes: float = 4096.0, buffer_bytes=None) -> Float[Array, "L"]:
    """Mean queueing delay per link (s): M/M/1 at low load, bounded by the buffer drain time.

    ``d = D_max * (1 - exp(-d_mm1 / D_max))`` with ``d_mm1 = (packet / c) * rho / (1 - rho)`` and
    ``D_max = buffer / c`` (default buffer: 1,000 packets). It follows M/M/1 while the queue is short,
    tends to the full-buffer delay as ``rho -> 1``, and is finite with a finite gradient at and beyond
    saturation (``rho >= 1`` gives ``D_max``): a fluid model cannot say more once a link is full.

    >>> import numpy as np, flowmodel as fm
    >>> delay = fm.queueing_delay(np.array([0.0, 25e9, 50e9, 60e9]), 50e9)   # idle, half, full, over
    >>> np.round(np.asarray(delay) * 1e6, 3).tolist()                        # microseconds
    [0.0, 0.082, 81.92, 81.92]
    """
    load, capacity = jnp.asarray(load), jnp.asarray(capacity)
    buffer_bytes = 1000.0 * packet_bytes if buffer_bytes is None else buffer_bytes
    d_max = buffer_bytes / capacity
    rho = load / capacity
    below = rho < 1
    rho_safe = jnp.where(below, rho, 0.0)
    d_mm1 = (packet_bytes / capacity) * rho_safe / (1 - rho_safe)
    return jnp.where(below, d_max * -jnp.expm1(-d_mm1 / d_max), d_max)


def link_bytes(routes, sizes, num_links: int) -> Float[Array, "L"]:
    """Bytes each link carries when every flow sends ``sizes`` bytes along its route."""
    return link_sums(pad_routes(jnp.asarray(routes), num_links), jnp.asarray(sizes), num_links + 1)[:num_links]


def scheduled_bound(routes, sizes, capacity) -> Float[Array, ""]:
    """Ideal scheduled lower bound on the time to move a set of flows: max over links of bytes / capacity.

    No schedule (fluid or packet, any routing of these routes) finishes earlier; a perfectly scheduled
    fabric (credit-based, sprayed) approaches it. ``efficiency = bound / simulated makespan`` in (0, 1].

    >>> import flowmodel as fm
    >>> float(fm.scheduled_bound([[0], [0]], [10.0, 30.0], [10.0]))   # 40 bytes over a 10 B/s link
    4.0
    """
    capacity = jnp.asarray(capacity)
    return jnp.max(link_bytes(routes, sizes, capacity.shape[0]) / capacity)


def soft_max(x, temperature) -> Float[Array, ""]:
    """Smooth maximum ``T * logsumexp(x / T)``: an upper bound within ``T log n`` of ``max(x)``.

    Use for the makespan of finish times in search; tends to ``max(x)`` as ``temperature -> 0``.
    """
    x = jnp.asarray(x)
    return temperature * jax.nn.logsumexp(x / temperature)
