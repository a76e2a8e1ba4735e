"""The ns-3 peer: input checks (no ns-3 needed), and one small case against the fluid model (slow)."""

import os
import sys

import numpy as np
import pytest

import flowmodel as fm
from flowmodel.peers import ns3

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "experiments", "validation"))
import cases  # noqa: E402

_AVAILABLE = None


def _need_ns3():
    global _AVAILABLE
    if _AVAILABLE is None:
        _AVAILABLE = ns3.available()
    if not _AVAILABLE:
        if os.environ.get("CI"):
            raise RuntimeError("ns-3 is required in CI: pip install ns3==3.44.post0")
        pytest.skip("ns-3 not installed (pip install 'flowmodel[ns3]', i.e. ns3==3.44.post0)")


def _back(case):
    """Each link's way back, for the profile's ACKs (as experiments/validation runs it)."""
    return fm.fabric.reverse_links(case.link_src, case.link_dst)


def test_bad_input_names_the_field():
    c = cases.dumbbell()
    args = (c.routes, c.sizes, c.capacity, c.link_src, c.link_dst)
    with pytest.raises(ValueError, match="variant: must be one of newreno, cubic, dctcp, fqcodel, got 'bbr'"):
        ns3.instance(*args, variant="bbr")
    with pytest.raises(ValueError, match=r"routes\[0\]: links \[0, 3\] do not form a path"):
        ns3.instance(np.array([[0, 3]]), c.sizes[:1], *args[2:])
    cap = c.capacity.copy()
    cap[2] = np.inf
    with pytest.raises(ValueError, match=r"capacity\[2\]: ns-3 links need a finite rate > 0"):
        ns3.instance(c.routes, c.sizes, cap, c.link_src, c.link_dst)
    with pytest.raises(ValueError, match=r"sizes: expected shape \(4,\)"):
        ns3.instance(c.routes, c.sizes[:2], *args[2:])
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match=r"ack_every: must be an integer >= 1 \(segments per ACK\), got"):
            ns3.instance(*args, ack_every=bad)


def test_the_suite_and_its_split_are_fixed():
    # the profiles are fitted on the fit half only: moving a case between halves must show up here
    split = {c.name: c.split for c in cases.all_cases()}
    assert split == {
        "dumbbell": "fit", "parking_lot": "held", "leafspine_2to1": "fit", "incast_8to1": "fit",
        "alltoall_8": "held", "ring_switch": "fit", "ring_clos": "held", "longhaul_100km": "held",
        "longhaul_1000km": "fit", "longhaul_2000km": "held", "training_tp4_dp4": "held",
        "leafspine_4to1": "fit", "clos3_permutation": "held", "mixed_rtt": "fit", "alltoall_16": "fit",
        "alltoall_32": "held", "incast_32to1": "held", "longhaul_mixed_rtt": "held"}
    for c in cases.all_cases():  # every route is a path of the case's links
        hops = [r[r >= 0] for r in c.routes]
        assert all(np.all(c.link_dst[h[:-1]] == c.link_src[h[1:]]) for h in hops), c.name
    a2a = cases.all_to_all(32, "held", 0.125e6)
    assert a2a.routes.shape[0] == 32 * 31


def test_channels_pair_each_link_with_its_reverse():
    channel, end, ends = ns3._channels(np.array([0, 1, 1, 2, 0]), np.array([1, 0, 2, 1, 1]))
    assert channel.tolist() == [0, 0, 1, 1, 2]  # the second 0->1 link has no reverse left: its own channel
    assert end.tolist() == [0, 1, 0, 1, 0]
    assert len(ends) == 3


@pytest.mark.slow
@pytest.mark.ns3
def test_dumbbell_matches_the_fluid_model_under_the_dctcp_profile():
    _need_ns3()
    c = cases.dumbbell()
    got = ns3.completion_times(c.routes, c.sizes, c.capacity, c.link_src, c.link_dst, latency=c.latency,
                               variant="dctcp", timeout=300)
    assert np.all(np.isfinite(got.finish)) and got.wall_s > 0
    fluid = np.asarray(fm.completion_times(c.routes, c.sizes, c.capacity, latency=c.latency, transport="dctcp",
                                           reverse=_back(c)))
    # makespan: measured +-0.1% with the fitted profile (README, "How accurate is it")
    np.testing.assert_allclose(fluid.max(), got.finish.max(), rtol=0.03)
    # nothing finishes before the bytes could cross the bottleneck at the TCP goodput
    assert got.finish.max() >= c.sizes.sum() / (1.25e9 * 1448 / 1502)


