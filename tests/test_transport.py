"""Transport profiles: closed forms of each term, names, bad input, gradients, and the step-time option.
None of these need ns-3 (the fit against it is experiments/validation; tests/test_ns3_peer.py runs it)."""

import dataclasses
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowmodel as fm
from flowmodel import steptime as st
from flowmodel.kernels import PROFILES, transport_inputs
from flowmodel.kernels._transport import _largest_other, _marking_cut, hop_pairs, pairs_of, stacked_hop_pairs

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "experiments", "validation"))
import cases  # noqa: E402


def test_names_resolve_and_unknown_names_list_the_known_ones():
    assert fm.transport_profile("tcp") is PROFILES["newreno"]
    assert fm.transport_profile(None) is None
    tr = fm.Transport(goodput=0.5)
    assert fm.transport_profile(tr) is tr
    with pytest.raises(ValueError, match=r"transport: unknown profile 'bbr'; known: newreno, cubic, dctcp, tcp"):
        fm.transport_profile("bbr")
    with pytest.raises(ValueError, match="transport: unknown profile"):
        fm.completion_times([[0]], [1.0], [1.0], transport="reno")


@pytest.mark.parametrize("field, value", [("goodput", 0.0), ("goodput", 1.5), ("slow_start", -1.0),
                                          ("queue_packets", np.inf), ("initial_window", 0.0), ("window", -5.0),
                                          ("rtt_exponent", np.nan), ("mark_bdp", -0.5), ("segment", -1.0),
                                          ("contention", -0.1), ("contention_flows", 0.0), ("regrowth", np.inf),
                                          ("hop_exponent", -1.0), ("ack_bytes", -54.0), ("ack_every", 0.0),
                                          ("min_window", 0.0), ("rtt_exponent", 3000.0), ("hop_exponent", 9.0),
                                          ("sender_fair_queue", "yes"), ("regrow_outlast", 1)])
def test_bad_fields_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"transport.{field}: must be"):
        fm.Transport(**{field: value})


def test_marking_needs_a_regrowth():
    with pytest.raises(ValueError, match=r"transport.regrowth: must be > 0 segments per RTT with mark_packets"):
        fm.Transport(mark_packets=65.0)


def test_pure_fluid_profile_changes_nothing():
    rng = np.random.default_rng(0)
    routes = np.array([[0, 1], [1, 2], [0, 2], [2, -1]])
    sizes, cap, lat = rng.uniform(1, 10, 4), np.array([3.0, 5.0, 4.0]), np.array([0.1, 0.2, 0.05])
    base = fm.completion_times(routes, sizes, cap, latency=lat)
    np.testing.assert_allclose(fm.completion_times(routes, sizes, cap, latency=lat, transport=fm.Transport()), base,
                               rtol=1e-12)


def test_each_term_in_closed_form():
    cap, lat, size, pkt = 1e9, 1e-4, 1e8, 1500.0
    one = dict(latency=[lat])
    # goodput: the payload rate is capacity x goodput
    t = fm.completion_times([[0]], [size], [cap], transport=fm.Transport(goodput=0.5, packet_bytes=pkt), **one)
    ser = pkt / (0.5 * cap)
    np.testing.assert_allclose(t, [lat + ser + size / (0.5 * cap)], rtol=1e-12)
    # handshake: one RTT (twice the latency plus one packet's serialization) before the first byte
    t = fm.completion_times([[0]], [size], [cap], transport=fm.Transport(handshake_rtts=1.0, packet_bytes=pkt), **one)
    rtt = 2 * lat + pkt / cap
    np.testing.assert_allclose(t, [lat + pkt / cap + rtt + size / cap], rtol=1e-12)
    # slow start: slow_start RTTs per doubling from the initial window up to the bandwidth-delay product
    tr = fm.Transport(slow_start=1.0, initial_window=1e4, packet_bytes=pkt)
    t = fm.completion_times([[0]], [size], [cap], transport=tr, **one)
    np.testing.assert_allclose(t, [lat + pkt / cap + rtt * np.log2(cap * rtt / 1e4) + size / cap], rtol=1e-12)
    # window: rate capped at window / RTT
    tr = fm.Transport(window=1e5, packet_bytes=pkt)
    t = fm.completion_times([[0]], [size], [cap], transport=tr, **one)
    np.testing.assert_allclose(t, [lat + pkt / cap + size / (1e5 / rtt)], rtol=1e-12)
    # queueing: queue_packets at the bottleneck, once more in the delay and in the RTT
    tr = fm.Transport(queue_packets=10.0, handshake_rtts=1.0, packet_bytes=pkt)
    t = fm.completion_times([[0]], [size], [cap], transport=tr, **one)
    q = 10 * pkt / cap
    np.testing.assert_allclose(t, [lat + pkt / cap + q + (rtt + q) + size / cap], rtol=1e-12)


SEG = 1448.0


def _ramp_time(w0, size, rtt):
    """Seconds to send ``size`` bytes with a window of w0 + n segments in round n (n = 0, 1, ...)."""
    return rtt * (np.sqrt(w0 * w0 + 2 * SEG * size) - w0) / SEG


def _cut(k, window=np.inf, iw=10 * SEG):
    """The window (bytes) slow start's marks leave at a threshold of k bytes per flow: the first round whose
    window (iw doubled) reaches 2k; its marks return at that window + 2k; cut by alpha / 2 twice (once if the
    window held the burst back), alpha decayed from 1 by 15/16 a round."""
    doubled = np.ceil(np.log2(max(2 * k / iw, 1.0)))
    peak = iw * 2 ** doubled + 2 * k
    return peak * (1 - (15 / 16) ** (doubled + 1) / 2) ** (1 if peak > window else 2)


