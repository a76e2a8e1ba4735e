"""Fluid completion times: closed forms, oracle agreement, event batching, gradients, bad input."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import random_instance

import flowmodel as fm
from flowmodel.kernels import _waterfill, event_count
from flowmodel.kernels import fluid as _fluid
from flowmodel.kernels import maxmin as _maxmin
from flowmodel.peers import fattree
from flowmodel.reference import completion_times as oracle


def test_processor_sharing_on_one_link():
    sizes = np.array([4.0, 1.0, 3.0, 2.0])
    finish = fm.completion_times(np.zeros((4, 1), np.int32), sizes, np.array([2.0]))
    # sorted sizes 1,2,3,4 on capacity 2: T_k = T_{k-1} + (s_k - s_{k-1}) (n - k + 1) / C
    np.testing.assert_allclose(finish, [5.0, 2.0, 4.5, 3.5], rtol=1e-12)


def test_latency_delays_activation_and_start_times_stagger():
    routes = np.array([[0, 1], [1, -1]])
    cap, lat = np.array([10.0, 10.0]), np.array([0.5, 0.25])
    finish = fm.completion_times(routes, np.array([10.0, 10.0]), cap, latency=lat, start_times=np.array([0.0, 2.0]))
    # flow 0 active from 0.75 alone at 10 B/s -> done at 1.75; flow 1 active from 2.25 -> done at 3.25
    np.testing.assert_allclose(finish, [1.75, 3.25], rtol=1e-12)


def test_equal_flows_finish_in_one_event():
    # a ring step: 64 equal flows, each on its own link plus a shared spine link
    n = 64
    routes = np.stack([np.arange(n), np.full(n, n)], 1)
    finish, events = fm.completion_events(routes, np.full(n, 1e9), np.full(n + 1, 50e9))
    assert event_count(events) == 1
    np.testing.assert_allclose(finish, np.full(n, 1e9 / (50e9 / n)), rtol=1e-12)


def fat_tree_flows(fabric_seed, seed, F):
    """k=4 fat-tree (heterogeneous capacities), F random host pairs on ECMP paths, log-uniform sizes
    1 MB - 1 GB; also returns the generator for the test's further draws."""
    ft = fattree.fat_tree(4, heterogeneity=0.5, seed=fabric_seed)
    rng = np.random.default_rng(seed)
    src, dst = fattree.random_pairs(ft.num_hosts, F, rng)
    routes = ft.route(src, dst, rng)
    return ft, rng, routes, np.exp(rng.uniform(np.log(1e6), np.log(1e9), F))


@pytest.mark.parametrize("caps, starts, latency", [(0.0, False, False), (0.3, False, False),
                                                     (0.3, True, False), (0.3, True, True)])
def test_matches_oracle_on_random_instances(caps, starts, latency):
    rng = np.random.default_rng(hash((caps, starts, latency)) % 2**32)
    worst = 0.0
    for _ in range(25):
        routes, cap, w, lim = random_instance(rng, caps=caps, empty=0.05)
        F, L = w.size, cap.size
        sizes = rng.uniform(1, 100, F)
        start = rng.uniform(0, 5, F) if starts else None
        lat = rng.uniform(0, 0.5, L) if latency else None
        got = np.asarray(fm.completion_times(routes, sizes, cap, weights=w, rate_limit=lim,
                                             start_times=start, latency=lat))
        want = oracle(routes, sizes, cap, w, lim, start, lat)
        worst = max(worst, float(np.max(np.abs(got - want) / want)))
    assert worst < 1e-9


def test_fat_tree_with_distinct_sizes_matches_oracle():
    ft, rng, routes, sizes = fat_tree_flows(1, 2, 150)
    start = rng.uniform(0, 0.02, 150)
    got = np.asarray(fm.completion_times(routes, sizes, ft.capacity, start_times=start))
    np.testing.assert_allclose(got, oracle(routes, sizes, ft.capacity, start_times=start), rtol=1e-9)