@pytest.mark.slow
@pytest.mark.ns3
def test_dctcps_incast_loss_is_its_delayed_acks():
    """8-to-1 incast under DCTCP: with an ACK every 2 segments (Linux's, and the suite's) ns-3 loses 7% to
    the goodput bound and the equal flows finish 1.7 to 7.2 ms apart; with an ACK per segment it runs at
    the bound and they finish together (docs/accuracy.md)."""
    _need_ns3()
    c = cases.incast()
    bound = c.sizes.sum() / (1.25e9 * 1448 / 1502)  # every byte through the receiver's port at TCP goodput
    got = {k: ns3.completion_times(c.routes, c.sizes, c.capacity, c.link_src, c.link_dst, latency=c.latency,
                                   variant="dctcp", ack_every=k, timeout=300).finish for k in (1, 2)}
    assert got[2].max() > 1.05 * bound and got[2].min() < 0.5 * got[2].max()
    assert got[1].max() == pytest.approx(bound, rel=0.01) and got[1].min() > 0.95 * got[1].max()


@pytest.mark.slow
@pytest.mark.ns3
def test_a_contended_clos_ring_step_within_five_percent_under_the_dctcp_profile():
    _need_ns3()
    c = cases.ring_clos()  # 8 flows over 4 leaves and 2 spines: several share each spine link
    loads = np.bincount(c.routes[c.routes >= 0], minlength=c.capacity.size)
    assert loads.max() >= 2  # the case is contended, not 8 private paths
    got = ns3.completion_times(c.routes, c.sizes, c.capacity, c.link_src, c.link_dst, latency=c.latency,
                               variant="dctcp", timeout=300)
    assert np.all(np.isfinite(got.finish))
    fluid = np.asarray(fm.completion_times(c.routes, c.sizes, c.capacity, latency=c.latency))
    profiled = np.asarray(fm.completion_times(c.routes, c.sizes, c.capacity, latency=c.latency, transport="dctcp",
                                              reverse=_back(c)))
    # docs/accuracy.md: pure fluid -7.1%, the DCTCP profile -1.5% on this held-out case
    assert fluid.max() < profiled.max() < got.finish.max()
    np.testing.assert_allclose(profiled.max(), got.finish.max(), rtol=0.05)


@pytest.mark.slow
@pytest.mark.ns3
def test_a_three_tier_clos_permutation_within_five_percent_under_the_dctcp_profile():
    _need_ns3()
    c = cases.clos3_permutation()  # held out: 16 cross-pod flows, 2:1 at aggregation, up to 4 flows a link
    loads = np.bincount(c.routes[c.routes >= 0], minlength=c.capacity.size)
    assert loads.max() >= 3
    got = ns3.completion_times(c.routes, c.sizes, c.capacity, c.link_src, c.link_dst, latency=c.latency,
                               variant="dctcp", timeout=300)
    fluid = np.asarray(fm.completion_times(c.routes, c.sizes, c.capacity, latency=c.latency))
    profiled = np.asarray(fm.completion_times(c.routes, c.sizes, c.capacity, latency=c.latency, transport="dctcp",
                                              reverse=_back(c)))
    # docs/accuracy.md: pure fluid -9.1%; the profile's contention terms bring it within 5%
    assert fluid.max() < profiled.max()
    np.testing.assert_allclose(profiled.max(), got.finish.max(), rtol=0.05)


@pytest.mark.slow
@pytest.mark.ns3
def test_dctcp_over_100_km_follows_the_marking_ramp():
    _need_ns3()
    c = cases.long_haul(100, "held")  # held out; the ramp is physics (2 segments, +1 per RTT), fitted nowhere
    got = ns3.completion_times(c.routes, c.sizes, c.capacity, c.link_src, c.link_dst, latency=c.latency,
                               variant="dctcp", window=c.window, timeout=300)
    profiled = np.asarray(fm.completion_times(c.routes, c.sizes, c.capacity, latency=c.latency,
                                              transport=fm.transport_profile("dctcp").with_window(c.window),
                                              reverse=_back(c)))
    # the window regrows one segment per RTT after the first marks: 4x the line-rate time, within 5%
    assert got.finish.max() > 3 * c.sizes.sum() / c.capacity[0]
    np.testing.assert_allclose(profiled.max(), got.finish.max(), rtol=0.05)


@pytest.mark.slow
@pytest.mark.ns3
def test_a_parking_lots_long_flow_gets_what_its_three_bottlenecks_leave_it():
    _need_ns3()
    c = cases.parking_lot()  # held out: a 3-hop flow against a one-hop flow on each of its links, 4 MB each
    got = ns3.completion_times(c.routes, c.sizes, c.capacity, c.link_src, c.link_dst, latency=c.latency,
                               variant="dctcp", timeout=300).finish
    fluid = np.asarray(fm.completion_times(c.routes, c.sizes, c.capacity, latency=c.latency))
    profiled = np.asarray(fm.completion_times(c.routes, c.sizes, c.capacity, latency=c.latency, transport="dctcp",
                                              reverse=_back(c)))
    # max-min halves every link, so all four finish together; in ns-3 the one-hop flows finish in about half
    # the time and the long flow last (a standing queue and marks at each of its 3 bottlenecks: weight 3 ** -2)
    assert got[1:].max() < 0.6 * got[0] and fluid[1:].min() > 0.9 * fluid[0]
    np.testing.assert_allclose(profiled, got, rtol=0.05)  # docs/accuracy.md: per-flow within 2.4%