def test_marking_ramp_in_closed_form():
    cap, lat = 1.25e9, 5e-4
    rtt = 2 * lat
    tr = fm.Transport(mark_packets=65.0, mark_bdp=1 / 7, regrowth=1.0)
    # K = max(65 packets, BDP / 7): the BDP's seventh here, all of it the one flow's
    w0, target = _cut(cap * rtt / 7), cap * rtt
    # 2 MB (its target window the link's 1.25 MB) ends inside the ramp: it runs at its mean rate there
    near = fm.completion_times([[0]], [2e6], [cap], latency=[lat], transport=tr)
    np.testing.assert_allclose(near, [lat + _ramp_time(w0, 2e6, rtt)], rtol=1e-12)
    # 2 GB outlasts it: it loses the ramp's shortfall, (W - w0) / segment rounds at half the missing rate
    lost = (target - w0) / SEG * rtt * (target - w0) / (2 * target)
    t = fm.completion_times([[0]], [2e9], [cap], latency=[lat], transport=tr)
    np.testing.assert_allclose(t, [lat + lost + 2e9 / cap], rtol=1e-12)
    # a window below the cut's loses nothing to it; nor does a flow that ends before the marks return
    t = fm.completion_times([[0]], [2e9], [cap], latency=[lat], transport=tr.with_window(200 * SEG))
    np.testing.assert_allclose(t, [lat + 2e9 / (200 * SEG / rtt)], rtol=1e-12)
    t = fm.completion_times([[0]], [5e5], [cap], latency=[lat], transport=tr)
    np.testing.assert_allclose(t, [lat + 5e5 / cap], rtol=1e-12)
    # a window that holds back the marked round's burst takes one cut, not two
    window = 7e5  # between the cut and the marked window, 820 kB
    assert _cut(cap * rtt / 7, window) > _cut(cap * rtt / 7) and _cut(cap * rtt / 7, window) < window
    t = fm.completion_times([[0]], [2e9], [cap], latency=[lat], transport=tr.with_window(window))
    w1 = _cut(cap * rtt / 7, window)
    lost = (window - w1) / SEG * rtt * (window - w1) / (2 * window)
    np.testing.assert_allclose(t, [lat + lost + 2e9 / (window / rtt)], rtol=1e-12)
    # in a datacentre (10 us) K = 65 packets is above the window: no ramp
    t = fm.completion_times([[0]], [2e9], [cap], latency=[5e-6], transport=tr)
    np.testing.assert_allclose(t, [5e-6 + 2e9 / cap], rtol=1e-12)


def test_marking_cut_counts_the_flows_in_slow_start_together():
    cap, lat, size = 1.25e9, 5e-4, 2e9
    tr = fm.Transport(mark_packets=65.0, mark_bdp=1 / 7, regrowth=1.0)

    def cut(routes, latency, sizes=(size, size), marked=(True, True)):
        rtt = 2 * latency[routes].sum(axis=1)
        w0, got = _marking_cut(tr, jnp.asarray(routes), jnp.asarray(routes) >= 0, jnp.array([cap, cap, cap, np.inf]),
                               jnp.asarray(rtt), jnp.asarray(sizes), 3)
        np.testing.assert_array_equal(np.asarray(got), marked)
        return np.asarray(w0)

    # two flows of one RTT share link 0: each takes half its K (link 1 alone would give it all of K)
    k = cap * 2 * lat / 7
    np.testing.assert_allclose(cut(np.array([[0, 1], [0, 2]]), np.array([lat, 0.0, 0.0])), [_cut(k / 2)] * 2,
                               rtol=1e-12)
    # RTTs 2x apart: not in slow start together, link 0 counts 1 + 2 ** -8 flows and sets its K for the longer
    # RTT; the shorter's own link 1 (K by its RTT) marks it first
    np.testing.assert_allclose(cut(np.array([[0, 1], [0, 2]]), np.array([lat, 0.0, lat])),
                               [_cut(k), _cut(2 * k / (1 + 2.0 ** -8))], rtol=1e-12)
    # a flow that ends before slow start's marks counts as far as its bytes reach what each of n flows sends
    # before them, 4K / n: a tenth of a lone flow's adds 0.1 of a flow, then 0.1 x 1.1, then 0.1 x 1.11
    np.testing.assert_allclose(cut(np.array([[0, 1], [0, 2]]), np.array([lat, 0.0, 0.0]), (size, 0.4 * k),
                                   marked=(True, False))[0], _cut(k / 1.111), rtol=1e-12)
    # 8 flows of 4K / 4 bytes each are all in step: n = 8 (from 1: 2, 4, 8)
    n = 8
    w0, got = _marking_cut(tr, jnp.zeros((n, 1), int), jnp.ones((n, 1), bool), jnp.array([cap, np.inf]),
                           jnp.full(n, 2 * lat), jnp.full(n, k), 1)
    np.testing.assert_allclose(np.asarray(w0), _cut(k / n), rtol=1e-12)


@pytest.mark.parametrize("km, measured, within", [(100, 118, 0.05), (1000, 1227, 0.03), (2000, 3537, 0.01)])
def test_marking_cut_meets_ns3s_windows_over_long_links(km, measured, within):
    # ns-3 3.44's cwnd after slow start's marks (two DCTCP flows, 4 MB windows, docs/accuracy.md): at 2,000 km
    # one cut leaves it above the window (2,762 segments), where it loses nothing
    c = cases.long_haul(km, "held")
    tr = fm.transport_profile("dctcp").with_window(c.window)
    lat = np.append(c.latency, 0.0)[np.where(c.routes >= 0, c.routes, len(c.latency))]
    rtt = 2 * lat.sum(axis=1) + 3 * 1502 / (c.capacity.max() * tr.goodput)
    line = np.append(c.capacity * tr.goodput, np.inf)
    padded = np.where(c.routes >= 0, c.routes, len(c.capacity))
    w0, marked = _marking_cut(tr, jnp.asarray(padded), jnp.asarray(padded < len(c.capacity)), jnp.asarray(line),
                              jnp.asarray(rtt), jnp.asarray(c.sizes), len(c.capacity))
    assert np.asarray(marked).all()
    np.testing.assert_allclose(np.asarray(w0) / SEG, measured, rtol=within)


def test_regrowth_in_closed_form():
    # two flows share a link: each window is half the link's; each regrows to the whole window one segment per
    # RTT over its bytes (the static stand-in for losses that halve windows throughout), and what that ramp
    # loses is paid at the rate the flow has meanwhile: its share while the other runs, the link's once alone,
    # blended by the fraction of its bytes it sends alone (none for the small flow, (big - small) / big)
    cap, lat = 1.25e9, 1e-4
    rtt, small, big = 2 * lat, 1e6, 1e9
    tr = fm.Transport(regrowth=1.0)
    t = np.asarray(fm.completion_times([[0], [0]], [small, big], [cap], latency=[lat], transport=tr))
    half, whole = cap / 2 * rtt, cap * rtt
    lost = (whole - half) / SEG * rtt * (whole - half) / (2 * whole)  # the big flow outlasts the ramp
    small_tail = _ramp_time(half, small, rtt) - small * rtt / whole  # the small one ends inside it
    grown_small = small + small_tail * cap / 2
    paid = (half + (whole - half) * (big - small) / big) / rtt
    np.testing.assert_allclose(t, [lat + 2 * grown_small / cap, lat + (grown_small + big + lost * paid) / cap],
                               rtol=1e-12)
    # n equal flows ramp together and lose the ramp's time once: each pays it at its share, the link idle meanwhile
    n = 8
    t = np.asarray(fm.completion_times(np.zeros((n, 1), int), np.full(n, big), [cap], latency=[lat], transport=tr))
    share = cap / n * rtt
    lost_n = (whole - share) / SEG * rtt * (whole - share) / (2 * whole)
    np.testing.assert_allclose(t, np.full(n, lat + n * big / cap + lost_n), rtol=1e-12)
    # alone on its link a flow's share is the whole window already: nothing regrows
    t1 = fm.completion_times([[0]], [big], [cap], latency=[lat], transport=tr)
    np.testing.assert_allclose(t1, [lat + big / cap], rtol=1e-12)


