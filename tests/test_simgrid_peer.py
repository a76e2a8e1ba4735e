"""Cross-check against SimGrid's fluid max-min model (CM02, no cross-traffic, no TCP window)."""

import os

import numpy as np
import pytest

import flowmodel as fm
from flowmodel.peers import fattree, simgrid

pytestmark = [pytest.mark.peer, pytest.mark.slow]

if not simgrid.available():
    if os.environ.get("CI"):
        raise RuntimeError("SimGrid is required in CI: apt-get install python3-simgrid")
    pytest.skip("SimGrid not installed (apt-get install python3-simgrid)", allow_module_level=True)


@pytest.mark.parametrize("k, flows, seed", [(4, 200, 0), (8, 2000, 1)])
def test_rates_match_simgrid_on_random_fat_tree(k, flows, seed):
    ft = fattree.fat_tree(k, heterogeneity=0.5, seed=seed)
    rng = np.random.default_rng(seed)
    src, dst = fattree.random_pairs(ft.num_hosts, flows, rng)
    routes = ft.route(src, dst, rng)
    limit = np.where(rng.random(flows) < 0.2, rng.uniform(5e9, 3e10, flows), np.inf)
    ours = np.asarray(fm.maxmin_rates(routes, ft.capacity, rate_limit=limit))
    theirs, _ = simgrid.maxmin_rates(routes, ft.capacity, rate_limit=limit, endpoints=(src, dst))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)


def test_three_flow_case_matches_simgrid():
    routes = np.array([[0, 1], [1, 2], [0, 2]])
    theirs, _ = simgrid.maxmin_rates(routes, np.array([100.0, 100.0, 60.0]))
    np.testing.assert_allclose(theirs, [70, 30, 30], rtol=1e-5)


@pytest.mark.parametrize("with_latency", [False, True])
def test_completion_times_match_simgrid(with_latency):
    ft = fattree.fat_tree(4, heterogeneity=0.5, seed=5, latency=2e-6 if with_latency else 0.0)
    rng = np.random.default_rng(6)
    src, dst = fattree.random_pairs(ft.num_hosts, 120, rng)
    routes = ft.route(src, dst, rng)
    sizes = np.round(np.exp(rng.uniform(np.log(1e6), np.log(1e9), 120)))
    start = np.where(rng.random(120) < 0.5, rng.uniform(0, 0.01, 120), 0.0)
    # CM02 shares bandwidth in inverse proportion to route latency; rtt_weights reproduces that
    weights = fm.rtt_weights(routes, ft.latency) if with_latency else None
    ours = np.asarray(fm.completion_times(routes, sizes, ft.capacity, weights=weights, start_times=start,
                                          latency=ft.latency))
    theirs, _ = simgrid.completion_times(routes, sizes, ft.capacity, start_times=start, latency=ft.latency,
                                         endpoints=(src, dst))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    ref = fm.reference.completion_times(routes, sizes, ft.capacity, weights=weights, start_times=start,
                                        latency=ft.latency)
    np.testing.assert_allclose(ours, ref, rtol=1e-9)