def test_deferred_freezing_with_caps_and_staggered_starts_matches_oracle(monkeypatch):
    # Passes may freeze only 3 flows each: most flows freeze passes after their bottleneck, so re-fills
    # must start at the earliest pass of any link a completed flow crossed while it was active.
    F = 120
    ft, rng, routes, sizes = fat_tree_flows(3, 4, F)
    lim = np.where(rng.random(F) < 0.3, rng.uniform(5e9, 3e10, F), np.inf)
    start = rng.uniform(0, 0.02, F)
    monkeypatch.setattr(_waterfill, "freeze_slots", lambda candidates, degree: min(candidates * degree, 3))
    args = _fluid._prepare_fluid(routes, sizes, ft.capacity, None, lim, start, None, None, True, engine="xla")
    # fresh traces, so that programs compiled with the usual slots are not reused
    structure = jax.jit(lambda *a: _maxmin._forward(*a, _fluid._CANDIDATES, True, "xla")[1])
    st = structure(*args[:2], *args[3:6])
    bneck = np.asarray(st.bottleneck)
    on_link = bneck < ft.capacity.size
    assert (np.asarray(st.pass_of_flow)[on_link] > np.asarray(st.pass_of_link)[bneck[on_link]]).sum() >= 20
    finish, _ = jax.jit(lambda *a: _fluid._simulate(*a, has_caps=True, engine="xla"))(*args[:-2])
    want = oracle(routes, sizes, ft.capacity, rate_limit=lim, start_times=start)
    np.testing.assert_allclose(np.asarray(finish), want, rtol=1e-9)


@pytest.mark.parametrize("rows", [1, 3, 256])
def test_every_way_a_refill_resumes_matches_oracle(monkeypatch, rows):
    # After completions the solve resumes at the earliest completed flow's pass: from a snapshot when
    # that pass has one (rows), else by re-counting the kept flows. Caps move the cap window, equal
    # sizes complete together (many at once), late starts force solves from scratch.
    F = 240
    ft, rng, routes, sizes = fat_tree_flows(5, 6, F)
    sizes[:40] = 3e8  # equal flows: several complete in one event
    limit = np.where(rng.random(F) < 0.3, rng.uniform(2e9, 2e10, F), np.inf)
    start = np.where(rng.random(F) < 0.1, rng.uniform(0, 0.05, F), 0.0)
    monkeypatch.setattr(_fluid, "_SNAPSHOT_ROWS", rows)
    args = _fluid._prepare_fluid(routes, sizes, ft.capacity, None, limit, start, None, None, True, engine="xla")
    simulate = jax.jit(lambda *a: _fluid._simulate(*a, has_caps=True, engine="xla"))  # fresh trace for these rows
    finish, events = simulate(*args[:-2])
    assert event_count(events) > F // 2
    want = oracle(routes, sizes, ft.capacity, rate_limit=limit, start_times=start)
    np.testing.assert_allclose(np.asarray(finish), want, rtol=1e-9)


def test_processor_sharing_with_distinct_sizes_closed_form():
    # 100 flows of distinct sizes on one link: each completion re-fills the link for the others. A pass
    # freezes at most freeze_slots of them, the rest a pass later; the late ones are the smallest, so
    # they complete first, and the re-fill must start at their bottleneck's pass, not their own.
    F = 100
    routes = np.zeros((F, 1), np.int32)
    sizes = np.linspace(2e8, 1e8, F)
    cap = np.array([1e10])
    finish, events = fm.completion_events(routes, sizes, cap)
    np.testing.assert_allclose(np.asarray(finish), oracle(routes, sizes, cap), rtol=1e-9)
    # processor sharing, closed form: the k-th smallest finishes after sum_{j<=k} (s_j - s_{j-1})(F-j+1)/c
    s = np.sort(sizes)
    want = np.cumsum(np.diff(s, prepend=0) * (F - np.arange(F))) / cap[0]
    np.testing.assert_allclose(np.sort(np.asarray(finish)), want, rtol=1e-12)
    assert event_count(events) == F


def test_ring_on_a_symmetric_fabric_matches_oracle():
    # many links tie at the minimum share (more than the candidates a pass examines)
    ft = fattree.fat_tree(4, heterogeneity=0.0)
    n = ft.num_hosts
    src = np.concatenate([np.arange(n), [0, 5]])
    dst = np.concatenate([(np.arange(n) + 1) % n, [9, 14]])
    routes = ft.route(src, dst, np.random.default_rng(0))
    sizes = np.concatenate([np.full(n, 1e8), [3e8, 5e7]])
    limit = np.concatenate([np.full(n, np.inf), [3e10, np.inf]])
    finish, events = fm.completion_events(routes, sizes, ft.capacity, rate_limit=limit)
    want = oracle(routes, sizes, ft.capacity, rate_limit=limit)
    np.testing.assert_allclose(np.asarray(finish), want, rtol=1e-9)
    assert event_count(events) <= 4


