"""Transport profiles: what a packet transport costs beyond fluid max-min, as a few physical parameters.

A profile is a thin transform of the fluid model's inputs, so every kernel and its gradient stay as
they are:

- ``goodput``: payload bytes per wire byte; capacity becomes ``capacity x goodput``. TCP/IPv4 with
  timestamps carries 1448 payload bytes in a 1502-byte frame on a point-to-point link: 0.964.
- a start delay per flow, added to its start time: ``handshake_rtts`` round trips before the first
  data byte (1 for TCP's SYN / SYN-ACK), the store-and-forward of one packet on every hop, the standing
  queue at its bottleneck (``queue_packets`` packets at the slowest link of its route), and slow start:
  ``slow_start`` RTTs per doubling of the window from ``initial_window`` up to its target, the flow's
  share of the bandwidth-delay product (or its window, or its size, if smaller).
- the marking ramp (``mark_packets`` > 0, an ECN transport such as DCTCP, whose ports mark above
  K = max(``mark_packets`` packets, ``mark_bdp`` x the port's bandwidth-delay product at the longest RTT
  through it): slow start's bursts fill a port's queue to K before the window fills the link, and the
  marks cut the window by DCTCP's alpha / 2, twice (``_marking_cut``; alpha starts at 1 and decays by
  1/16 a round). Below its target window the flow regrows one segment per RTT, congestion avoidance's
  additive increase, so the ramp to a target of W segments lasts W - w0 RTTs. The closed form of that
  linear ramp gives a start delay (the time it loses against the full rate) or, for a flow that ends
  inside the ramp, a rate cap at its mean rate there. It acts where a flow's window target exceeds its
  cut: in a datacenter, 118 segments for a flow alone at K = 65 packets, so at 10 Gbps beyond 140 us of
  RTT and at 400 Gbps beyond 3.6 us (ns-3 at 40 Gbps and 100 us: 9.105 ms for 20 MB, the profile 9.146),
  and over long links (ns-3 at 100 / 1,000 km: windows cut to 118 / 1,227 segments, the cut's 113 /
  1,204, then regrowing one per RTT).
- regrowth (``regrowth`` segments per RTT, 1 for every named profile): a flow whose share's window is
  below its bottleneck's window regrows to it, and the time that ramp loses is added to its bytes
  (``sizes`` grow), paid at the rate the flow has meanwhile: its fair share while its competitors run,
  the bottleneck's once they have ended (blended by the fraction of the regrown bytes it sends alone).
  So n equal flows that ramp together lose the ramp's time once, as one link's idle time, not n times.
  It stands in, statically, for the flow that outlasts its competitors, or regains a window cut by
  marks or losses. Under loss-based TCP it ramps over every byte (losses halve the window throughout a
  transfer), so it also charges flows that end together (8 equal flows over 100 km: +23.0% under
  NewReno, −9.3% under Cubic against ns-3, where a straggler the losses left behind ends last). With
  ``regrow_outlast`` (DCTCP: its marks cut by alpha / 2 and keep
  the queue at K, with no losses to halve the window, and its slow start's cut is the marking ramp) it
  ramps only over the bytes the flow sends after the competitors on its most crowded hop have ended: at
  weighted shares, its bytes beyond its weight x the largest bytes per weight among them (none for
  flows that end together). It starts from no less than ``min_window`` segments (2: TCP's cuts stop
  there), so that a share below a segment, as each of 31 flows on one 10 Gbps port has at a few us of
  RTT, is not charged a ramp from that share.
- contention, what packet transport loses where flows limited by two ports share links, from static
  counts of the routes: a link carrying n flows (n = its bytes over its largest flow's, so that a flow
  that ends early counts less) is contended ``c = (n - 1) / (n - 1 + contention_flows)``: 0 for one
  flow, towards 1 for many. Its capacity is divided by ``1 + contention * c * e``, where ``e`` is the
  least over its flows of how contended each is elsewhere (the c of its most contended other hop,
  counting there only the flows that do not also cross this link). Flows limited in turn by two ports
  back off for reasons the other port does not see; a port loses capacity to that only when no flow on
  it is free to take up what the others leave (a parking lot's one-hop flows do), and two hops that
  carry the same flows (a ring's uplink and the next leaf's downlink) are one bottleneck. On one port
  alone the fit found no loss beyond goodput: every variant runs incast at the goodput bound. With
  ``sender_fair_queue`` (every named profile; off in a bare ``Transport``) a sender's NIC, a link that
  every flow crossing it enters at its first packet hop, is no contended port, here or elsewhere (a link
  that some flow enters at a later hop is a port between hosts, as in a direct network's ring): the
  host fair-queues its own flows (Linux's fq or fq_codel with TCP small queues; the peer's hosts
  likewise), so it sends each at its fair share and drops none of them, and the port downstream sees
  them arrive at exactly the rates it can carry (an all-to-all's receivers are no contended ports
  either: ns-3 runs its 8-host all-to-all in 2.98 ms under NewReno, Cubic and DCTCP alike, with no
  loss).
- RTT-dependent sharing: weights x ``(RTT / max RTT) ** (-rtt_exponent x settled)`` (TCP gives flows
  with short round trips more than their max-min share). The bias is congestion avoidance's, and forms
  over about one sawtooth, W / 2 rounds for a window of W segments at the flow's share: ``settled = 1 -
  exp(-rounds / (W / 2))``, rounds the RTTs the flow's bytes take at its share. Datacenter flows settle
  within their first rounds (0.998 for 8 MB at 206 us and 2.4 Gbps, 43 segments); two 48 MB flows
  over 500 km, W about 2,000 segments, settle 0.016 and keep their weights, as in ns-3.
- several bottlenecks: weights x ``m ** -hop_exponent``, with m (at least 1) the hops the flow shares
  whose fair share (capacity over the flows crossing it) is as tight as its tightest (``HOP_TIGHTNESS``). Each such hop
  holds a standing queue, which lengthens the flow's RTT, and adds its marks or losses to the flow's:
  where queues dominate the RTT the window of a flow across m of them falls as ``m ** -(1 + b)``, b the
  exponent of the variant's response to its mark or loss rate p (window ~ p ** -b: 1 for DCTCP, whose
  window halves by the marked fraction; 1/2 for Reno's and Cubic's square-root law). Physics, not
  fitted: a parking lot's 3-hop flow gets 1/6 of each link under NewReno and Cubic (ns-3: 0.17-0.18),
  where max-min gives it half; 1/10 under DCTCP, where ns-3 at K = 65 gives it about 1/6 as well.
- ACKs (``ack_bytes`` wire bytes every ``ack_every`` segments, where the caller says which link carries
  each link's ACKs back, ``reverse``): a flow's ACKs ride the reverse of its route at its static fair
  share times ``ack_bytes / (ack_every x segment)`` and take that from the wire of the links they cross.
  It matters where links carry data both ways: a ring's uplink carries its own flow and the ACKs of the
  flow it receives (54-byte ACKs every 2 segments: 1.8% of the link). Physics, not fitted.
- ``window``: bytes in flight per flow; the rate is capped at ``window / RTT``.

RTT of a flow = twice its route latency + one packet's serialization on every hop + its bottleneck
queue. The share used for slow start is the capacity of its most crowded link divided by the number of
flows crossing it (a static count: no rates are solved to set the inputs).

The named profiles (``PROFILES``) were fitted against ns-3 3.44 on the fit half of the validation
cases of ``experiments/validation`` and checked on the held-out half; ``experiments/validation/fit.py``
prints the fit and README's "How accurate is it" the errors. Every term is a smooth function of the
continuous inputs (capacity, latency, sizes, weights) except where a case changes (a target window
crossing the marking threshold, a flow ending inside a ramp), so gradients pass through a profile.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import _checks
from .._types import Array
from ._incidence import link_sums, pad_routes

TCP_GOODPUT = 1448.0 / 1502.0  # payload of a 1500-byte IPv4 packet with TCP timestamps, over its PPP frame
WIRE_PACKET = 1502.0
WIRE_ACK = 54.0  # a bare ACK with timestamps: 20 IP + 32 TCP + 2 PPP bytes
# how sharply a hop's fair share must match the flow's tightest to count as one of its bottlenecks: a hop at
# 0.95 of it counts 0.44, at 0.9 0.19, at half 0 (a near-indicator that stays smooth in capacity)
HOP_TIGHTNESS = 16.0
# DCTCP's gain g, by which alpha (1 at the start) moves each round (RFC 8257's 1/16, ns-3's and Linux's default),
# and how sharply flows of different RTTs stop counting as in slow start together (_marking_cut)
DCTCP_GAIN = 1.0 / 16
MARK_SYNC = 8.0
# the largest RTT or hop exponent: (2 x 10^4, a 1 us hop against a 2,000 km path) ** 8 = 2.6e34 is still a float32
MAX_EXPONENT = 8.0


@dataclasses.dataclass(frozen=True)
class Transport:
    """A transport profile (see the module docstring); the defaults are the pure fluid model."""

    name: str = "custom"
    goodput: float = 1.0
    handshake_rtts: float = 0.0
    slow_start: float = 0.0
    initial_window: float = 10 * 1448.0
    segment: float = 1448.0
    mark_packets: float = 0.0
    mark_bdp: float = 0.0
    regrowth: float = 0.0
    regrow_outlast: bool = False  # regrow only over the bytes sent after the competitors end (else every byte)
    sender_fair_queue: bool = False  # the sender's NIC fair-queues its flows: no contention there (see contention)
    min_window: float = 2.0  # segments: the least window regrowth starts from (TCP's cuts stop at 2)
    contention: float = 0.0
    contention_flows: float = 1.0
    hop_exponent: float = 0.0
    ack_bytes: float = 0.0  # wire bytes of an ACK; 0: ACKs take no capacity
    ack_every: float = 2.0  # segments per ACK (delayed ACKs)
    rtt_exponent: float = 0.0
    queue_packets: float = 0.0
    packet_bytes: float = 0.0  # wire bytes of a packet (store-and-forward, queue); 0: a fluid without packets
    window: float | None = None

    def __post_init__(self):
        def bad(field, want):
            raise ValueError(f"transport.{field}: must be {want}, got {getattr(self, field)!r}")

        for field in ("handshake_rtts", "slow_start", "mark_packets", "mark_bdp", "regrowth", "contention",
                      "hop_exponent", "ack_bytes", "rtt_exponent", "queue_packets", "packet_bytes"):
            v = getattr(self, field)
            if not (isinstance(v, (int, float)) and np.isfinite(v) and v >= 0):
                bad(field, ">= 0")
        for field, unit in (("initial_window", " bytes"), ("segment", " bytes"), ("contention_flows", ""),
                            ("ack_every", " segments"), ("min_window", " segments")):
            v = getattr(self, field)
            if not (isinstance(v, (int, float)) and np.isfinite(v) and v > 0):
                bad(field, f"> 0{unit}")
        for field in ("rtt_exponent", "hop_exponent"):  # beyond, weights over a fleet's RTT spans leave float32
            if getattr(self, field) > MAX_EXPONENT:
                bad(field, f"<= {MAX_EXPONENT:g}")
        if not (isinstance(self.goodput, (int, float)) and 0 < self.goodput <= 1):
            bad("goodput", "in (0, 1]")
        for field in ("regrow_outlast", "sender_fair_queue"):
            if not isinstance(getattr(self, field), (bool, np.bool_)):
                bad(field, "True or False")
        if self.window is not None and not (np.isfinite(self.window) and self.window > 0):
            bad("window", "> 0 bytes (or None)")
        if self.mark_packets and not self.regrowth:
            bad("regrowth", "> 0 segments per RTT with mark_packets (the marking ramp regrows the window)")

    def with_window(self, window: float | None) -> Transport:
        return dataclasses.replace(self, window=window)



# Fitted against ns-3 3.44 by experiments/validation/fit.py on the fit half of the cases only (10 Gbps links,
# 400-packet switch port buffers, hosts' NICs fair queues that hold their flows' windows, DCTCP marking above
# K = max(65 packets, BDP / 7), long links buffered to one BDP): slow
# start and the RTT exponent of NewReno and Cubic, and every variant's two contention constants (DCTCP's RTT exponent
# too). Physics or the setup, not fitted: goodput, the handshake, the initial window and segment, one packet of
# store-and-forward per hop, the senders' NICs as fair queues (no contended port), regrowth of one segment per RTT
# (additive increase) from at least 2 segments (under DCTCP over the bytes sent after the competitors end), DCTCP's
# slow start (1 RTT per doubling, the standard's) and its
# marking cut (the setup's K, by the DCTCP paper's rule; alpha's gain 1/16), the exponent of several bottlenecks (1 +
# the window's exponent in the mark or loss rate), and the ACKs' bytes (a 54-byte frame, 20 IP + 32 TCP with
# timestamps + 2 PPP, every 2 segments); the fit ran with them on.
_TCP = dict(goodput=TCP_GOODPUT, packet_bytes=WIRE_PACKET, handshake_rtts=1.0, regrowth=1.0, ack_bytes=WIRE_ACK,
            ack_every=2.0, sender_fair_queue=True)
PROFILES = {
    "newreno": Transport("newreno", **_TCP, slow_start=1.463, rtt_exponent=8.0, contention=0.1511,
                         contention_flows=0.2193, hop_exponent=1.5),
    # (the loss-based RTT exponents, 8 (the bound) / 3.8, are a fit: physics puts them near 1; docs/accuracy.md)
    "cubic": Transport("cubic", **_TCP, slow_start=0.9942, rtt_exponent=3.816, contention=0.5647,
                       contention_flows=8.0, hop_exponent=1.5),
    # Cubic's saturation sits at the fit's bound (8 flows, the most on a contended port of the fit half; fit.py UPPER),
    # DCTCP's at its floor (0.1 flows; fit.py LOWER): a port contended both ways loses about 6%
    "dctcp": Transport("dctcp", **_TCP, slow_start=1.0, rtt_exponent=2.27, contention=0.06182,
                       contention_flows=0.1, hop_exponent=2.0, mark_packets=65.0, mark_bdp=1 / 7, regrow_outlast=True),
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


def transport_inputs(transport: Transport, routes, sizes, capacity, latency, weights, rate_limit, reverse=None,
                     pairs: HopPairs | None = None, packet_links=None):
    """The fluid inputs a profile implies: ``(sizes, capacity, weights, rate_limit, start_delay[F])``.

    ``routes`` int[F, H] (-1 pads); the rest as in ``completion_times`` (weights / rate_limit float[F]).
    ``reverse``: int[L] the link that carries each link's ACKs back (-1: none), or None: ACKs take no
    capacity (``fabric.reverse_links`` builds it from the links' ends). ``pairs``: the routes'
    :class:`HopPairs`, which contention reads (default: built from the routes, see ``pairs_of``).
    ``packet_links``: bool[L] the links the transport runs on (``FabricInfo.packet_links``: every tier
    but scale-up, whose NVLink-class links move data with credits, not TCP), or None: every link. A
    link off it keeps its capacity, and a flow none of whose hops is on it keeps its fluid inputs.
    """
    if transport.contention and pairs is None:
        pairs = pairs_of(routes)
    routes, capacity, latency = jnp.asarray(routes), jnp.asarray(capacity), jnp.asarray(latency)
    L = capacity.shape[0]
    padded = pad_routes(routes, L)
    sizes = jnp.asarray(sizes, capacity.dtype)
    hop = padded < L
    fluid_in = (sizes, weights, rate_limit)
    packet, on_packet = None, hop
    if packet_links is not None:
        if jnp.shape(packet_links) != (L,):
            raise ValueError(f"packet_links: expected bool[{L}] (whether the transport runs on each link), got "
                             f"shape {list(jnp.shape(packet_links))}")
        packet = jnp.asarray(packet_links, bool)
        packet_ext = jnp.concatenate([packet, jnp.zeros(1, bool)])  # the pad slot is off it
        on_packet = packet_ext[padded]
        carried = jnp.any(on_packet, axis=1)
    # the packet-level terms (contention, marks, queues at several bottlenecks) read a flow's packet hops only;
    # its other hops (an NVLink, a host's PCIe, a storage link) still bound its rate
    payload = capacity * transport.goodput if packet is None else jnp.where(packet, capacity * transport.goodput,
                                                                            capacity)
    cap = payload  # less, below, what contention and ACKs take
    if transport.contention:
        # contended flows per link: its bytes over its largest flow's (a flow that ends early counts less)
        largest = jax.ops.segment_max(jnp.where(hop, sizes[:, None], 0.0).reshape(-1), padded.reshape(-1),
                                      num_segments=L + 1)
        total = link_sums(padded, sizes, L + 1)
        crowd = jnp.where(largest > 0, total / jnp.where(largest > 0, largest, 1.0), 1.0)
        excess = jnp.maximum(crowd - 1.0, 0.0)
        here = excess / (excess + transport.contention_flows)  # 0 for one flow, towards 1 for many
        contended = jnp.ones(L + 1, bool) if packet is None else packet_ext
        if transport.sender_fair_queue:
            # a sender's NIC, which fair-queues its flows: a link that every flow crossing it enters at its first
            # packet hop (hosts at the routes' edge; a link that also carries flows onward is a port between them)
            first = on_packet & (jnp.cumsum(on_packet, axis=1) == 1)
            at = jnp.where(on_packet, padded, L).reshape(-1)
            sender = jax.ops.segment_min(first.reshape(-1).astype(jnp.int32), at, num_segments=L + 1) > 0
            contended = contended & ~sender
            here = jnp.where(contended, here, 0.0)
        elsewhere = _least_contended_elsewhere(pairs, padded, hop, sizes, total,
                                               jnp.where(contended, largest, 0.0), transport.contention_flows, L)
        finite = jnp.isfinite(cap)  # an infinite link stays infinite, and passes no NaN back
        cap = jnp.where(finite, jnp.where(finite, cap, 1.0) / (1.0 + transport.contention * here[:L] * elsewhere[:L]),
                        cap)
    flows_on = link_sums(padded, jnp.ones(routes.shape[0], cap.dtype), L + 1)
    if transport.ack_bytes and reverse is not None:
        cap = _acks_taken(transport, padded, hop, cap, flows_on, jnp.asarray(reverse), L)
    if packet is not None:
        cap = jnp.where(packet, cap, capacity)
    cap_ext = jnp.concatenate([cap, jnp.full((1,), jnp.inf, cap.dtype)])
    lat_ext = jnp.concatenate([latency, jnp.zeros((1,), latency.dtype)])
    hop_cap = cap_ext[padded]
    finite = jnp.isfinite(hop_cap)
    serialize = jnp.sum(jnp.where(finite, transport.packet_bytes / jnp.where(finite, hop_cap, 1.0), 0.0), axis=1)
    bottleneck = jnp.min(hop_cap, axis=1)
    ok_b = jnp.isfinite(bottleneck)
    queue = jnp.where(ok_b, transport.queue_packets * transport.packet_bytes / jnp.where(ok_b, bottleneck, 1.0), 0.0)
    rtt = 2 * jnp.sum(lat_ext[padded], axis=1) + serialize + queue
    hop_share = hop_cap / jnp.maximum(flows_on[padded], 1.0)
    share = jnp.min(hop_share, axis=1)
    ok_s = jnp.isfinite(share)
    share_bdp = jnp.where(ok_s, jnp.where(ok_s, share, 0.0) * rtt, jnp.inf)  # bytes in flight at its share
    bdp = jnp.minimum(share_bdp, sizes)
    if transport.window is not None:
        bdp = jnp.minimum(bdp, transport.window)
    target = bdp
    if transport.mark_packets:
        line = jnp.concatenate([payload, jnp.full((1,), jnp.inf, cap.dtype)])
        w0, marked = _marking_cut(transport, padded, on_packet, line, rtt, sizes, L)
        marked = marked & (w0 < target)
        bdp = jnp.where(marked, w0, target)
    doublings = jnp.log2(jnp.maximum(bdp / transport.initial_window, 1.0))
    delay = transport.handshake_rtts * rtt + serialize + queue + transport.slow_start * rtt * doublings
    step = transport.regrowth * transport.segment
    ramping = jnp.zeros(sizes.shape, bool)
    if transport.mark_packets:
        # the whole flow ramps: one that ends inside it is capped at its mean rate there (flows ramping side by
        # side stay side by side, where start delays would let the first to start take the link)
        inside, lost, time = _linear_ramp(jnp.minimum(w0, target), target, sizes, rtt, step)
        ramping = marked & inside
        delay = delay + jnp.where(marked & ~inside, lost, 0.0)
        rate_limit = jnp.minimum(rate_limit, jnp.where(ramping, sizes / jnp.where(ramping, time, 1.0), jnp.inf))
    if transport.hop_exponent:
        # a flow's bottlenecks: the hops it shares whose fair share (capacity over flows) is as tight as its
        # tightest (a parking lot's long flow 3, its one-hop flows 1). Each adds a standing queue to its RTT and
        # its marks or losses to the flow's, so its window, and its weight, falls as a power of the count. A hop
        # the flow has to itself is left out: paced by an upstream hop of the same rate, it holds no queue
        ok_h = on_packet & jnp.isfinite(hop_share) & (flows_on[padded] > 1)
        tight = jnp.where(ok_h, jnp.where(ok_s, share, 0.0)[:, None] / jnp.where(ok_h, hop_share, 1.0), 0.0)
        hops = jnp.maximum(jnp.sum(tight ** HOP_TIGHTNESS, axis=1), 1.0)
        weights = weights * hops ** -transport.hop_exponent
    if transport.rtt_exponent:
        ok = rtt > 0
        each = jnp.where(ok, rtt, 1.0)
        # relative to the longest RTT among the flows it carries (no larger than 1: one it does not carry keeps
        # its weight below)
        longest = jnp.max(jnp.where(ok if packet is None else ok & carried, each, 0.0))
        rel = each / jnp.maximum(longest, each)
        # the RTT bias is congestion avoidance's equilibrium, which a flow reaches only over about half its
        # window's worth of rounds at its share (one sawtooth of one segment per RTT); a transfer shorter than
        # that ends in the slow-start regime, where no such bias has formed (a long fat pipe's window of
        # thousands of segments)
        window = share_bdp / transport.segment
        rounds = sizes / (transport.segment * jnp.maximum(window, 1.0))  # RTTs it spends at its share
        settled = -jnp.expm1(-rounds / jnp.maximum(window / 2, 1.0))
        weights = weights * jnp.where(ok, rel ** (-transport.rtt_exponent * settled), 1.0)
    if transport.regrowth:
        # a flow whose share's window is below its bottleneck's regrows to it, one segment per RTT, over its bytes:
        # that ramp's lost time, as bytes at the link's rate. A static stand-in for the flow that outlasts its
        # competitors (or regains a window cut by marks or losses): it also charges flows that end together. It
        # starts from no less than ``min_window`` segments, where TCP's cuts stop, however many flows share
        alone = jnp.minimum(jnp.where(ok_b, jnp.where(ok_b, bottleneck, 0.0) * rtt, jnp.inf), sizes)
        if transport.window is not None:
            alone = jnp.minimum(alone, transport.window)
        start = jnp.maximum(target, transport.min_window * transport.segment)
        # the bytes it sends once the competitors on its most crowded hop have ended: at weighted shares the last
        # of them ends when the flow has sent its weight x their largest bytes per weight
        tightest = jnp.argmin(hop_share, axis=1)[:, None]
        others = jnp.take_along_axis(_largest_other(padded, hop, sizes / weights, L), tightest, axis=1)[:, 0]
        # (an empty route's only "hop" is a pad: no competitors, and no inf x 0 in the gradient)
        outlast = jnp.maximum(sizes - weights * jnp.where(jnp.isfinite(others), others, 0.0), 0.0)
        regrown = outlast if transport.regrow_outlast else sizes
        grows = (alone > start) & ~ramping & (regrown > 0)
        top = jnp.where(grows, alone, 2 * start)
        inside, lost, time = _linear_ramp(start, top, jnp.where(grows, regrown, 1.0), rtt, step)
        ok = (rtt > 0) & grows
        per_rtt = jnp.where(ok, top / jnp.where(ok, rtt, 1.0), 1.0)
        tail = jnp.where(inside, time - regrown / per_rtt, lost)
        # the time lost is what the flow would have sent at the rate it has then: its fair share while its
        # competitors run, the link's once they end (so n equal flows that ramp together lose the ramp's time once,
        # not n times): the blend by the fraction of the regrown bytes it sends alone
        alone_part = jnp.where(ok, outlast / jnp.where(ok, regrown, 1.0), 0.0)
        shared = jnp.minimum(jnp.where(ok_s, share, 0.0), per_rtt)
        sizes = sizes + jnp.where(ok, jnp.maximum(tail, 0.0) * (shared + (per_rtt - shared) * alone_part), 0.0)
    if transport.window is not None:
        ok = rtt > 0
        rate_limit = jnp.minimum(rate_limit, jnp.where(ok, transport.window / jnp.where(ok, rtt, 1.0), jnp.inf))
    if packet is not None:  # flows that never meet a packet link: as the fluid model has them
        sizes, weights, rate_limit = (jnp.where(carried, new, jnp.broadcast_to(old, new.shape))
                                      for new, old in zip((sizes, weights, rate_limit), fluid_in))
        delay = jnp.where(carried, delay, 0.0)
    return sizes, cap, weights, rate_limit, delay


def _largest_other(padded, hop, values, L):
    """float[F, H]: on each hop of each flow, the largest of the other flows' ``values`` (float[F] >= 0; 0 where
    it has the hop to itself, inf on pads)."""
    flat = padded.reshape(-1)
    each = jnp.where(hop, values[:, None], 0.0).reshape(-1)
    first = jax.ops.segment_max(each, flat, num_segments=L + 1)[flat]
    top = (each >= first) & hop.reshape(-1)
    tops = jax.ops.segment_sum(top.astype(values.dtype), flat, num_segments=L + 1)[flat]
    second = jnp.maximum(jax.ops.segment_max(jnp.where(top, 0.0, each), flat, num_segments=L + 1)[flat], 0.0)
    # the largest meets the second largest (itself again where two tie); every other flow the largest
    other = jnp.where(top & (tops < 2), second, first)
    return jnp.where(hop, other.reshape(hop.shape), jnp.inf)


def _acks_taken(transport: Transport, padded, hop, cap, flows_on, reverse, L):
    """float[L] payload capacity left once every flow's ACKs, at its static fair share, are carried on
    the reverse of its route (at most half a link: a guard, far above any real ACK load)."""
    finite = jnp.isfinite(cap)
    cap_ext = jnp.concatenate([cap, jnp.full((1,), jnp.inf, cap.dtype)])
    share = jnp.min(cap_ext[padded] / jnp.maximum(flows_on[padded], 1.0), axis=1)
    ok = jnp.isfinite(share)
    ack_rate = jnp.where(ok, share, 0.0) * transport.ack_bytes / (transport.ack_every * transport.segment)
    back = jnp.concatenate([reverse, jnp.full((1,), -1, reverse.dtype)])[padded]
    back = jnp.where(hop & (back >= 0), back, L)
    acks = jax.ops.segment_sum(jnp.broadcast_to(ack_rate[:, None], padded.shape).reshape(-1), back.reshape(-1),
                               num_segments=L + 1)[:L]
    taken = jnp.minimum(acks * transport.goodput, 0.5 * jnp.where(finite, cap, 0.0))  # wire bytes, as payload
    return jnp.where(finite, cap - taken, cap)


def _marking_cut(transport: Transport, padded, hop, line, rtt, sizes, L):
    """``(w0, marked)`` float[F], bool[F]: the window slow start's first marks leave a flow, and whether it
    still has bytes to send when they come. ``line``: float[L + 1] each link's payload rate (inf pads).

    A port marks above K = max(``mark_packets``, ``mark_bdp`` x its rate x the longest RTT through it)
    (DCTCP's rule K > C x RTT / 7). n flows in slow start together each send at twice their ACK rate, so
    in the round that takes their windows to 2W the port's queue reaches K after 2K / n packets of each:
    the first round to do so is the first whose window, the initial window doubled, reaches 2K / n. Its
    marks return a round later, when the window is that round's plus 2K / n, and DCTCP cuts it by
    alpha / 2, alpha having decayed from 1 by (1 - g) a round (g = 1/16). The round then in flight left in
    the same burst and is marked too, so the window is cut twice, unless the flow's window (its socket
    buffer) held that burst back. Of the ports on the route the one with the least K / n marks first.

    n counts each flow on the port as far as its bytes reach what slow start sends before the marks (4K / n:
    twice the round that reaches 2K / n), and as far as its rounds line up with the others':
    a flow at rho times another's RTT falls r (1 - 1 / rho) rounds behind in r rounds, and sends at
    1 / rho of its rate, so over the ~8 rounds before the first marks it adds about
    2 ** -(8 (1 - 1 / rho)) / rho of a flow to their burst (0.55 at rho = 1.1, 1/32 at 2). A port takes
    1 + (n - 1) (min RTT / max RTT) ** 8 (0.47 at 1.1, 1/256 at 2): a heuristic over the port's spread,
    so one flow at another RTT takes the rest out of step too.
    """
    flat = padded.reshape(-1)
    on = (hop & (sizes[:, None] > 0)).reshape(-1)  # a flow without bytes sends no burst
    each = jnp.broadcast_to(rtt[:, None], padded.shape).reshape(-1)
    # 0 on a link no flow crosses: its empty max (-inf) would pass NaN back to its capacity
    longest = jnp.maximum(jax.ops.segment_max(jnp.where(on, each, 0.0), flat, num_segments=L + 1), 0.0)
    shortest = -jax.ops.segment_max(jnp.where(on, -each, -jnp.inf), flat, num_segments=L + 1)
    ok = longest > 0  # guarded, so that no inf or NaN reaches a gradient
    spread = jnp.where(ok, jnp.where(ok, shortest, 1.0) / jnp.where(ok, longest, 1.0), 1.0)
    finite = jnp.isfinite(line)
    k = jnp.maximum(transport.mark_packets * transport.segment,
                    transport.mark_bdp * jnp.where(finite, line, 0.0) * longest)
    # n flows in step each send about 4K / n before the marks: a flow counts as far as its bytes reach that,
    # from n = 1 to the count it implies in three steps (32 flows of 4K / 8 bytes: 4, 16, 32)
    ok_k = k > 0
    unit = jnp.where(ok_k, 4 * jnp.where(ok_k, k, 1.0), jnp.inf)[padded]
    in_step = jnp.ones(L + 1, k.dtype)
    for _ in range(3):
        reach = jnp.minimum(sizes[:, None] * in_step[padded] / unit, 1.0).reshape(-1)
        in_step = jnp.maximum(jax.ops.segment_sum(jnp.where(on, reach, 0.0), flat, num_segments=L + 1), 1.0)
    together = 1.0 + (in_step - 1.0) * spread ** MARK_SYNC
    per_flow = jnp.where(hop & finite[padded], (k / together)[padded], jnp.inf)
    least = jnp.min(per_flow, axis=1)
    ok = jnp.isfinite(least)
    k_flow = jnp.where(ok, least, 0.0)
    # the marked round: the first whose window, the initial window doubled, reaches 2K / n (a step in K, as in
    # ns-3: no gradient flows through the round, only through K)
    doubled = jnp.ceil(jnp.log2(jnp.maximum(2 * k_flow / transport.initial_window, 1.0)))
    burst = transport.initial_window * 2.0 ** doubled
    peak = burst + 2 * k_flow  # the window when its marks return
    alpha = (1.0 - DCTCP_GAIN) ** (doubled + 1.0)
    cuts = 2.0 if transport.window is None else jnp.where(peak > transport.window, 1.0, 2.0)
    # no cut takes a window below min_window; slow start has sent about twice the marked round's window when the
    # cuts come
    cut = jnp.maximum(peak * (1.0 - alpha / 2) ** cuts, transport.min_window * transport.segment)
    return cut, ok & (sizes > 2 * burst)


def _linear_ramp(w0, target, sizes, rtt, step):
    """A window regrowing from ``w0`` to ``target`` bytes by ``step`` bytes per RTT (float[F] each):
    ``(inside, lost, time)``: whether the flow's ``sizes`` bytes end inside the ramp; the time a flow
    that outlasts it loses against sending at ``target / rtt`` throughout; and the time one that ends
    inside it takes.

    After n RTTs the window is w0 + n step: the ramp lasts (target - w0) / step RTTs and sends
    (w0 + target) / 2 bytes per RTT; a flow inside it has sent w0 n + step n^2 / 2 bytes after n.
    """
    ok = (rtt > 0) & (target > 0)  # guarded, so that the branch not taken has no NaN gradient either
    rtt = jnp.where(ok, rtt, 1.0)
    target = jnp.where(ok, target, 1.0)
    w0 = jnp.where(ok, w0, 1.0)
    rounds = (target - w0) / step
    inside = ok & (sizes < rounds * (w0 + target) / 2)
    lost = jnp.where(ok, rounds * rtt * (target - w0) / (2 * target), 0.0)
    time = rtt * (jnp.sqrt(w0 * w0 + 2 * step * sizes) - w0) / step
    return inside, lost, time


class HopPairs(NamedTuple):
    """Every flow's ordered pairs of distinct hops (i, j), grouped by the two links they cross
    (``hop_pairs``); P entries, the last ones padding where a batch is padded to its longest.

    row:   int32[P]  f x H + i (F x H: padding)
    other: int32[P]  the link of hop j (-1: padding)
    group: int32[P]  the pair (link of hop i, link of hop j), numbered from 0 (P: padding)
    """

    row: Array
    other: Array
    group: Array


def hop_pairs(routes, length: int | None = None) -> HopPairs:
    """:class:`HopPairs` of int[F, H] routes (-1 pads) known now, padded to ``length`` entries (default:
    as many as there are; a route of 3 hops has 6 pairs of its H x H slots). Integers only: no gradient
    passes through them."""
    r = np.asarray(routes).astype(np.int64)
    F, H = r.shape
    i, j = np.meshgrid(np.arange(H), np.arange(H), indexing="ij")
    i, j = i.reshape(-1), j.reshape(-1)
    pair = (r[:, i] >= 0) & (r[:, j] >= 0) & (i != j)[None, :]
    f, slot = np.nonzero(pair)
    a, b = r[f, i[slot]], r[f, j[slot]]
    _, group = np.unique(a * (int(r.max(initial=0)) + 1) + b, return_inverse=True)
    P = f.size if length is None else length
    if P < f.size:
        raise ValueError(f"hop_pairs: {f.size} pairs do not fit in length {length}")
    out = HopPairs(np.full(P, F * H, np.int32), np.full(P, -1, np.int32), np.full(P, P, np.int32))
    out.row[:f.size], out.other[:f.size], out.group[:f.size] = f * H + i[slot], b, group.reshape(-1)
    return out


def stacked_hop_pairs(routes) -> HopPairs:
    """:class:`HopPairs` of several routings of the same flows (int[S, F, H]), each padded to the longest."""
    routes = np.asarray(routes)
    hops = (routes >= 0).sum(axis=2)
    P = int((hops * (hops - 1)).sum(axis=1).max(initial=0))  # a route of h hops has h (h - 1) pairs
    return HopPairs(*(np.stack(x) for x in zip(*(hop_pairs(r, P) for r in routes))))


def pairs_of(routes) -> HopPairs:
    """``hop_pairs`` of routes known now, or of traced ones through a host callback, padded to every slot
    (F x H x (H - 1) entries: pass the pairs, as a prepared phase does, to keep them to the real ones)."""
    if not _checks.is_traced(routes):
        return HopPairs(*map(jnp.asarray, hop_pairs(routes)))
    F, H = routes.shape
    P = F * H * (H - 1)
    shape = HopPairs(*(jax.ShapeDtypeStruct((P,), jnp.int32),) * 3)

    def call(r):
        r = np.asarray(r)
        flat = [hop_pairs(x, P) for x in r.reshape(-1, F, H)]
        return HopPairs(*(np.stack(x).reshape(r.shape[:-2] + (P,)) for x in zip(*flat)))

    return jax.pure_callback(call, shape, routes, vmap_method="expand_dims")


def _least_contended_elsewhere(pairs: HopPairs, padded, hop, sizes, total, largest, flows, L):
    """float[L + 1]: for each link, the least over its flows of how contended each is on its other hops.

    A flow's contention on hop h seen from hop l counts only the competitors on h that do not also cross
    l: where the same flows cross both (a ring's uplink and the next leaf's downlink) they are one
    bottleneck, not two. ``pairs`` groups every flow's hop pairs by the links they cross, so the bytes on
    both links of each pair are one segment sum over the real pairs.
    """
    F, H = padded.shape
    P = pairs.row.shape[0]
    flow_bytes = jnp.concatenate([sizes, jnp.zeros(1, sizes.dtype)])[jnp.minimum(pairs.row // H, F)]
    both = jax.ops.segment_sum(flow_bytes, pairs.group, num_segments=P + 1)[pairs.group]
    other = jnp.where(pairs.other >= 0, pairs.other, L)
    ok = (pairs.other >= 0) & (largest[other] > 0)
    distinct = jnp.where(ok, (total[other] - both) / jnp.where(ok, largest[other], 1.0), 0.0)
    seen = jnp.where(ok, distinct / (distinct + flows), 0.0)
    # [f, i]: the most contended other hop of f, seen from its hop i (0 where it has no other hop)
    elsewhere = jnp.maximum(jax.ops.segment_max(seen, pairs.row, num_segments=F * H + 1)[:F * H], 0.0)
    least = jax.ops.segment_min(jnp.where(hop.reshape(-1), elsewhere, jnp.inf), padded.reshape(-1),
                                num_segments=L + 1)
    return jnp.where(jnp.isfinite(least), least, 0.0)