def test_regrowth_of_the_bytes_sent_after_the_competitors_end():
    # regrow_outlast (DCTCP): the small flow ends with the big one still there, so nothing regrows for it; the
    # big one regrows over the bytes it sends alone (big - small), and what that ramp loses is sent at the
    # link's rate
    cap, lat = 1.25e9, 1e-4
    rtt, small, big = 2 * lat, 1e6, 1e9
    tr = fm.Transport(regrowth=1.0, regrow_outlast=True)
    t = np.asarray(fm.completion_times([[0], [0]], [small, big], [cap], latency=[lat], transport=tr))
    half, whole = cap / 2 * rtt, cap * rtt
    lost = (whole - half) / SEG * rtt * (whole - half) / (2 * whole)
    np.testing.assert_allclose(t, [lat + 2 * small / cap, lat + (small + big) / cap + lost], rtol=1e-12)
    # flows that end together regrow nothing (two 1 GB flows), where every-byte regrowth charges both
    t = np.asarray(fm.completion_times([[0], [0]], [big, big], [cap], latency=[lat], transport=tr))
    np.testing.assert_allclose(t, np.full(2, lat + 2 * big / cap), rtol=1e-12)
    every = fm.completion_times([[0], [0]], [big, big], [cap], latency=[lat], transport=fm.Transport(regrowth=1.0))
    assert np.all(np.asarray(every) > t * 1.001)
    # at weighted shares the flow of the least weight outlasts the others, though all carry the same bytes: with
    # weights 2 : 1 the heavier ends when the lighter has sent half its bytes, which the lighter then sends alone
    t = np.asarray(fm.completion_times([[0], [0]], [big, big], [cap], weights=[2.0, 1.0], latency=[lat],
                                       transport=tr))
    heavy = lat + 1.5 * big / cap
    ramp_bytes = (whole - half) / SEG * (half + whole) / 2  # what the ramp from half to the whole window sends
    assert ramp_bytes < big / 2
    np.testing.assert_allclose(t, [heavy, lat + 2 * big / cap + lost], rtol=1e-12)


def test_largest_other_flow_on_each_hop():
    routes = np.array([[0, 1], [0, -1], [0, 2], [1, -1]])
    padded = jnp.where(routes < 0, 3, routes)
    got = np.asarray(_largest_other(padded, padded < 3, jnp.array([5.0, 7.0, 7.0, 2.0]), 3))
    # link 0 carries 5, 7, 7: each 7 meets the other 7; link 1 carries 5 and 2; link 2 its flow alone; pads inf
    np.testing.assert_array_equal(got, [[7.0, 2.0], [7.0, np.inf], [7.0, 0.0], [5.0, np.inf]])


def test_regrowth_starts_from_the_least_window():
    # 100 flows on a 10 us link: each share's window (125 B) is below 2 segments, where TCP's cuts stop, so
    # each regrows to the link's 12.5 kB from 2 segments; with a 1-segment floor, from 1 segment. Ramping
    # together, they lose the ramp's time once (each pays it at its share)
    cap, lat, n, size = 1.25e9, 5e-6, 100, 1e9
    rtt, whole = 2 * lat, cap * 2 * lat
    assert cap / n * rtt < SEG
    for floor in (2.0, 1.0):
        t = fm.completion_times(np.zeros((n, 1), int), np.full(n, size), [cap], latency=[lat],
                                transport=fm.Transport(regrowth=1.0, min_window=floor))
        w0 = floor * SEG
        lost = (whole - w0) / SEG * rtt * (whole - w0) / (2 * whole)
        np.testing.assert_allclose(t, np.full(n, lat + n * size / cap + lost), rtol=1e-12)
    # a floor above the link's window: nothing regrows
    t = fm.completion_times(np.zeros((n, 1), int), np.full(n, size), [cap], latency=[lat],
                            transport=fm.Transport(regrowth=1.0, min_window=10.0))
    np.testing.assert_allclose(t, np.full(n, lat + n * size / cap), rtol=1e-12)


def test_contention_only_where_no_flow_on_the_link_is_free():
    cap, size = 1e9, 1e6
    tr = fm.Transport(contention=0.5, contention_flows=1.0)
    c2 = 0.5  # two flows: (2 - 1) / (2 - 1 + 1)
    # four flows over a 2 x 2 grid of links (0, 1 in, 2, 3 out): every flow meets a different competitor on
    # each of its hops, so every link's flows are all contended elsewhere
    routes = [[0, 2], [0, 3], [1, 2], [1, 3]]
    t = np.asarray(fm.completion_times(routes, np.full(4, size), np.full(4, cap), transport=tr))
    np.testing.assert_allclose(t, np.full(4, 2 * size * (1 + 0.5 * c2 * c2) / cap), rtol=1e-12)
    # two flows that cross the same two links (a ring's uplink and the next downlink) are one bottleneck
    t = np.asarray(fm.completion_times([[0, 1], [0, 1]], [size, size], [cap, cap], transport=tr))
    np.testing.assert_allclose(t, np.full(2, 2 * size / cap), rtol=1e-12)
    # a parking lot: every link also carries a one-hop flow, free to take up what the long flow leaves
    routes = [[0, 1, 2], [0, -1, -1], [1, -1, -1], [2, -1, -1]]
    t = np.asarray(fm.completion_times(routes, np.full(4, size), np.full(3, cap), transport=tr))
    np.testing.assert_allclose(t, np.full(4, 2 * size / cap), rtol=1e-12)


