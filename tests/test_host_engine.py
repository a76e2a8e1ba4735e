"""The compiled CPU engine (``engine="host"``) against the oracle, the certificate and the XLA engine:
rates, structure, events, gradients, jit / vmap batching, and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import random_instance

import flowmodel as fm
from flowmodel.kernels import Engine, event_count
from flowmodel.kernels._engine import engine_for
from flowmodel.peers import fattree
from flowmodel.reference import completion_times as fluid_oracle
from flowmodel.reference import maxmin_rates as oracle
from flowmodel.reference import maxmin_violations


def fat_tree_instance(seed, k=4, F=200, caps=0.2):
    ft = fattree.fat_tree(k, heterogeneity=0.5, seed=seed)
    rng = np.random.default_rng(seed + 1)
    src, dst = fattree.random_pairs(ft.num_hosts, F, rng)
    routes = ft.route(src, dst, rng)
    limit = np.where(rng.random(F) < caps, rng.uniform(1e9, 2e10, F), np.inf)
    return ft, rng, routes, limit


def test_engine_names():
    assert engine_for("host") is Engine.HOST and engine_for(Engine.XLA) is Engine.XLA
    assert engine_for(None) is engine_for("auto") is (Engine.HOST if jax.default_backend() == "cpu" else Engine.XLA)
    with pytest.raises(ValueError, match="engine: must be one of 'auto', 'host', 'xla', got 'gpu'"):
        fm.maxmin_rates([[0]], [1.0], engine="gpu")
    with pytest.raises(ValueError, match="engine: must be one of"):
        fm.completion_times([[0]], [1.0], [1.0], engine="numba")


@pytest.mark.parametrize("seed", range(12))
def test_random_instances_match_oracle_certificate_and_xla(seed):
    rng = np.random.default_rng(seed)
    routes, cap, w, lim = random_instance(rng, 40, 10, 4, caps=0.3, empty=0.1)
    routes[::7] = routes[::7, ::-1]  # -1 padding in front of some routes
    cap[rng.random(cap.size) < 0.1] = np.inf
    lim[np.isinf(lim) & (routes < 0).all(axis=1)] = 1.0
    unbounded = np.isinf(np.where(routes >= 0, np.append(cap, np.inf)[routes], np.inf).min(axis=1)) & np.isinf(lim)
    lim[unbounded] = 2.0  # else the checks refuse the instance (test_bad_input...)
    rates, st = fm.maxmin_structure(routes, cap, weights=w, rate_limit=lim, engine="host")
    rates = np.asarray(rates)
    np.testing.assert_allclose(rates, oracle(routes, cap, w, lim), rtol=1e-12)
    assert maxmin_violations(routes, cap, rates, weights=w, rate_limit=lim) == []
    np.testing.assert_allclose(rates, fm.maxmin_rates(routes, cap, weights=w, rate_limit=lim, engine="xla"),
                               rtol=1e-12)
    # the structure the adjoint replays: each bottleneck reads only flows of earlier passes
    pf, bn, pl = np.asarray(st.pass_of_flow), np.asarray(st.bottleneck), np.asarray(st.pass_of_link)
    L = cap.size
    for f in np.flatnonzero(bn < L):
        assert pf[f] == pl[bn[f]]
        np.testing.assert_allclose(rates[f], w[f] * float(st.share[bn[f]]), rtol=1e-12)
    for link in np.flatnonzero(pl[:L] >= 0):
        on = (routes == link).any(axis=1)
        earlier = on & (pf < pl[link])
        now = on & (pf == pl[link])
        assert not (on & (pf > pl[link])).any()
        np.testing.assert_allclose(float(st.weight_at[link]), w[now].sum(), rtol=1e-12)
        np.testing.assert_allclose(float(st.share[link]) * w[now].sum() + rates[earlier].sum(), cap[link],
                                   rtol=1e-12)
    assert int(st.num_passes) == pf.max() + 1


def test_closed_forms():
    np.testing.assert_allclose(fm.maxmin_rates([[0, 1], [0, -1], [1, -1]], [10.0, 4.0], engine="host"),
                               [2.0, 8.0, 2.0])
    np.testing.assert_allclose(fm.maxmin_rates([[0, -1], [0, -1], [-1, -1]], [10.0],
                                               rate_limit=[2.0, np.inf, 3.0], engine="host"), [2.0, 8.0, 3.0])
    n = 100  # many links tied at the minimum: each is its own step
    np.testing.assert_allclose(fm.maxmin_rates(np.arange(n)[:, None], np.full(n, 10.0), engine="host"),
                               np.full(n, 10.0))


@pytest.mark.parametrize("seed", range(6))
def test_gradients_equal_the_xla_engine_and_central_differences(seed):
    ft, rng, routes, limit = fat_tree_instance(seed)
    w = rng.uniform(0.5, 2, routes.shape[0])
    a = rng.normal(size=routes.shape[0])

    def objective(engine):
        return lambda c, w, lim: jnp.vdot(a, fm.maxmin_rates(routes, c, weights=w, rate_limit=lim, engine=engine))

    args = (jnp.asarray(ft.capacity), jnp.asarray(w), jnp.asarray(limit))
    host = jax.grad(objective("host"), argnums=(0, 1, 2))(*args)
    xla = jax.grad(objective("xla"), argnums=(0, 1, 2))(*args)
    for g, g0 in zip(host, xla):
        np.testing.assert_allclose(g, g0, rtol=1e-9, atol=1e-12 * float(jnp.max(jnp.abs(g0))))
    v = rng.normal(size=ft.num_links) * ft.capacity
    eps = 1e-7
    f = objective("host")
    fd = (f(ft.capacity + eps * v, w, limit) - f(ft.capacity - eps * v, w, limit)) / (2 * eps)
    np.testing.assert_allclose(float(jnp.vdot(host[0], v)), float(fd), rtol=1e-5, atol=1e-9 * abs(float(fd)))


def test_jit_with_traced_routes_and_vmap_reach_the_compiled_solve():
    ft, rng, routes, limit = fat_tree_instance(3)
    caps = ft.capacity * rng.uniform(0.7, 1.3, (6, ft.num_links))
    in_jit = jax.jit(lambda r, c: fm.maxmin_rates(r, c, rate_limit=limit, engine="host"))
    assert "pure_callback" in str(jax.make_jaxpr(in_jit)(routes, caps[0]))
    batched = jax.jit(jax.vmap(lambda c: fm.maxmin_rates(routes, c, rate_limit=limit, engine="host")))(caps)
    # nested vmaps, and vmap over the routes themselves (one solve per scenario)
    nested = jax.vmap(jax.vmap(lambda c: fm.maxmin_rates(routes, c, engine="host")))(caps.reshape(2, 3, -1))
    perm = np.stack([rng.permutation(routes.shape[0]) for _ in range(3)])
    by_routes = jax.vmap(lambda r: fm.maxmin_rates(r, ft.capacity, engine="host"))(routes[perm])
    for b in range(6):
        want = oracle(routes, caps[b], rate_limit=limit)
        np.testing.assert_allclose(batched[b], want, rtol=1e-12)
        np.testing.assert_allclose(in_jit(routes, caps[b]), want, rtol=1e-12)
        np.testing.assert_allclose(nested.reshape(6, -1)[b], oracle(routes, caps[b]), rtol=1e-12)
    for b in range(3):
        np.testing.assert_allclose(by_routes[b], oracle(routes[perm[b]], ft.capacity), rtol=1e-12)
    # a batched gradient: each row is that scenario's own gradient
    a = rng.normal(size=routes.shape[0])
    g = jax.vmap(jax.grad(lambda c: jnp.vdot(a, fm.maxmin_rates(routes, c, engine="host"))))(caps[:3])
    for b in range(3):
        np.testing.assert_allclose(g[b], jax.grad(lambda c: jnp.vdot(a, fm.maxmin_rates(routes, c, engine="xla")))(
            caps[b]), rtol=1e-9, atol=1e-12 * float(jnp.max(jnp.abs(g[b]))))


def test_float32_inputs_give_float32_results_computed_in_float64():
    ft, _, routes, _ = fat_tree_instance(5)
    rates = fm.maxmin_rates(routes, jnp.asarray(ft.capacity, jnp.float32), engine="host")
    assert rates.dtype == jnp.float32
    np.testing.assert_allclose(rates, oracle(routes, ft.capacity), rtol=1e-6)


def test_bad_input_with_checks_off_raises_instead_of_returning_unfrozen_flows():
    # a flow on an infinite link without a cap: refused by the checks; with check=False the solve raises
    with pytest.raises(ValueError, match="rate_limit"):
        fm.maxmin_rates([[0], [1]], [1.0, np.inf], engine="host")
    with pytest.raises(Exception, match="no progress"):
        jax.block_until_ready(fm.maxmin_rates([[0], [1]], [1.0, np.inf], engine="host", check=False))
    with pytest.raises(Exception, match="no progress"):
        jax.block_until_ready(fm.completion_times([[0], [1]], [1.0, 1.0], [1.0, np.inf], engine="host",
                                                  check=False))


# ---- the fluid event loop -----------------------------------------------------------------------------

def fluid_instance(seed, F=150):
    ft, rng, routes, limit = fat_tree_instance(seed, F=F, caps=0.25)
    sizes = np.round(np.exp(rng.uniform(np.log(1e6), np.log(1e8), F)))
    sizes[: F // 5] = 3e7  # equal flows: several complete in one event
    start = np.where(rng.random(F) < 0.3, rng.uniform(0, 5e-3, F), 0.0)
    latency = rng.uniform(0, 2e-6, ft.num_links)
    w = rng.uniform(0.5, 2, F)
    routes[F - 3:] = -1  # empty routes finish at their cap
    limit[F - 3:] = 1e9
    return ft, rng, routes, sizes, start, latency, w, limit


@pytest.mark.parametrize("seed", range(4))
def test_fluid_events_equal_the_xla_engine_and_finish_times_the_oracle(seed):
    ft, rng, routes, sizes, start, latency, w, limit = fluid_instance(seed)
    kw = dict(weights=w, rate_limit=limit, start_times=start, latency=latency)
    host, ev = fm.completion_events(routes, sizes, ft.capacity, engine="host", **kw)
    xla, ev0 = fm.completion_events(routes, sizes, ft.capacity, engine="xla", **kw)
    np.testing.assert_allclose(host, fluid_oracle(routes, sizes, ft.capacity, w, limit, start, latency), rtol=1e-9)
    np.testing.assert_allclose(host, xla, rtol=1e-12)
    assert event_count(ev) == event_count(ev0) > 50
    n = int(ev.count)
    np.testing.assert_allclose(ev.time[:n], ev0.time[:n], rtol=1e-12)
    for field in ("cause", "completes", "first", "last"):
        np.testing.assert_array_equal(getattr(ev, field)[:n] if field in ("cause", "completes") else
                                      getattr(ev, field), getattr(ev0, field)[:n] if field in ("cause", "completes")
                                      else getattr(ev0, field))


def staggered_instance(seed, groups=4, per=6, F=120):
    """Links in groups a factor 2 apart in capacity, flows mostly within one group (a few across two), and
    arrivals over 30 instants, some of them bursts of 12 flows onto one link: an arrival into a fast group
    lands after the slow groups' steps, a burst or a capped arrival undercuts steps already taken."""
    rng = np.random.default_rng(seed)
    L = groups * per
    capacity = np.repeat(2.0 ** np.arange(groups), per) * 1e9 * rng.uniform(0.7, 1.3, L)
    routes = np.full((F, 3), -1, np.int32)
    group = rng.integers(0, groups, F)
    for f in range(F):
        n = rng.integers(1, 4)
        routes[f, :n] = group[f] * per + rng.choice(per, n, replace=False)
        other = rng.integers(0, L)
        if rng.random() < 0.1 and other not in routes[f]:  # across two groups
            routes[f, n - 1] = other
    instants = np.linspace(0, 4e-3, 30)
    start = np.where(rng.random(F) < 0.6, rng.choice(instants, F), 0.0)
    for _ in range(4):  # bursts: 12 flows onto one link at one instant
        burst = rng.choice(F, 12, replace=False)
        routes[burst] = -1
        routes[burst, 0] = rng.integers(0, L)
        start[burst] = instants[rng.integers(5, 30)]
    w = rng.uniform(0.5, 2, F)
    limit = np.where(rng.random(F) < 0.15, capacity[routes[:, 0]] * rng.uniform(0.002, 0.1, F), np.inf)
    sizes = np.exp(rng.uniform(np.log(1e6), np.log(1e8), F))
    routes[F - 2:], limit[F - 2:] = -1, 1e9  # empty routes: their cap, from the moment they arrive
    return routes, sizes, capacity, w, limit, start


