"""Congestion and latency models: closed forms, limits, finiteness and gradients at saturation."""

import jax
import jax.numpy as jnp
import numpy as np
from conftest import random_instance

import flowmodel as fm


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
