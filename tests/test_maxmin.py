"""Exact max-min kernel: closed forms, oracle agreement, certificate, paths, dtypes, vmap, gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import random_instance
from hypothesis import given, settings
from hypothesis import strategies as st

import flowmodel as fm
from flowmodel.kernels import _waterfill
from flowmodel.kernels import maxmin as _maxmin
from flowmodel.peers import fattree
from flowmodel.reference import maxmin_rates as oracle
from flowmodel.reference import maxmin_violations


def dense_rates(routes, capacity, weights, limit):
    """The XLA kernel with traced routes, which takes the dense all-links path."""
    fn = jax.jit(lambda r, c, w, lim: fm.maxmin_rates(r, c, weights=w, rate_limit=lim, engine="xla"))
    return np.asarray(fn(routes, capacity, weights, limit))


# ---- closed forms -------------------------------------------------------------------------------

def test_three_flows_on_three_links():
    routes = np.array([[0, 1], [1, 2], [0, 2]])
    np.testing.assert_allclose(fm.maxmin_rates(routes, np.array([100.0, 100.0, 60.0])), [70, 30, 30], rtol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 7])
def test_one_shared_link_weighted(n):
    w = np.arange(1.0, n + 1)
    rates = fm.maxmin_rates(np.zeros((n, 1), np.int32), np.array([12.0]), weights=w)
    np.testing.assert_allclose(rates, 12.0 * w / w.sum(), rtol=1e-12)


def test_parking_lot():
    # one long flow over n links, one short flow per link; unequal capacities
    n = 5
    cap = np.array([10.0, 4.0, 8.0, 6.0, 12.0])
    routes = np.full((n + 1, n), -1)
    routes[0] = np.arange(n)
    routes[1:, 0] = np.arange(n)
    rates = np.asarray(fm.maxmin_rates(routes, cap))
    assert rates[0] == pytest.approx(2.0)  # bottleneck: link 1 shared by two flows
    np.testing.assert_allclose(rates[1:], cap - 2.0, rtol=1e-12)


def test_rate_limit_and_empty_route():
    routes = np.array([[0, -1], [0, -1], [-1, -1]])
    rates = fm.maxmin_rates(routes, np.array([10.0]), rate_limit=np.array([2.0, np.inf, 3.0]))
    np.testing.assert_allclose(rates, [2.0, 8.0, 3.0], rtol=1e-12)


def test_infinite_capacity_link_is_unconstrained():
    routes = np.array([[0, 1], [1, -1]])
    rates = fm.maxmin_rates(routes, np.array([5.0, np.inf]), rate_limit=np.array([np.inf, 7.0]))
    np.testing.assert_allclose(rates, [5.0, 7.0])


# ---- oracle and certificate ---------------------------------------------------------------------

def test_oracle_agreement_many_random_instances(rng):
    worst = 0.0
    for i in range(600):
        routes, cap, w, lim = random_instance(rng, empty=0.05 if i % 2 else 0.0)
        rates = np.asarray(fm.maxmin_rates(routes, cap, weights=w, rate_limit=lim))
        ref = oracle(routes, cap, w, lim)
        worst = max(worst, float(np.max(np.abs(rates - ref) / ref)))
        assert maxmin_violations(routes, cap, rates, w, lim) == []
    assert worst < 1e-9


@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), caps=st.sampled_from([0.0, 0.3, 1.0]),
       equal=st.booleans(), shape=st.sampled_from([(24, 8, 4), (40, 12, 6)]))
def test_property_kernel_equals_oracle_and_certificate_holds(seed, caps, equal, shape):
    rng = np.random.default_rng(seed)
    routes, cap, w, lim = random_instance(rng, *shape, caps=caps)
    if equal:  # many exact ties: equal capacities and weights
        cap, w = np.full_like(cap, 4.0), np.ones_like(w)
    rates = np.asarray(fm.maxmin_rates(routes, cap, weights=w, rate_limit=lim))
    np.testing.assert_allclose(rates, oracle(routes, cap, w, lim), rtol=1e-9)
    assert maxmin_violations(routes, cap, rates, w, lim) == []


def test_certificate_rejects_wrong_allocations():
    routes = np.array([[0, 1], [1, 2], [0, 2]])
    cap = np.array([100.0, 100.0, 60.0])
    assert maxmin_violations(routes, cap, [70, 30, 30]) == []
    assert any("load" in v for v in maxmin_violations(routes, cap, [71, 30, 30]))  # link 0 over capacity
    assert any("bottleneck" in v for v in maxmin_violations(routes, cap, [60, 30, 30]))  # flow 0 could grow
    assert maxmin_violations(routes, cap, [50, 50, 10]) != []  # feasible, Pareto, but not max-min


def test_dense_path_equals_sparse_path(rng):
    for _ in range(50):
        routes, cap, w, lim = random_instance(rng, caps=0.3, empty=0.05)
        sparse = np.asarray(fm.maxmin_rates(routes, cap, weights=w, rate_limit=lim, engine="xla"))
        np.testing.assert_allclose(dense_rates(routes, cap, w, lim), sparse, rtol=1e-12)


@pytest.mark.parametrize("candidates", [2, 3, 64])
def test_candidate_count_does_not_change_rates(rng, candidates):
    routes, cap, w, lim = random_instance(rng, 40, 12, 6)
    members = fm.incidence(routes, 12).members
    rates = _maxmin._rates_jit(jnp.asarray(routes), members, jnp.asarray(cap), jnp.asarray(w), jnp.asarray(lim),
                               candidates, True)
    np.testing.assert_allclose(rates, oracle(routes, cap, w, lim), rtol=1e-9)



def test_links_tied_at_the_minimum_freeze_in_one_pass():
    # ten 10 B/s links tie at the minimum share (more than the 2 candidates a pass examines): one pass
    # freezes their flows, and flow b then takes what they leave of the shared link X
    routes = np.array([[i, 10] for i in range(10)] + [[10, -1]])
    cap = np.array([10.0] * 10 + [200.0])
    ones, inf = jnp.ones(11), jnp.full(11, jnp.inf)
    members = fm.incidence(routes, 11).members
    rates, st = _maxmin._structure_jit(jnp.asarray(routes, jnp.int32), members, jnp.asarray(cap), ones, inf, 2, False)
    np.testing.assert_allclose(rates, [10.0] * 10 + [100.0], rtol=1e-12)
    np.testing.assert_allclose(rates, oracle(routes, cap), rtol=1e-12)
    assert int(st.num_passes) == 2


def test_a_pass_defers_flows_beyond_its_slots_exactly(rng):
    # 600 flows on 12 links: passes select more flows than they may freeze (freeze_slots), so some freeze
    # a pass after their bottleneck; rates and gradients must equal the oracle's and the dense solve's
    routes, cap, w, lim = random_instance(rng, 600, 12, 3, caps=0.2)
    members = fm.incidence(routes, 12).members
    assert _waterfill.freeze_slots(2, members.shape[1]) < 2 * members.shape[1]
    r = jnp.asarray(routes)
    rates, st = _maxmin._structure_jit(r, members, jnp.asarray(cap), jnp.asarray(w), jnp.asarray(lim), 2, True)
    bneck = np.asarray(st.bottleneck)
    on_link = bneck < 12
    deferred = np.asarray(st.pass_of_flow)[on_link] > np.asarray(st.pass_of_link)[bneck[on_link]]
    assert deferred.sum() >= 10
    np.testing.assert_allclose(rates, oracle(routes, cap, w, lim), rtol=1e-9)
    assert maxmin_violations(routes, cap, np.asarray(rates), weights=w, rate_limit=lim) == []
    a = rng.normal(size=w.size)
    sparse = jax.grad(lambda c, w: jnp.vdot(a, _maxmin._maxmin(r, members, c, w, jnp.asarray(lim), 2, True)),
                      argnums=(0, 1))(jnp.asarray(cap), jnp.asarray(w))
    objective = lambda c, w, r: jnp.vdot(a, fm.maxmin_rates(r, c, weights=w, rate_limit=lim, engine="xla"))  # noqa: E731
    dense = jax.jit(jax.grad(objective, argnums=(0, 1)))(jnp.asarray(cap), jnp.asarray(w), r)
    for got, want in zip(sparse, dense):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_gradient_through_a_pass_that_freezes_more_flows_than_a_candidate_pass_can():
    # 100 equal links with one flow each tie at the minimum: one pass freezes all 100 flows, far more
    # than the 2 candidate links x 1 flow a candidate pass reads; the adjoint must still reach each one
    routes = np.arange(100, dtype=np.int32)[:, None]
    members = fm.incidence(routes, 100).members
    a = np.random.default_rng(0).normal(size=100)
    ones, inf = jnp.ones(100), jnp.full(100, jnp.inf)
    _, st = _maxmin._structure_jit(jnp.asarray(routes), members, jnp.full(100, 10.0), ones, inf, 2, False)
    assert int(st.num_passes) == 1
    g = jax.grad(lambda c: jnp.vdot(a, _maxmin._maxmin(jnp.asarray(routes), members, c, ones, inf, 2, False)))(
        jnp.full(100, 10.0))
    np.testing.assert_allclose(g, a, rtol=1e-12)


def test_fat_tree_instance_matches_oracle():
    ft = fattree.fat_tree(8, heterogeneity=0.5, seed=3)
    rng = np.random.default_rng(4)
    src, dst = fattree.random_pairs(ft.num_hosts, 3000, rng)
    routes = ft.route(src, dst, rng)
    limit = np.where(rng.random(3000) < 0.2, rng.uniform(1e9, 2e10, 3000), np.inf)
    rates = np.asarray(fm.maxmin_rates(routes, ft.capacity, rate_limit=limit))
    np.testing.assert_allclose(rates, oracle(routes, ft.capacity, rate_limit=limit), rtol=1e-9)
    assert maxmin_violations(routes, ft.capacity, rates, rate_limit=limit) == []
    _, structure = fm.maxmin_structure(routes, ft.capacity, rate_limit=limit)
    assert 0 < int(structure.num_passes) < 3000


# ---- dtypes, batching, compilation --------------------------------------------------------------

def test_float32(rng):
    routes, cap, w, lim = random_instance(rng)
    rates = fm.maxmin_rates(routes, cap.astype(np.float32), weights=w, rate_limit=lim)
    assert rates.dtype == jnp.float32
    np.testing.assert_allclose(rates, oracle(routes, cap, w, lim), rtol=1e-4)


def test_vmap_over_capacity_weights_and_limits_equals_loop(rng):
    routes, cap, w, lim = random_instance(rng)
    caps = cap * rng.uniform(0.5, 1.5, (6, cap.size))
    ws = w * rng.uniform(0.5, 1.5, (6, w.size))
    lims = lim * rng.uniform(0.5, 1.5, (6, lim.size))
    batched = jax.vmap(lambda c, ww, ll: fm.maxmin_rates(routes, c, weights=ww, rate_limit=ll))(caps, ws, lims)
    for b in range(6):
        np.testing.assert_allclose(batched[b], oracle(routes, caps[b], ws[b], lims[b]), rtol=1e-9)


def test_no_recompilation_for_new_values(rng):
    routes, cap, w, lim = random_instance(rng)
    fm.maxmin_rates(routes, cap, weights=w, rate_limit=lim)
    size = _maxmin._rates_jit._cache_size()
    for scale in (0.5, 2.0, 3.0):
        fm.maxmin_rates(routes, cap * scale, weights=w * scale, rate_limit=lim * scale)
    fm.maxmin_rates(routes, cap, weights=w, rate_limit=lim, incidence=fm.incidence(routes, cap.size))
    assert _maxmin._rates_jit._cache_size() == size


# ---- gradients ----------------------------------------------------------------------------------

def _objective(routes, a):
    def f(cap, w, lim):
        return jnp.sum(a * fm.maxmin_rates(routes, cap, weights=w, rate_limit=lim))
    return f


def _same_structure(routes, args_a, args_b):
    sa = fm.maxmin_structure(routes, args_a[0], weights=args_a[1], rate_limit=args_a[2])[1]
    sb = fm.maxmin_structure(routes, args_b[0], weights=args_b[1], rate_limit=args_b[2])[1]
    return np.array_equal(sa.bottleneck, sb.bottleneck)


@pytest.mark.parametrize("argnum", [0, 1, 2])
def test_gradient_matches_central_differences(rng, argnum):
    checked = 0
    for _ in range(60):
        routes, cap, w, lim = random_instance(rng, caps=0.4)
        lim = np.where(np.isinf(lim), 1e3, lim)  # finite caps so rate_limit has a gradient to check
        lim[rng.random(lim.size) < 0.5] = np.inf
        a = rng.normal(size=w.size)
        f = _objective(routes, a)
        args = [cap, w, lim]
        v = rng.normal(size=args[argnum].shape) * np.where(np.isfinite(args[argnum]), args[argnum], 0)
        eps = 1e-6
        plus, minus = list(args), list(args)
        plus[argnum] = args[argnum] + eps * v
        minus[argnum] = args[argnum] - eps * v
        if not (_same_structure(routes, args, plus) and _same_structure(routes, args, minus)):
            continue  # a tie within eps: the derivative is one-sided there
        fd = (f(*plus) - f(*minus)) / (2 * eps)
        g = jax.grad(f, argnums=argnum)(*args)
        assert jnp.all(jnp.isfinite(g))
        np.testing.assert_allclose(jnp.vdot(g, jnp.nan_to_num(v, posinf=0)), fd, rtol=1e-6, atol=1e-7 * abs(fd) + 1e-9)
        checked += 1
    assert checked >= 40


def test_gradient_closed_form_single_link():
    # rate_i = c * w_i / sum(w): d rate_0 / d c = w_0 / sum(w)
    w = np.array([1.0, 2.0, 5.0])
    g = jax.grad(lambda c: fm.maxmin_rates(np.zeros((3, 1), np.int32), c, weights=w)[0])(jnp.array([16.0]))
    np.testing.assert_allclose(g, [1.0 / 8.0])


def test_gradient_through_jit_and_vmap(rng):
    routes, cap, w, lim = random_instance(rng)
    f = lambda c: jnp.sum(fm.maxmin_rates(routes, c, weights=w, rate_limit=lim) ** 2)  # noqa: E731
    caps = cap * rng.uniform(0.8, 1.2, (3, cap.size))
    g_batched = jax.jit(jax.vmap(jax.grad(f)))(caps)
    for b in range(3):
        np.testing.assert_allclose(g_batched[b], jax.grad(f)(caps[b]), rtol=1e-12)


def test_gradient_dense_path_equals_sparse_path(rng):
    routes, cap, w, lim = random_instance(rng, caps=0.3)
    a = rng.normal(size=w.size)
    xla = dict(weights=w, rate_limit=lim, engine="xla")
    sparse = jax.grad(lambda c: jnp.vdot(a, fm.maxmin_rates(routes, c, **xla)))(cap)
    dense = jax.jit(jax.grad(lambda c, r: jnp.vdot(a, fm.maxmin_rates(r, c, **xla))))(cap, routes)
    np.testing.assert_allclose(dense, sparse, rtol=1e-12, atol=1e-14)


# ---- prepared incidence -------------------------------------------------------------------------

def fat_tree_routes(k, F, seed):
    """k-ary fat-tree (heterogeneous capacities) and F random host pairs on random ECMP paths."""
    ft = fattree.fat_tree(k, heterogeneity=0.5, seed=seed)
    rng = np.random.default_rng(seed + 1)
    src, dst = fattree.random_pairs(ft.num_hosts, F, rng)
    return ft, rng, ft.route(src, dst, rng)


def runs_sparse_solve(fn, *args):
    """Whether ``fn(*args)`` traces the sparse solve (its candidate links come from ``top_k``; the dense
    solve has none)."""
    return "top_k" in str(jax.make_jaxpr(fn)(*args))


def test_incidence_lists_the_flows_of_each_link(rng):
    routes, _, _, _ = random_instance(rng, 40, 12, 6, empty=0.1)
    inc = fm.incidence(routes, 12)
    assert (inc.num_flows, inc.num_links) == (40, 12)
    assert inc.members.shape[0] == 13 and inc.members.shape[1] % 16 == 0
    for link in range(13):  # row 12 is the dummy link of the -1 padding: empty
        want = np.flatnonzero((routes == link).any(axis=1))
        got = np.asarray(inc.members[link])
        np.testing.assert_array_equal(got[: want.size], want)
        assert np.all(got[want.size:] == 40)
        assert int(inc.degree[link]) == want.size


def test_a_traced_call_leaves_nothing_behind_for_the_next_eager_call():
    # jit(vmap) over capacity with the routes a concrete device array takes the sparse solve with a table
    # built inside the trace; an eager call on the same routes must not find it (a cache keyed by the
    # routes' bytes did, and raised UnexpectedTracerError)
    ft, rng, routes = fat_tree_routes(4, 200, 0)
    routes = jnp.asarray(routes)
    caps = jnp.asarray(ft.capacity * rng.uniform(0.8, 1.2, (3, ft.num_links)))
    solve = jax.vmap(lambda c: fm.maxmin_rates(routes, c, engine="xla"))
    assert runs_sparse_solve(solve, caps)
    batched = jax.jit(solve)(caps)
    eager = fm.maxmin_rates(routes, caps[0], engine="xla")
    np.testing.assert_allclose(eager, batched[0], rtol=1e-12)
    np.testing.assert_allclose(eager, oracle(np.asarray(routes), np.asarray(caps[0])), rtol=1e-9)


def test_inside_jit_with_an_incidence_argument_the_sparse_solve_runs(rng):
    # one-hop flows on ~190 links of distinct fair shares: all are local bottlenecks at once, so the dense
    # solve needs one pass and the sparse one (64 candidate links per pass) several
    routes, cap, w, _ = random_instance(rng, 600, 200, 1)
    inc = fm.incidence(routes, 200)
    in_jit = jax.jit(lambda r, c, ww, i: fm.maxmin_structure(r, c, weights=ww, incidence=i, engine="xla"))
    dense = jax.jit(lambda r, c, ww: fm.maxmin_structure(r, c, weights=ww, engine="xla"))
    rates, st = in_jit(routes, cap, w, inc)
    eager_rates, eager = fm.maxmin_structure(routes, cap, weights=w, incidence=inc, engine="xla")
    dense_rates, st_dense = dense(routes, cap, w)
    assert int(st_dense.num_passes) == 1
    assert int(st.num_passes) == int(eager.num_passes) > 1
    np.testing.assert_allclose(rates, eager_rates, rtol=1e-12)
    np.testing.assert_allclose(rates, dense_rates, rtol=1e-12)
    # a random fat-tree instance: the same structure as the eager solve, and the oracle's rates
    ft, rng, routes = fat_tree_routes(4, 200, 2)
    limit = np.where(rng.random(200) < 0.2, rng.uniform(1e9, 2e10, 200), np.inf)
    inc = fm.incidence(routes, ft.num_links)
    solve = lambda r, c, i: fm.maxmin_structure(r, c, rate_limit=limit, incidence=i, engine="xla")  # noqa: E731
    assert runs_sparse_solve(solve, routes, ft.capacity, inc)
    dense = lambda r, c: fm.maxmin_structure(r, c, rate_limit=limit, engine="xla")  # noqa: E731
    assert not runs_sparse_solve(dense, routes, ft.capacity)
    rates, st = jax.jit(solve)(routes, ft.capacity, inc)
    eager_rates, eager = fm.maxmin_structure(routes, ft.capacity, rate_limit=limit, engine="xla")
    for got, want in zip(st, eager):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(rates, oracle(routes, ft.capacity, rate_limit=limit), rtol=1e-9)


def test_vmap_over_capacity_with_an_incidence_equals_loop():
    ft, rng, routes = fat_tree_routes(4, 200, 1)
    limit = np.where(rng.random(200) < 0.2, rng.uniform(1e9, 2e10, 200), np.inf)
    caps = ft.capacity * rng.uniform(0.5, 1.5, (5, ft.num_links))
    inc = fm.incidence(routes, ft.num_links)
    solve = jax.vmap(lambda r, c, i: fm.maxmin_rates(r, c, rate_limit=limit, incidence=i, engine="xla"),
                     in_axes=(None, 0, None))
    assert runs_sparse_solve(solve, routes, caps, inc)
    batched = jax.jit(solve)(routes, caps, inc)
    for b in range(5):
        want = fm.maxmin_rates(routes, caps[b], rate_limit=limit, engine="xla")
        np.testing.assert_allclose(batched[b], want, rtol=1e-12)
        np.testing.assert_allclose(batched[b], oracle(routes, caps[b], rate_limit=limit), rtol=1e-9)


def test_gradient_inside_jit_with_an_incidence_matches_eager_and_central_differences(rng):
    def objective(c, w, lim, r, inc, a):
        return jnp.vdot(a, fm.maxmin_rates(r, c, weights=w, rate_limit=lim, incidence=inc, engine="xla"))

    grad = jax.grad(objective, argnums=(0, 1, 2))
    in_jit = jax.jit(grad)
    checked = 0
    for i in range(20):
        routes, cap, w, lim = random_instance(rng, caps=0.4)
        lim = np.where(np.isinf(lim), 1e3, lim)
        lim[rng.random(lim.size) < 0.5] = np.inf
        inc = fm.incidence(routes, cap.size)
        a = rng.normal(size=w.size)
        if i == 0:
            assert runs_sparse_solve(grad, cap, w, lim, routes, inc, a)
        got = in_jit(cap, w, lim, routes, inc, a)
        want = jax.grad(_objective(routes, a), argnums=(0, 1, 2))(cap, w, lim)  # the default (host) engine
        for g, g0 in zip(got, want):
            np.testing.assert_allclose(g, g0, rtol=1e-12, atol=1e-13)
        v = rng.normal(size=cap.size) * cap
        eps = 1e-6
        plus, minus = (cap + eps * v, w, lim), (cap - eps * v, w, lim)
        if not (_same_structure(routes, (cap, w, lim), plus) and _same_structure(routes, (cap, w, lim), minus)):
            continue
        fd = (objective(*plus, routes, inc, a) - objective(*minus, routes, inc, a)) / (2 * eps)
        np.testing.assert_allclose(jnp.vdot(got[0], v), fd, rtol=1e-6, atol=1e-7 * abs(fd) + 1e-9)
        checked += 1
    assert checked >= 12


def test_a_mismatched_incidence_raises(rng):
    routes, cap, _, _ = random_instance(rng)  # 24 flows, 8 links
    sizes = np.ones(24)
    fewer = fm.incidence(routes[:20], 8)
    shape = r"incidence was built for \(flows, links\) = \(20, 8\), but routes and capacity give \(24, 8\)"
    with pytest.raises(ValueError, match=shape):
        fm.maxmin_rates(routes, cap, incidence=fewer)
    with pytest.raises(ValueError, match=shape):
        fm.maxmin_structure(routes, cap, incidence=fewer)
    with pytest.raises(ValueError, match=shape):
        fm.completion_times(routes, sizes, cap, incidence=fewer)
    with pytest.raises(ValueError, match=shape):  # shapes are checked under a trace too
        jax.jit(lambda r, c, i: fm.maxmin_rates(r, c, incidence=i))(routes, cap, fewer)
    with pytest.raises(ValueError, match=r"\(24, 9\), but routes and capacity give \(24, 8\)"):
        fm.maxmin_rates(routes, cap, incidence=fm.incidence(routes, 9))
    other, _, _, _ = random_instance(rng)  # same shapes, other routes
    with pytest.raises(ValueError, match=r"incidence does not match routes: link \d+ carries"):
        fm.completion_times(routes, sizes, cap, incidence=fm.incidence(other, 8))
    with pytest.raises(ValueError, match="incidence must be an Incidence"):
        fm.maxmin_rates(routes, cap, incidence=fm.incidence(routes, 8).members)
    with pytest.raises(ValueError, match="incidence needs concrete routes"):
        jax.jit(lambda r: fm.incidence(r, 8))(routes)


# ---- bad input ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(capacity=np.array([1.0, np.nan, 1.0])), r"capacity\[1\] is NaN"),
    (dict(capacity=np.array([1.0, -2.0, 1.0])), r"capacity\[1\] must be > 0, got -2"),
    (dict(capacity=np.array([1.0, 0.0, 1.0])), r"capacity\[1\] must be > 0, got 0"),
    (dict(capacity=np.ones((3, 1))), r"capacity must be 1-D"),
    (dict(routes=np.array([[0, 3], [1, -1]])), r"routes\[0\]\[1\] = 3 names no link"),
    (dict(routes=np.array([[0, -2], [1, -1]])), r"routes\[0\]\[1\] = -2 names no link"),
    (dict(routes=np.array([[0, 0], [1, -1]])), r"routes\[0\] lists link 0 twice"),
    (dict(routes=np.zeros((0, 2), np.int32)), r"routes is empty"),
    (dict(routes=np.array([0, 1])), r"routes must be a 2-D"),
    (dict(routes=np.array([[0.0, 1.0], [1.0, 2.0]])), r"integer dtype"),
    (dict(weights=np.array([1.0, 0.0])), r"weights\[1\] must be > 0, got 0"),
    (dict(weights=np.array([1.0, 1.0, 1.0])), r"weights must have shape \(2,\)"),
    (dict(rate_limit=np.array([1.0, -1.0])), r"rate_limit\[1\] must be > 0"),
    (dict(routes=np.array([[0, 1], [-1, -1]])), r"flow 1 has an empty route and rate_limit\[1\] = inf"),
    (dict(capacity=np.array([np.inf, np.inf, np.inf])), r"flow 0 crosses only infinite-capacity links"),
])
def test_bad_input_names_argument_and_value(kwargs, match):
    args = dict(routes=np.array([[0, 1], [1, 2]]), capacity=np.array([1.0, 2.0, 3.0]))
    args.update(kwargs)
    routes, capacity = args.pop("routes"), args.pop("capacity")
    with pytest.raises(ValueError, match=match):
        fm.maxmin_rates(routes, capacity, **args)


def test_nan_without_validation_raises_instead_of_wrong_rates():
    routes = np.array([[0, 1], [1, -1]])
    with pytest.raises(Exception, match="no progress"):
        jax.block_until_ready(fm.maxmin_rates(routes, np.array([1.0, np.nan]), check=False))