@pytest.mark.parametrize("seed", range(6))
def test_staggered_arrivals_keep_the_solve_they_leave_standing(seed):
    """Arrivals re-fill from the first step of the last solve they change (``_host._arrival_restart``);
    every instance ends as the oracle and the XLA engine, which re-solves every arrival in full, end."""
    routes, sizes, capacity, w, limit, start = staggered_instance(seed)
    kw = dict(weights=w, rate_limit=limit, start_times=start)
    host, ev = fm.completion_events(routes, sizes, capacity, engine="host", **kw)
    xla, ev0 = fm.completion_events(routes, sizes, capacity, engine="xla", **kw)
    np.testing.assert_allclose(host, fluid_oracle(routes, sizes, capacity, w, limit, start), rtol=1e-9)
    np.testing.assert_allclose(host, xla, rtol=1e-12)
    assert event_count(ev) == event_count(ev0) and int(np.sum(~ev.completes[1:int(ev.count)])) >= 20


def test_staggered_arrivals_give_the_xla_engines_gradients():
    """The adjoint replays the recorded re-fills: after partial re-fills they are those of a full solve."""
    routes, sizes, capacity, w, limit, start = staggered_instance(2)
    a = np.random.default_rng(0).normal(size=routes.shape[0])

    def objective(engine):
        return lambda *x: jnp.vdot(a, fm.completion_times(routes, x[0], x[1], weights=x[2], rate_limit=x[3],
                                                          start_times=x[4], engine=engine))

    args = tuple(map(jnp.asarray, (sizes, capacity, w, limit, start)))
    host = jax.grad(objective("host"), argnums=tuple(range(5)))(*args)
    xla = jax.grad(objective("xla"), argnums=tuple(range(5)))(*args)
    for g, g0 in zip(host, xla):
        np.testing.assert_allclose(g, g0, rtol=1e-8, atol=1e-10 * float(jnp.max(jnp.abs(g0)) + 1e-300))