def test_a_senders_fair_queue_is_no_contended_port():
    cap, size = 1e9, 1e6
    fq = fm.Transport(contention=0.5, contention_flows=1.0, sender_fair_queue=True)
    fifo = dataclasses.replace(fq, sender_fair_queue=False)
    grid = 2 * size * (1 + 0.5 * 0.5 * 0.5) / cap  # the 2 x 2 grid above: two flows a link, contended on both hops
    # two hosts (links 0, 1) send a flow each to two receivers (links 2, 3): the grid, but links 0 and 1 are the
    # senders' NICs, which pace each flow at its fair share; the receivers' ports see no contended arrivals
    routes = [[0, 2], [0, 3], [1, 2], [1, 3]]
    for tr, want in ((fq, 2 * size / cap), (fifo, grid)):
        t = np.asarray(fm.completion_times(routes, np.full(4, size), np.full(4, cap), transport=tr))
        np.testing.assert_allclose(t, np.full(4, want), rtol=1e-12)
    # the same grid between switch ports, behind four private host links (4-7): contended either way
    routes = [[4, 0, 2], [5, 0, 3], [6, 1, 2], [7, 1, 3]]
    for tr in (fq, fifo):
        t = np.asarray(fm.completion_times(routes, np.full(4, size), np.full(8, cap), transport=tr))
        np.testing.assert_allclose(t, np.full(4, grid), rtol=1e-12)
    # a ring of direct links (no hosts): each link is one flow's first hop and the next flow's second, a port
    # between senders, contended as without the fair queue
    ring = [[i, (i + 1) % 6] for i in range(6)]
    for tr in (fq, fifo):
        t = np.asarray(fm.completion_times(ring, np.full(6, size), np.full(6, cap), transport=tr))
        np.testing.assert_allclose(t, np.full(6, grid), rtol=1e-12)
    # a NIC off the packet links (an NVLink-class hop) is no sender: the first packet hop is
    routes = [[4, 0, 2], [4, 0, 3], [5, 1, 2], [5, 1, 3]]
    packet = np.arange(6) < 4
    t = np.asarray(fm.completion_times(routes, np.full(4, size), np.full(6, 2 * cap), transport=fq,
                                       packet_links=packet))
    np.testing.assert_allclose(t, np.full(4, size / cap), rtol=1e-12)
    # an 8-host all-to-all under every named profile: no link loses capacity to contention
    case = cases.all_to_all(8)
    for name, tr in PROFILES.items():
        args = (case.routes, case.sizes, case.capacity, case.latency, jnp.ones(56), jnp.full(56, jnp.inf))
        got = transport_inputs(tr, *args)[1]
        want = transport_inputs(dataclasses.replace(tr, contention=0.0), *args)[1]
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, err_msg=name)
        unqueued = transport_inputs(dataclasses.replace(tr, sender_fair_queue=False), *args)[1]
        assert np.all(np.asarray(unqueued) < np.asarray(want)), name


# contention's mechanics on routes whose every link is some flow's first hop: no sender's fair queue
CONTENDED = dataclasses.replace(PROFILES["dctcp"], sender_fair_queue=False)


def test_senders_fair_queues_traced_and_batched_equal_known_routes():
    # random routes behind a host link per source (links 12-19): traced routes (jit, vmap, pairs through the host)
    # give the inputs of routes known at trace time; contention takes capacity from switch links, never from a NIC
    rng = np.random.default_rng(5)
    batch = np.full((2, 40, 4), -1, np.int32)
    batch[:, :, 0] = 12 + np.arange(40) % 8
    for b, f in np.ndindex(2, 40):  # then 2 or 3 distinct switch links
        n = rng.integers(2, 4)
        batch[b, f, 1:1 + n] = rng.choice(12, n, replace=False)
    sizes, cap, lat = rng.uniform(1e6, 1e8, 40), rng.uniform(1e9, 1e10, 20), np.full(20, 1e-6)

    def inputs(r, tr=PROFILES["dctcp"]):
        return transport_inputs(tr, r, sizes, cap, lat, jnp.ones(40), jnp.full(40, jnp.inf))

    traced = jax.jit(jax.vmap(inputs))(batch)
    for b in range(2):
        want = inputs(batch[b])
        for x, y in zip(want, (t[b] for t in traced)):
            np.testing.assert_allclose(y, x, rtol=1e-12)
        free = np.asarray(inputs(batch[b], tr=dataclasses.replace(PROFILES["dctcp"], contention=0.0))[1])
        taken = np.asarray(want[1]) < free * (1 - 1e-4)
        assert taken[:12].sum() >= 3 and not taken[12:].any()