def test_dense_path_and_vmap():
    rng = np.random.default_rng(3)
    routes, cap, w, lim = random_instance(rng)
    sizes = rng.uniform(1, 100, w.size)
    sparse = fm.completion_times(routes, sizes, cap, weights=w, engine="xla")
    dense = jax.jit(lambda r: fm.completion_times(r, sizes, cap, weights=w, engine="xla"))(routes)
    np.testing.assert_allclose(dense, sparse, rtol=1e-12)
    caps = cap * rng.uniform(0.5, 1.5, (4, cap.size))
    batched = jax.vmap(lambda c: fm.completion_times(routes, sizes, c, weights=w))(caps)
    for b in range(4):
        np.testing.assert_allclose(batched[b], oracle(routes, sizes, caps[b], w), rtol=1e-9)


def test_inside_jit_with_an_incidence_the_sparse_event_loop_runs():
    F = 120
    ft, rng, routes, sizes = fat_tree_flows(7, 8, F)
    start = rng.uniform(0, 0.02, F)
    inc = fm.incidence(routes, ft.num_links)
    fn = lambda c, r, i: fm.completion_times(r, sizes, c, start_times=start, incidence=i, engine="xla")  # noqa: E731
    # the XLA engine's sparse fill picks its candidate links with top_k; the dense solve has none
    assert "top_k" in str(jax.make_jaxpr(fn)(ft.capacity, routes, inc))
    dense = lambda c, r: fm.completion_times(r, sizes, c, engine="xla")  # noqa: E731
    assert "top_k" not in str(jax.make_jaxpr(dense)(ft.capacity, routes))
    events_fn = lambda c, r, i: fm.completion_events(r, sizes, c, start_times=start, incidence=i,  # noqa: E731
                                                     engine="xla")
    got, events = jax.jit(events_fn)(ft.capacity, routes, inc)
    assert event_count(events) > F // 2
    np.testing.assert_allclose(got, fm.completion_times(routes, sizes, ft.capacity, start_times=start), rtol=1e-12)
    np.testing.assert_allclose(got, oracle(routes, sizes, ft.capacity, start_times=start), rtol=1e-9)
    # the gradient through the jitted call against central differences of the eager one
    a = rng.normal(size=F)
    g = jax.jit(jax.grad(lambda c, r, i: jnp.vdot(a, fn(c, r, i))))(ft.capacity, routes, inc)
    f = lambda c: float(jnp.vdot(a, fm.completion_times(routes, sizes, c, start_times=start)))  # noqa: E731
    v = rng.normal(size=ft.num_links) * ft.capacity
    eps = 1e-7
    fd = (f(ft.capacity + eps * v) - f(ft.capacity - eps * v)) / (2 * eps)
    assert np.all(np.isfinite(g))
    assert abs(float(jnp.vdot(g, v)) - fd) <= 1e-5 * float(jnp.sum(jnp.abs(g * v)))


def test_float32_close_to_float64():
    rng = np.random.default_rng(4)
    routes, cap, w, _ = random_instance(rng)
    sizes = rng.uniform(1, 100, w.size)
    f32 = fm.completion_times(routes, sizes.astype(np.float32), cap.astype(np.float32), weights=w)
    assert f32.dtype == jnp.float32
    np.testing.assert_allclose(f32, oracle(routes, sizes, cap, w), rtol=1e-4)


ARG_NAMES = ("sizes", "capacity", "weights", "rate_limit", "start_times", "latency")


