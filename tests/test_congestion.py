"""Congestion and latency models: closed forms, limits, finiteness and gradients at saturation."""

import jax
import jax.numpy as jnp
import numpy as np
from conftest import random_instance

import flowmodel as fm
from flowmodel import fabric as fb
from flowmodel import routing as rt
from flowmodel import steptime as st
from flowmodel import traffic as tr


def test_window_limited_rate_long_haul():
    # 1,000 km at 4.9 us/km one way: RTT 9.8 ms; 64 MB in flight -> 6.53 GB/s
    routes = np.array([[0, 1], [1, -1], [2, -1]])
    latency = np.array([4.9e-3, 0.0, 0.0])
    rate = fm.window_limited_rate(routes, latency, 64e6)
    np.testing.assert_allclose(rate[0], 64e6 / 9.8e-3)
    assert np.isinf(rate[1]) and np.isinf(rate[2])
    # as a rate_limit, the window caps the long-haul flow below the link capacity
    rates = fm.maxmin_rates(routes, np.array([50e9, 50e9, 50e9]), rate_limit=rate)
    np.testing.assert_allclose(rates[:2], [64e6 / 9.8e-3, 50e9 - 64e6 / 9.8e-3])


def test_queueing_delay_limits_and_gradient_at_saturation():
    cap = 50e9
    pkt = 4096.0
    low = fm.queueing_delay(0.01 * cap, cap, packet_bytes=pkt)
    np.testing.assert_allclose(low, (pkt / cap) * 0.01 / 0.99, rtol=1e-3)  # M/M/1 at low load
    rhos = jnp.linspace(0.0, 1.2, 25)
    d = fm.queueing_delay(rhos * cap, cap, packet_bytes=pkt)
    assert np.all(np.diff(d) >= 0) and np.all(np.isfinite(d))
    np.testing.assert_allclose(d[-1], 1000 * pkt / cap)  # full buffer beyond saturation
    g = jax.vmap(jax.grad(lambda load: fm.queueing_delay(load, cap, packet_bytes=pkt)))(rhos * cap)
    assert np.all(np.isfinite(g))


def test_scheduled_bound_is_a_lower_bound_and_tight_on_one_link():
    rng = np.random.default_rng(0)
    for _ in range(20):
        routes, cap, w, _ = random_instance(rng)
        sizes = rng.uniform(1, 100, w.size)
        makespan = float(jnp.max(fm.completion_times(routes, sizes, cap)))
        bound = float(fm.scheduled_bound(routes, sizes, cap))
        assert bound <= makespan * (1 + 1e-12)
    sizes = np.array([1.0, 2.0, 3.0])
    one = np.zeros((3, 1), np.int32)
    np.testing.assert_allclose(fm.scheduled_bound(one, sizes, np.array([2.0])),
                               jnp.max(fm.completion_times(one, sizes, np.array([2.0]))))


def test_soft_max_converges_to_max():
    x = jnp.array([1.0, 3.0, 2.5, 2.9])
    gaps = [float(fm.soft_max(x, t)) - 3.0 for t in (1.0, 0.1, 0.01, 0.001)]
    assert all(0 <= b < a for a, b in zip(gaps, gaps[1:]))
    assert gaps[-1] < 1e-3 * np.log(4) + 1e-12


def test_route_latency_and_rtt_weights():
    routes = np.array([[0, 1], [1, -1]])
    lat = np.array([1e-3, 2e-3])
    np.testing.assert_allclose(fm.route_latency(routes, lat), [3e-3, 2e-3])
    np.testing.assert_allclose(fm.rtt_weights(routes, lat), [1 / 3e-3, 1 / 2e-3])


# --- the step-time switch: steptime.Congestion ---------------------------------------------------


def _two_sites():
    clos = fb.Clos(tiers=2, gpus_per_leaf=2, leaves_per_pod=1, spines_per_pod=1)  # 2 GPUs per site
    fleet = fb.Fleet(sites=(fb.Site("a", scale_up=fb.ScaleUp(size=2), scale_out=clos),
                            fb.Site("b", scale_up=fb.ScaleUp(size=2), scale_out=clos)),
                     long_haul=(fb.LongHaul("a", "b", capacity=100e9, length_km=1000.0),))
    network, info = fb.compile_fabric(fb.build(fleet))
    return network, info, rt.Router(info)