def test_hop_pairs_name_each_link_pair_once_and_agree_traced():
    routes = np.array([[4, 7, -1], [4, 7, 2], [7, 4, -1]])
    p = hop_pairs(routes)
    got = {(int(r // 3), int(r % 3), int(o)): int(g) for r, o, g in zip(p.row, p.other, p.group)}
    assert len(got) == 2 + 6 + 2  # every ordered pair of distinct hops, none of a pad
    ids = {}
    for (f, i, other), g in got.items():
        ids.setdefault((int(routes[f, i]), other), set()).add(g)
    assert all(len(g) == 1 for g in ids.values()) and len(ids) == 6  # (4, 7) in two flows: one id; (7, 4) its own
    assert sorted(set().union(*ids.values())) == list(range(6))
    # the stacked (padded) pairs of two routings, and traced routes (jit, vmap) through the host, give the same
    # transport inputs as routes known at trace time
    rng = np.random.default_rng(3)
    batch = np.stack([random_routes(rng, most=3 + b) for b in range(2)])
    stacked = stacked_hop_pairs(batch)
    assert stacked.row.shape[0] == 2 and (stacked.group[0] == stacked.row.shape[1]).sum() > 0  # the shorter padded
    sizes, cap, lat = rng.uniform(1e6, 1e8, 40), rng.uniform(1e9, 1e10, 12), np.full(12, 1e-6)

    def inputs(r, pairs=None, tr=CONTENDED):
        return transport_inputs(tr, r, sizes, cap, lat, jnp.ones(40), jnp.full(40, jnp.inf), pairs=pairs)

    traced = jax.jit(jax.vmap(inputs))(batch)
    given = jax.jit(jax.vmap(inputs))(batch, jax.tree.map(jnp.asarray, stacked))
    for b in range(2):
        want = inputs(batch[b])
        free = inputs(batch[b], tr=dataclasses.replace(CONTENDED, contention=0.0))
        assert np.sum(np.asarray(want[1]) < np.asarray(free[1]) * (1 - 1e-4)) >= 3  # contention took capacity
        for x, y, z in zip(want, (t[b] for t in traced), (g[b] for g in given)):
            np.testing.assert_allclose(y, x, rtol=1e-12)
            np.testing.assert_allclose(z, x, rtol=1e-12)
    assert pairs_of(jnp.asarray(batch[0])).row.shape == (hop_pairs(batch[0]).row.shape[0],)


def random_routes(rng, F=40, L=12, H=4, most=4):
    routes = np.full((F, H), -1, np.int32)
    for f in range(F):
        n = rng.integers(1, most + 1)
        routes[f, :n] = rng.choice(L, n, replace=False)
    return routes


def test_a_flow_across_several_bottlenecks_gets_less_than_its_max_min_share():
    # a parking lot: the 3-hop flow meets a one-hop flow on every link. Max-min gives it half of each link;
    # with m = 3 bottlenecks its weight is 3 ** -hop_exponent: 1/10 of each link at exponent 2 (DCTCP's
    # 1 + 1), 1 / (1 + 3 ** 1.5) at 1.5 (Reno's and Cubic's 1 + 1/2)
    cap = jnp.full(3, 10.0)
    routes = jnp.array([[0, 1, 2], [0, -1, -1], [1, -1, -1], [2, -1, -1]])
    for exponent in (2.0, 1.5):
        tr = fm.Transport(hop_exponent=exponent)
        _, _, w, _, _ = transport_inputs(tr, routes, jnp.ones(4), cap, jnp.zeros(3), jnp.ones(4), jnp.full(4, jnp.inf))
        np.testing.assert_allclose(w, [3.0 ** -exponent, 1, 1, 1], rtol=1e-9)
        rates = fm.maxmin_rates(routes, cap, weights=w)
        long = 10.0 / (1 + 3.0 ** exponent)
        np.testing.assert_allclose(rates, [long, 10 - long, 10 - long, 10 - long], rtol=1e-9)
    # only hops as tight as the flow's tightest count: a hop at twice the fair share adds 2 ** -16, an
    # infinite one nothing; the long flow's third link is now 4x wider, so it has 2 bottlenecks
    tr = fm.Transport(hop_exponent=2.0)
    wide = jnp.array([10.0, 10.0, 40.0, jnp.inf])
    routes = jnp.array([[0, 1, 2, 3], [0, -1, -1, -1], [1, -1, -1, -1], [2, -1, -1, -1]])
    _, _, w, _, _ = transport_inputs(tr, routes, jnp.ones(4), wide, jnp.zeros(4), jnp.ones(4), jnp.full(4, jnp.inf))
    np.testing.assert_allclose(w[0], (2 + 0.25 ** 16) ** -2.0, rtol=1e-12)
    np.testing.assert_allclose(w[1:], 1.0)
    # a hop the flow has to itself holds no queue of competitors: a flow alone on two equal links keeps its
    # weight, and so does one on an infinite link
    _, _, w, _, _ = transport_inputs(tr, jnp.array([[0, 1], [3, -1]]), jnp.ones(2), wide, jnp.zeros(4), jnp.ones(2),
                                     jnp.full(2, jnp.inf))
    np.testing.assert_allclose(w, [1.0, 1.0])
    # F alone on a 10 G NIC (link 0), then a 20 G link (2) shared with G, whose NIC (1) is 40 G: the shared
    # link is each flow's one bottleneck, so max-min's 10 / 10 stands (counting F's NIC would give 4 / 16)
    nic = jnp.array([10.0, 40.0, 20.0])
    routes = jnp.array([[0, 2], [1, 2]])
    _, _, w, _, _ = transport_inputs(tr, routes, jnp.ones(2), nic, jnp.zeros(3), jnp.ones(2), jnp.full(2, jnp.inf))
    np.testing.assert_allclose(w, [1.0, 1.0])
    np.testing.assert_allclose(fm.maxmin_rates(routes, nic, weights=w), [10.0, 10.0], rtol=1e-9)
    g = jax.grad(lambda c: transport_inputs(tr, jnp.array([[3, -1], [3, 0]]), jnp.ones(2), c, jnp.zeros(4),
                                            jnp.ones(2), jnp.full(2, jnp.inf))[2].sum())(wide)
    assert np.all(np.isfinite(np.asarray(g)))


def test_rtt_exponent_shares_a_link_by_rtt_once_congestion_avoidance_has_settled():
    # two flows on link 0; flow 1 also crosses a long link 1 of infinite capacity: RTT 4x flow 0's. Segments of
    # 1e-6 bytes: flow 0's window at its share (5 x 2) is W = 1e7 segments, and the bias forms over about W / 2
    # rounds of its transfer (bytes / (5 x 2) rounds): settled = 1 - exp(-2 x bytes x segment / (5 x 2) ** 2)
    tr = fm.Transport(rtt_exponent=1.0, packet_bytes=1e-9, segment=1e-6)
    cap, lat = jnp.array([10.0, jnp.inf]), jnp.array([1.0, 3.0])
    routes = jnp.array([[0, -1], [0, 1]])

    def weights(size):
        return transport_inputs(tr, routes, jnp.full(2, size), cap, lat, jnp.ones(2), jnp.full(2, jnp.inf))[2]

    w = weights(1e10)  # 200 sawtooth rounds: settled
    np.testing.assert_allclose(w[0] / w[1], 4.0, rtol=1e-9)
    np.testing.assert_allclose(fm.maxmin_rates(routes, cap, weights=w), [8.0, 2.0], rtol=1e-9)
    w = weights(5e7)  # one: 1 - 1/e of the bias
    np.testing.assert_allclose(w[0] / w[1], 4.0 ** (1 - np.exp(-1.0)), rtol=1e-9)
    w = weights(5e3)  # a transfer far shorter than a sawtooth (a long fat pipe): no bias has formed
    np.testing.assert_allclose(w[0] / w[1], 1.0, atol=1e-3)
    # its gradient in the bytes, in closed form: d/ds 4 ** (1 - exp(-s / 5e7)) = ln 4 x 4 ** settled x exp(-s / 5e7)
    # / 5e7 (flow 1, the longest RTT, keeps weight 1 whatever its bytes)
    g = jax.grad(lambda s: (lambda w: w[0] / w[1])(weights(s)))(5e7)
    np.testing.assert_allclose(g, np.log(4.0) * 4.0 ** (1 - np.exp(-1.0)) * np.exp(-1.0) / 5e7, rtol=1e-9)
    # a flow whose every hop is infinite has no share, no window, and no bias: weight 1 and a finite gradient
    routes_inf = jnp.array([[1, -1], [0, 1]])
    w, dw = jax.value_and_grad(lambda s: transport_inputs(tr, routes_inf, jnp.full(2, s), cap, lat, jnp.ones(2),
                                                          jnp.full(2, jnp.inf))[2][0])(5e7)
    assert float(w) == 1.0 and np.isfinite(float(dw))


def test_acks_take_their_bytes_where_links_carry_data_both_ways():
    """Two hosts, a link each way: a flow each way gives every link one flow's data and the other's ACKs,
    54 bytes every 2 segments; one flow alone loses nothing (its ACKs cross an idle link)."""
    tr = fm.Transport(ack_bytes=54.0, ack_every=2.0)
    cap, size = np.array([1.25e9, 1.25e9]), 1e8
    back = fm.fabric.reverse_links([0, 1], [1, 0])
    assert back.tolist() == [1, 0]
    both = fm.completion_times([[0], [1]], [size, size], cap, transport=tr, reverse=back)
    np.testing.assert_allclose(both, size / (1.25e9 * (1 - 54 / (2 * 1448))), rtol=1e-12)
    np.testing.assert_allclose(fm.completion_times([[0], [1]], [size, size], cap, transport=tr), size / 1.25e9,
                               rtol=1e-12)  # no way back given: ACKs are free
    np.testing.assert_allclose(fm.completion_times([[0]], [size], cap, transport=tr, reverse=back), size / 1.25e9,
                               rtol=1e-12)
    # with goodput below 1 the ACK's wire bytes cost their share of payload
    g = 0.964
    both = fm.completion_times([[0], [1]], [size, size], cap, transport=dataclasses.replace(tr, goodput=g),
                               reverse=back)
    np.testing.assert_allclose(both, size / (1.25e9 * g * (1 - g * 54 / (2 * 1448))), rtol=1e-12)
    # the gradient through the ACK load matches finite differences
    _check_gradients(np.array([[0], [1], [0]]), np.array([1e8, 5e7, 2e7]), cap, np.array([1e-6, 2e-6]),
                     fm.incidence(np.array([[0], [1], [0]]), 2), tr, reverse=back)


def test_reverse_links_and_bad_reverse_input():
    assert fm.fabric.reverse_links([0, 1, 1, 2, 0], [1, 0, 2, 1, 1]).tolist() == [1, 0, 3, 2, 1]  # first of twins
    assert fm.fabric.reverse_links([0, 1], [1, 2]).tolist() == [-1, -1]
    assert fm.fabric.reverse_links([], []).tolist() == []
    with pytest.raises(ValueError, match=r"reverse_links: src and dst need one node per link each"):
        fm.fabric.reverse_links([0, 1], [1])
    with pytest.raises(ValueError, match=r"reverse_links: node ids must be >= 0, got -1"):
        fm.fabric.reverse_links([-1, 0], [0, -1])
    tr = PROFILES["newreno"]
    with pytest.raises(ValueError, match=r"reverse: expected int\[2\]"):
        fm.completion_times([[0]], [1.0], [1.0, 1.0], transport=tr, reverse=[1])
    with pytest.raises(ValueError, match=r"reverse: expected int\[2\]"):
        fm.completion_times([[0]], [1.0], [1.0, 1.0], transport=tr, reverse=[1.0, 0.0])
    with pytest.raises(ValueError, match=r"reverse\[1\]: must name a link in \[0, 2\) or be -1, got 2"):
        fm.completion_times([[0]], [1.0], [1.0, 1.0], transport=tr, reverse=[1, 2])


def test_gradients_match_finite_differences():
    routes = np.array([[0, 1], [1, 2], [0, 2], [1, -1]])
    sizes = np.array([4e6, 2e6, 3e6, 1e6])
    cap = np.array([1.25e9, 1.0e9, 1.5e9])
    lat = np.array([2e-6, 5e-6, 1e-6])
    inc = fm.incidence(routes, 3)
    tr = dataclasses.replace(PROFILES["newreno"], window=2e5)
    _check_gradients(routes, sizes, cap, lat, inc, tr)


@pytest.mark.parametrize("outlast, regrows", [(False, [True, False, False, True, False]),
                                             (True, [True, False, False, False, False])])
def test_gradients_match_finite_differences_through_ramps_and_contention(outlast, regrows):
    # every term on: flows 1, 2 and 4 end inside the ramp after marks (100 km-scale latency), flow 0 outlasts it,
    # flows 0 and 3 regrow over every byte (flow 0 alone over the bytes it sends after the others, the largest
    # on its most crowded link), links are contended;
    # link 3 is infinite (a link without a rate passes no NaN back), and no flow crosses link 4 (an unused link
    # passes none back either)
    routes = np.array([[0, 1, 3], [1, 2, -1], [0, 2, -1], [1, -1, -1], [2, 0, -1]])
    sizes = np.array([4e7, 2e6, 3e7, 1e6, 5e6])
    cap = np.array([1.25e9, 1.0e9, 1.5e9, np.inf, 2e9])
    lat = np.array([2e-4, 5e-6, 3e-4, 1e-6, 1e-4])
    # (K at a 20th of a port's BDP, so that the cut falls below the windows of flows that share ports)
    tr = dataclasses.replace(CONTENDED, contention=0.5, contention_flows=2.0, mark_packets=2.0, mark_bdp=0.05,
                             regrow_outlast=outlast)
    grown, shrunk, _, capped, _ = transport_inputs(tr, routes, sizes, cap, lat, jnp.ones(5), jnp.full(5, jnp.inf))
    np.testing.assert_array_equal(np.isfinite(np.asarray(capped)), [False, True, True, False, True])  # the ramp
    np.testing.assert_array_equal(np.asarray(grown - sizes) > 0, regrows)  # regrowth
    # contention takes capacity from links 0 and 2, not from link 1, where flow 3 is free of other hops
    shrunk = np.asarray(shrunk) / (cap * tr.goodput)
    assert shrunk[0] < 1 and shrunk[2] < 1 and shrunk[1] == 1 and np.isnan(shrunk[3])
    _check_gradients(routes, sizes, cap, lat, fm.incidence(routes, 5), tr)


def test_gradients_stay_finite_without_latency_or_packets():
    # no latency and no packets: every RTT is 0, so the ramps have nothing to act on, and no NaN may leak
    tr = dataclasses.replace(PROFILES["dctcp"], packet_bytes=0.0)
    routes, sizes, cap = np.array([[0, 1], [1, -1]]), np.array([2e6, 1e6]), np.array([1e9, 2e9])
    g = jax.grad(lambda c: jnp.sum(fm.completion_times(routes, sizes, c, transport=tr)))(cap)
    assert np.all(np.isfinite(np.asarray(g))) and float(jnp.sum(jnp.abs(g))) > 0
    # a flow with an empty route (at its cap) passes no NaN back through any term, its weight included
    routes, sizes = np.array([[0, 1], [1, -1], [-1, -1]]), np.array([2e6, 1e6, 5e5])
    limit = np.array([np.inf, np.inf, 1e9])
    for name in PROFILES:
        g = jax.grad(lambda c, s, w: jnp.sum(fm.completion_times(routes, s, c, latency=[1e-4, 1e-4], weights=w,
                                                                 rate_limit=limit, transport=name)),
                     argnums=(0, 1, 2))(cap, sizes, jnp.ones(3))
        assert all(np.all(np.isfinite(np.asarray(x))) for x in g), (name, g)


def _check_gradients(routes, sizes, cap, lat, inc, tr, reverse=None):
    def f(c, la, s):
        return jnp.sum(fm.completion_times(routes, s, c, latency=la, incidence=inc, transport=tr,
                                           reverse=reverse) ** 2)

    grads = jax.grad(f, argnums=(0, 1, 2))(cap, lat, sizes)
    for arg, (x, g) in enumerate(zip((cap, lat, sizes), grads)):
        assert np.all(np.isfinite(g))
        for i in range(x.shape[0]):
            if not np.isfinite(x[i]):  # a link without a rate: no difference to take, and no sensitivity
                assert g[i] == 0
                continue
            h = 1e-6 * x[i]
            up, dn = x.copy(), x.copy()
            up[i] += h
            dn[i] -= h
            args_up = [cap, lat, sizes]
            args_dn = [cap, lat, sizes]
            args_up[arg], args_dn[arg] = up, dn
            fd = (f(*args_up) - f(*args_dn)) / (2 * h)
            # the difference's rounding floor: float64's eps x |f| / h = 2.2e-10 |f| / x
            np.testing.assert_allclose(g[i], fd, rtol=1e-4, atol=1e-9 * abs(float(f(cap, lat, sizes))) / x[i])


def test_options_carry_a_profile():
    assert st.Options(transport="dctcp").transport is PROFILES["dctcp"]
    assert st.Options(transport="tcp") == st.Options(transport="newreno")
    with pytest.raises(ValueError, match="options.transport: unknown profile 'x'"):
        st.Options(transport="x")


def _one_leaf(n, bandwidth, latency, scale_up=None):
    """n GPUs on one leaf switch (scale-out links, where a transport profile runs)."""
    from flowmodel import fabric as fb

    clos = fb.Clos(tiers=2, gpus_per_leaf=n, leaves_per_pod=1, spines_per_pod=1, nic_bandwidth=bandwidth,
                   latency=latency)
    return fb.compile_fabric(fb.build(fb.Fleet(sites=(fb.Site("a", scale_out=clos, scale_up=scale_up),))))


def test_the_profile_leaves_scale_up_links_and_their_flows_alone():
    """NVLink-class links carry no TCP: under a profile a flow that stays in its scale-up domain keeps its
    fluid inputs and its links their capacity, and a flow over the scale-out fabric beside it gets the
    same inputs as without that flow."""
    from flowmodel import fabric as fb
    from flowmodel import routing as rt

    # (NVLink's latency above the NIC's, so that its flows hold the longest RTT, which they must not set)
    network, info = _one_leaf(4, 1.25e9, 1e-6, fb.ScaleUp(size=2, bandwidth=2.5e9, latency=1e-5))
    assert set(info.tier[info.packet_links].tolist()) == {fb.Tier.NIC, fb.Tier.LEAF_SPINE}
    assert not info.packet_links[info.tier == fb.Tier.SCALE_UP].any()
    router = rt.Router(info)
    # two flows on one NVLink (each would regrow to it) beside one over the NIC
    both = st.route_phase(fm.traffic.Phase(np.array([0, 0, 0]), np.array([1, 1, 2]), np.array([8e6, 8e6, 8e6]), 1),
                          router)
    assert both.domain == "scale_out"
    routes, sizes0 = np.asarray(both.sub.routes), np.asarray(both.sub.sizes(both.sizes))
    up = info.tier == fb.Tier.SCALE_UP
    stays = np.all(np.where(routes >= 0, up[np.maximum(routes, 0)], True), axis=1)  # 0 -> 1 in its domain
    assert stays.any() and not stays.all()
    cap, lat = network.capacity, network.latency

    def inputs(name, keep, mask=info.packet_links):  # with a window: a cap where the profile runs
        F = int(keep.sum())
        return transport_inputs(PROFILES[name].with_window(1e5), routes[keep], sizes0[keep], cap, lat, jnp.ones(F),
                                jnp.full(F, jnp.inf), info.reverse, packet_links=mask)

    for name in PROFILES:
        sizes, cap_t, weights, limit, delay = inputs(name, np.ones(len(routes), bool))
        np.testing.assert_array_equal(np.asarray(cap_t)[up], np.asarray(cap)[up])
        assert np.all(np.asarray(cap_t)[~up] < np.asarray(cap)[~up])  # goodput on the scale-out links
        np.testing.assert_array_equal(np.asarray(sizes)[stays], sizes0[stays])
        assert np.all(np.asarray(weights)[stays] == 1.0) and np.all(np.asarray(delay)[stays] == 0.0)
        assert not np.isfinite(np.asarray(limit)[stays]).any()
        alone = inputs(name, ~stays)
        for got, want in zip((sizes, weights, limit, delay), (alone[0], alone[2], alone[3], alone[4])):
            np.testing.assert_allclose(np.asarray(got)[~stays], np.asarray(want), rtol=1e-12)
        assert np.all(np.asarray(delay)[~stays] > 0)
        # every link a packet link: the scale-up flow pays the profile too
        every = inputs(name, np.ones(len(routes), bool), None)
        assert np.all(np.asarray(every[4])[stays] > 0) and np.all(np.asarray(every[1])[up] < np.asarray(cap)[up])
        assert np.all(np.isfinite(np.asarray(every[3])[stays]))  # the window's cap
        if name != "dctcp":  # loss-based regrowth over every byte: the NVLink pair would regrow
            assert np.all(np.asarray(every[0])[stays] > sizes0[stays])
    # the step time: a phase inside the domain times the same under every profile
    inside = st.route_phase(fm.traffic.Phase(np.array([0, 1]), np.array([1, 0]), np.array([8e6, 8e6]), 1), router)
    assert inside.domain == "scale_up"
    bare = float(st.phase_time(inside, cap, lat))
    for name in PROFILES:
        assert float(st.phase_time(inside, cap, lat, st.Options(transport=name))) == bare
        assert float(st.phase_time(both, cap, lat, st.Options(transport=name))) > float(st.phase_time(both, cap, lat))
    with pytest.raises(ValueError, match=r"packet_links: expected bool\[2\]"):
        fm.completion_times([[0]], [1.0], [1.0, 1.0], transport="dctcp", packet_links=[1, 0])
    with pytest.raises(ValueError, match=r"packet_links: expected bool\[2\]"):  # traced: its shape is known
        jax.jit(lambda m: fm.completion_times([[0]], [1.0], [1.0, 1.0], transport="dctcp", packet_links=m))(
            jnp.array([True]))


def test_packet_terms_read_a_flows_packet_hops_only():
    """A flow over a host link (no TCP) and a NIC: its host link bounds its rate, but another flow on that host
    link is no second TCP bottleneck: the weights, contention and cuts are those of private host links."""
    cap, lat = np.full(3, 1.25e9), np.array([0.0, 1e-6, 1e-6])
    sizes = jnp.full(4, 8e6)
    shared = np.array([[0, 1], [0, 2], [1, -1], [2, -1]])  # link 0, off the mask, carries flows 0 and 1
    private = np.array([[0, 1], [3, 2], [1, -1], [2, -1]])
    for name in PROFILES:
        got = transport_inputs(PROFILES[name], shared, sizes, cap, lat, jnp.ones(4), jnp.full(4, jnp.inf),
                               packet_links=np.array([False, True, True]))
        want = transport_inputs(PROFILES[name], private, sizes, np.append(cap, 1.25e9), np.append(lat, 0.0),
                                jnp.ones(4), jnp.full(4, jnp.inf), packet_links=np.array([False, True, True, False]))
        for a, b in zip((got[0], got[2], got[3], got[4]), (want[0], want[2], want[3], want[4])):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1])[:3], rtol=1e-12)
        # without the mask the shared host link is a second bottleneck of flows 0 and 1
        every = transport_inputs(PROFILES[name], shared, sizes, cap, lat, jnp.ones(4), jnp.full(4, jnp.inf))
        assert np.all(np.asarray(every[2])[:2] < np.asarray(got[2])[:2])


