"""Transport profiles: what a packet transport costs beyond fluid max-min, as a few physical parameters.

A profile is a thin transform of the fluid model's inputs, so every kernel and its gradient stay as
they are:

- ``goodput``: payload bytes per wire byte; capacity becomes ``capacity x goodput``. TCP/IPv4 with
  timestamps carries 1448 payload bytes in a 1502-byte frame on a point-to-point link: 0.964.
- a start delay per flow, added to its start time: ``handshake_rtts`` round trips before the first
  data byte (1 for TCP's SYN / SYN-ACK), the store-and-forward of one packet on every hop, the standing
  queue at its bottleneck (``queue_packets`` packets at the slowest link of its route), and slow start:
  ``slow_start`` RTTs per doubling of the window from ``initial_window`` up to the flow's share of the
  bandwidth-delay product (or its window, or its size, if smaller); and ``ramp`` RTTs per initial window
  of that window, for a transport that leaves slow start early and regains its window by additive
  increase (one segment per RTT: DCTCP's first marks halve the window, alpha starting at 1).
- RTT-dependent sharing: weights x ``(RTT / max RTT) ** -rtt_exponent`` (loss-based TCP gives flows
  with short round trips more than their max-min share).
- ``window``: bytes in flight per flow; the rate is capped at ``window / RTT``.

RTT of a flow = twice its route latency + one packet's serialization on every hop + its bottleneck
queue. The share used for slow start is the capacity of its most crowded link divided by the number of
flows crossing it (a static count: no rates are solved to set the inputs).

The named profiles (``PROFILES``) were fitted against ns-3 3.44 on half of the validation cases of
``experiments/validation`` and checked on the other half; ``experiments/validation/fit.py`` prints the
fit and README's "How accurate is it" the errors.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from ._incidence import link_sums, pad_routes

TCP_GOODPUT = 1448.0 / 1502.0  # payload of a 1500-byte IPv4 packet with TCP timestamps, over its PPP frame
WIRE_PACKET = 1502.0


@dataclasses.dataclass(frozen=True)
class Transport:
    """A transport profile (see the module docstring); the defaults are the pure fluid model."""

    name: str = "custom"
    goodput: float = 1.0
    handshake_rtts: float = 0.0
    slow_start: float = 0.0
    ramp: float = 0.0
    initial_window: float = 10 * 1448.0
    rtt_exponent: float = 0.0
    queue_packets: float = 0.0
    packet_bytes: float = 0.0  # wire bytes of a packet (store-and-forward, queue); 0: a fluid without packets
    window: float | None = None

    def __post_init__(self):
        def bad(field, want):
            raise ValueError(f"transport.{field}: must be {want}, got {getattr(self, field)!r}")

        for field in ("handshake_rtts", "slow_start", "ramp", "rtt_exponent", "queue_packets", "packet_bytes"):
            v = getattr(self, field)
            if not (isinstance(v, (int, float)) and np.isfinite(v) and v >= 0):
                bad(field, ">= 0")
        v = self.initial_window
        if not (isinstance(v, (int, float)) and np.isfinite(v) and v > 0):
            bad("initial_window", "> 0 bytes")
        if not (isinstance(self.goodput, (int, float)) and 0 < self.goodput <= 1):
            bad("goodput", "in (0, 1]")
        if self.window is not None and not (np.isfinite(self.window) and self.window > 0):
            bad("window", "> 0 bytes (or None)")

    def with_window(self, window: float | None) -> Transport:
        return dataclasses.replace(self, window=window)


# Fitted against ns-3 3.44 by experiments/validation/fit.py (grid search on the fit half of the cases only:
# 10 Gbps links, 400-packet port buffers, DCTCP marking at 65 packets, long links buffered to one BDP);
# goodput, the handshake and the initial window are physics, not fitted. DCTCP's slow start and ramp are
# large because on long links its first marks halve the window, regained one segment per RTT.
_TCP = dict(goodput=TCP_GOODPUT, packet_bytes=WIRE_PACKET, handshake_rtts=1.0)
PROFILES = {
    "newreno": Transport("newreno", **_TCP, slow_start=1.6, ramp=0.0, rtt_exponent=3.0, queue_packets=0.0),
    "cubic": Transport("cubic", **_TCP, slow_start=1.0, ramp=0.0, rtt_exponent=0.25, queue_packets=0.0),
    "dctcp": Transport("dctcp", **_TCP, slow_start=8.0, ramp=0.625, rtt_exponent=1.75, queue_packets=0.0),
}
ALIASES = {"tcp": "newreno"}  # ns-3's default TCP


def transport_profile(transport: str | Transport | None) -> Transport | None:
    """A :class:`Transport` from a profile name (``PROFILES``, or ``"tcp"`` for NewReno), or as given."""
    if transport is None or isinstance(transport, Transport):
        return transport
    if isinstance(transport, str):
        name = ALIASES.get(transport, transport)
        if name in PROFILES:
            return PROFILES[name]
    known = ", ".join([*PROFILES, *ALIASES])
    raise ValueError(f"transport: unknown profile {transport!r}; known: {known} (or a Transport, or None)")


def transport_inputs(transport: Transport, routes, sizes, capacity, latency, weights, rate_limit):
    """The fluid inputs a profile implies: ``(capacity, weights, rate_limit, start_delay[F])``.

    ``routes`` int[F, H] (-1 pads); the rest as in ``completion_times`` (weights / rate_limit float[F]).
    """
    routes, capacity, latency = jnp.asarray(routes), jnp.asarray(capacity), jnp.asarray(latency)
    L = capacity.shape[0]
    padded = pad_routes(routes, L)
    cap = capacity * transport.goodput
    cap_ext = jnp.concatenate([cap, jnp.full((1,), jnp.inf, cap.dtype)])
    lat_ext = jnp.concatenate([latency, jnp.zeros((1,), latency.dtype)])
    hop_cap = cap_ext[padded]
    finite = jnp.isfinite(hop_cap)
    serialize = jnp.sum(jnp.where(finite, transport.packet_bytes / jnp.where(finite, hop_cap, 1.0), 0.0), axis=1)
    bottleneck = jnp.min(hop_cap, axis=1)
    ok_b = jnp.isfinite(bottleneck)
    queue = jnp.where(ok_b, transport.queue_packets * transport.packet_bytes / jnp.where(ok_b, bottleneck, 1.0), 0.0)
    rtt = 2 * jnp.sum(lat_ext[padded], axis=1) + serialize + queue
    flows_on = link_sums(padded, jnp.ones(routes.shape[0], cap.dtype), L + 1)
    share = jnp.min(cap_ext[padded] / jnp.maximum(flows_on[padded], 1.0), axis=1)
    bdp = jnp.minimum(jnp.where(jnp.isfinite(share), share * rtt, jnp.inf), jnp.asarray(sizes, cap.dtype))
    if transport.window is not None:
        bdp = jnp.minimum(bdp, transport.window)
    doublings = jnp.log2(jnp.maximum(bdp / transport.initial_window, 1.0))
    delay = transport.handshake_rtts * rtt + serialize + queue + transport.slow_start * rtt * doublings
    if transport.ramp:
        delay = delay + transport.ramp * rtt * jnp.maximum(bdp / transport.initial_window - 1.0, 0.0)
    if transport.rtt_exponent:
        ok = rtt > 0
        rel = jnp.where(ok, rtt, 1.0) / jnp.max(jnp.where(ok, rtt, 1.0))
        weights = weights * jnp.where(ok, rel ** -transport.rtt_exponent, 1.0)
    if transport.window is not None:
        ok = rtt > 0
        rate_limit = jnp.minimum(rate_limit, jnp.where(ok, transport.window / jnp.where(ok, rtt, 1.0), jnp.inf))
    return cap, weights, rate_limit, delay