def test_window_caps_a_long_haul_transfer_at_window_over_rtt():
    network, info, router = _two_sites()
    rp = st.route_phase(tr.send_recv([0], [2], 1e9).phases[0], router)
    lat = float(fm.route_latency(jnp.asarray(rp.sub.routes), network.latency)[0])
    assert lat > 4.9e-3
    plain = st.phase_time(rp, network.capacity, network.latency)
    np.testing.assert_allclose(plain, 1e9 / 50e9 + lat, rtol=1e-9)  # the 50 GB/s NIC is the bottleneck
    window = 64e6
    capped = st.phase_time(rp, network.capacity, network.latency, st.Options(congestion=st.Congestion(window=window)))
    np.testing.assert_allclose(capped, 1e9 / (window / (2 * lat)) + lat, rtol=1e-9)
    huge = st.phase_time(rp, network.capacity, network.latency, st.Options(congestion=st.Congestion(window=1e12)))
    np.testing.assert_allclose(huge, plain, rtol=1e-12)  # a window above the BDP changes nothing


def test_window_is_shared_by_a_flows_paths():
    network, info, router = _two_sites()
    ph = tr.send_recv([0], [2], 1e9).phases[0]
    cong = st.Congestion(window=32e6)
    t_ecmp = st.phase_time(st.route_phase(ph, router, "ecmp"), network.capacity, network.latency,
                           st.Options(congestion=cong))
    t_qp = st.phase_time(st.route_phase(ph, router, "qp_scaling", qps=4), network.capacity, network.latency,
                         st.Options(congestion=cong))
    np.testing.assert_allclose(t_qp, t_ecmp, rtol=1e-9)  # 4 queue pairs, each a quarter of the window


def test_queueing_adds_the_full_buffer_delay_on_saturated_links():
    fleet = fb.Fleet(sites=(fb.Site("a", scale_up=fb.ScaleUp(size=2, bandwidth=400e9, latency=0.0)),))
    network, info = fb.compile_fabric(fb.build(fleet))
    rp = st.route_phase(tr.send_recv([0], [1], 1e9).phases[0], rt.Router(info))
    buffer = 4e6
    cong = st.Congestion(queueing=True, buffer_bytes=buffer)
    t = st.phase_time(rp, network.capacity, network.latency, st.Options(congestion=cong))
    # the flow fills both its links (GPU -> switch -> GPU): each is at utilisation 1, delay buffer / c
    np.testing.assert_allclose(t, 1e9 / 400e9 + 2 * buffer / 400e9, rtol=1e-9)
    assert float(st.phase_time(rp, network.capacity, network.latency)) < float(t)


def test_congestion_in_step_time_is_monotone_and_differentiable():
    clos = fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=1, spines_per_pod=1)  # 8 GPUs per site
    fleet = fb.Fleet(sites=(fb.Site("a", scale_up=fb.ScaleUp(size=8), scale_out=clos),
                            fb.Site("b", scale_up=fb.ScaleUp(size=8), scale_out=clos)),
                     long_haul=(fb.LongHaul("a", "b", capacity=200e9, length_km=500.0),))
    network, info = fb.compile_fabric(fb.build(fleet))
    model = tr.Model(name="small", layers=4, hidden=1024, ffn_hidden=4096, heads=8, kv_heads=8, vocab=32000,
                     seq_len=2048)
    job = tr.Training(model, tr.Parallelism(tp=8, dp=2), global_batch=8)
    plan = st.plan_training(job, info, rt.Router(info))
    times = [float(st.step_time(plan, network, st.Options(congestion=c)).step_time)
             for c in (None, st.Congestion(window=256e6), st.Congestion(window=16e6),
                       st.Congestion(window=16e6, queueing=True))]
    assert times[0] <= times[1] < times[2] < times[3]

    cong = st.Congestion(window=16e6, queueing=True)

    def f(scale):
        net = fb.Network(capacity=network.capacity * scale, latency=network.latency * scale)
        return st.step_time(plan, net, st.Options(congestion=cong)).step_time

    g = jax.grad(f)(1.0)
    h = 1e-6
    fd = (f(1.0 + h) - f(1.0 - h)) / (2 * h)
    assert np.isfinite(g) and abs(g - fd) <= 1e-4 * abs(fd)