@pytest.mark.parametrize("argnum", range(6))
def test_gradient_matches_central_differences(argnum):
    rng = np.random.default_rng(10 + argnum)
    checked = 0
    for _ in range(8):
        routes, cap, w, lim = random_instance(rng, caps=0.3)
        F, L = w.size, cap.size
        lim = np.where(np.isinf(lim), 1e3, lim)
        lim[rng.random(F) < 0.5] = np.inf
        args = [rng.uniform(1, 100, F), cap, w, lim, rng.uniform(0, 5, F), rng.uniform(0, 0.5, L)]
        a = rng.normal(size=F)

        def f(*xs):
            sizes, c, ww, li, s0, la = xs
            return jnp.vdot(a, fm.completion_times(routes, sizes, c, weights=ww, rate_limit=li, start_times=s0,
                                                   latency=la))

        x = args[argnum]
        v = rng.normal(size=x.shape) * np.where(np.isfinite(x), np.abs(x) + 0.1, 0)
        eps = 1e-7
        plus, minus = list(args), list(args)
        plus[argnum], minus[argnum] = x + eps * v, x - eps * v
        fd = float(f(*plus) - f(*minus)) / (2 * eps)
        g = jax.grad(f, argnums=argnum)(*args)
        assert np.all(np.isfinite(g)), ARG_NAMES[argnum]
        scale = float(jnp.sum(jnp.abs(g) * np.abs(np.nan_to_num(v, posinf=0)))) + 1e-9
        assert abs(float(jnp.vdot(g, np.nan_to_num(v, posinf=0))) - fd) <= 1e-5 * scale, ARG_NAMES[argnum]
        checked += 1
    assert checked == 8


def test_gradient_closed_form_processor_sharing():
    # two flows on one link, sizes s0 < s1: T0 = 2 s0 / C, T1 = (s0 + s1) / C
    def f(c, s):
        return fm.completion_times(np.zeros((2, 1), np.int32), s, c)

    c, s = jnp.array([4.0]), jnp.array([2.0, 6.0])
    jac_c = jax.jacrev(f, argnums=0)(c, s)
    np.testing.assert_allclose(jac_c[:, 0], [-2 * 2.0 / 16, -(8.0) / 16], rtol=1e-12)
    jac_s = jax.jacrev(f, argnums=1)(c, s)
    np.testing.assert_allclose(jac_s, [[0.5, 0.0], [0.25, 0.25]], rtol=1e-12)


@pytest.mark.parametrize("kwargs, match", [
    (dict(sizes=np.array([1.0, -1.0])), r"sizes\[1\] must be > 0, got -1"),
    (dict(sizes=np.array([1.0, np.nan])), r"sizes\[1\] is NaN"),
    (dict(sizes=np.array([1.0])), r"sizes must have shape \(2,\)"),
    (dict(latency=np.array([0.0, -1e-6, 0.0])), r"latency\[1\] must be >= 0"),
    (dict(start_times=np.array([0.0, 1.0, 2.0])), r"start_times must have shape \(2,\)"),
    (dict(start_times=np.array([0.0, np.nan])), r"start_times\[1\] is NaN"),
    (dict(capacity=np.array([1.0, 0.0, 1.0])), r"capacity\[1\] must be > 0"),
])
def test_bad_input(kwargs, match):
    args = dict(sizes=np.array([1.0, 2.0]), capacity=np.array([1.0, 2.0, 3.0]))
    args.update(kwargs)
    sizes, cap = args.pop("sizes"), args.pop("capacity")
    with pytest.raises(ValueError, match=match):
        fm.completion_times(np.array([[0, 1], [1, 2]]), sizes, cap, **args)


def test_a_late_common_start_does_not_strand_flows_on_rounding():
    """Regression: 992 DP ring flows started together at t = 0.3 s. Subtracting rate x (t_next - t) at
    that clock left one flow -1.8e-7 bytes, its completion time fell before the clock and the loop
    stalled until the event bound. Ties now include the clock's resolution and remainders are clamped."""
    case = np.load(os.path.join(os.path.dirname(__file__), "data", "fluid_rounding_case.npz"))
    routes, sizes, capacity = case["routes"].astype(np.int32), case["sizes"], case["capacity"]
    starts = np.full(routes.shape[0], float(case["start"]))
    finish = np.asarray(fm.completion_times(routes, sizes, capacity, start_times=starts))
    oracle = fm.reference.completion_times(routes, sizes, capacity, start_times=starts)
    np.testing.assert_allclose(finish, oracle, rtol=1e-12)
    at_zero = np.asarray(fm.completion_times(routes, sizes, capacity))
    np.testing.assert_allclose(finish - starts, at_zero, rtol=1e-9)