def test_an_astra_imports_scale_up_dimension_runs_no_transport():
    from flowmodel import fabric as fb
    from flowmodel.fabric import _astra

    spec = {"topology": ["Ring", "Switch"], "npus_count": [4, 2], "bandwidth": [200, 25], "latency": [500, 1000]}
    _, info = fb.compile_fabric(_astra.from_astra(spec))
    assert set(info.tier.tolist()) == {"dim0", "dim1"}
    np.testing.assert_array_equal(info.packet_links, info.tier == "dim1")


def test_phase_time_applies_the_profile_exact_and_smooth():
    from flowmodel import routing as rt
    from flowmodel import traffic as tr

    network, info = _one_leaf(8, 1.25e9, 1e-6)
    coll = tr.reduce_scatter(np.arange(8)[None, :], 8e6)
    rp = st.route_phase(coll.phases[0], rt.Router(info))
    bare = float(st.phase_time(rp, network.capacity, network.latency))
    prof = float(st.phase_time(rp, network.capacity, network.latency, st.Options(transport="cubic")))
    # the profile can only add: goodput below 1 and a start delay
    assert prof > bare
    delay = transport_inputs(PROFILES["cubic"], rp.sub.routes, rp.sub.sizes(rp.sizes), network.capacity,
                             network.latency, jnp.ones(8), jnp.full(8, jnp.inf), info.reverse)[4]
    per_flow = float(rp.sub.sizes(rp.sizes)[0])
    # a ring: each GPU's uplink also carries the ACKs of the flow it receives, 54 bytes every 2 segments
    g = PROFILES["cubic"].goodput
    goodput_time = per_flow / (float(network.capacity[rp.sub.routes[0, 0]]) * g * (1 - g * 54 / (2 * 1448)))
    np.testing.assert_allclose(prof - bare, float(delay.max()) + goodput_time - per_flow /
                               float(network.capacity[rp.sub.routes[0, 0]]), rtol=1e-6)
    smooth = st.Options(transport="cubic", rates="smooth")
    g = jax.grad(lambda c: st.phase_time(rp, c, network.latency, smooth))(network.capacity)
    assert np.all(np.isfinite(np.asarray(g))) and float(jnp.sum(jnp.abs(g))) > 0