@pytest.mark.parametrize("budget", [None, 300, 0])
def test_fluid_gradients_equal_the_xla_engine(budget, monkeypatch):
    """With the whole forward recorded (None), its first intervals only (300 entries), or none (every
    interval re-solved in full)."""
    from flowmodel.kernels import _host_adjoint

    if budget is not None:
        monkeypatch.setattr(_host_adjoint, "RECORD_BUDGET", budget)
    ft, rng, routes, sizes, start, latency, w, limit = fluid_instance(7, F=80)
    a = rng.normal(size=routes.shape[0])

    def objective(engine):
        return lambda *x: jnp.vdot(a, fm.completion_times(routes, x[0], x[1], weights=x[2], rate_limit=x[3],
                                                          start_times=x[4], latency=x[5], engine=engine))

    args = tuple(map(jnp.asarray, (sizes, ft.capacity, w, limit, start, latency)))
    host = jax.grad(objective("host"), argnums=tuple(range(6)))(*args)
    xla = jax.grad(objective("xla"), argnums=tuple(range(6)))(*args)
    for g, g0 in zip(host, xla):
        np.testing.assert_allclose(g, g0, rtol=1e-8, atol=1e-10 * float(jnp.max(jnp.abs(g0)) + 1e-300))


def test_fluid_vmap_and_jit_reach_the_compiled_loop():
    ft, rng, routes, sizes, start, latency, w, limit = fluid_instance(9, F=60)
    caps = ft.capacity * rng.uniform(0.7, 1.3, (4, ft.num_links))
    fn = jax.jit(jax.vmap(lambda c: fm.completion_times(routes, sizes, c, rate_limit=limit, start_times=start,
                                                        engine="host")))
    assert "pure_callback" in str(jax.make_jaxpr(fn)(caps))
    got = fn(caps)
    for b in range(4):
        want = fluid_oracle(routes, sizes, caps[b], rate_limit=limit, start_times=start)
        np.testing.assert_allclose(got[b], want, rtol=1e-9)