def test_the_step_time_takes_the_acks_on_fabric_links_and_none_on_appended_ones():
    """A phase with appended links (a GPU's host link, ``steptime._attached``): the fabric's links carry
    each flow's ACKs back (two GPUs sending to each other over a switch: every link one flow's data and
    the other's ACKs), an appended link has no way back and keeps its capacity."""
    from flowmodel.steptime._attached import Attached

    network, info = _one_leaf(2, 1e9, 0.0)
    att = Attached.of(info, [0, 1], host_bandwidth=1e9)
    size = 1e8

    def path(a, b):  # GPU a -> its switch -> GPU b
        up = int(np.flatnonzero(info.src == info.gpus[a])[0])
        return [up, int(np.flatnonzero((info.src == info.dst[up]) & (info.dst == info.gpus[b]))[0])]

    paths = [path(0, 1), path(1, 0), [att.host_in(0)]]
    options = st.Options(transport=fm.Transport(ack_bytes=54.0, ack_every=2.0))
    both = att.phase([0, 1], paths[:2], [size, size])
    assert float(st.phase_time(both, network.capacity, network.latency, options)) == pytest.approx(
        size / (1e9 * (1 - 54 / (2 * 1448))), rel=1e-9)
    host = att.phase([0], paths[2:], [size])  # ACKs of a host link's flow have nowhere to go: no loss
    assert float(st.phase_time(host, network.capacity, network.latency, options)) == pytest.approx(size / 1e9,
                                                                                                     rel=1e-9)
    one = att.phase([0], paths[:1], [size])  # one flow: its ACKs cross links that carry no data
    assert float(st.phase_time(one, network.capacity, network.latency, options)) == pytest.approx(size / 1e9,
                                                                                                    rel=1e-9)
