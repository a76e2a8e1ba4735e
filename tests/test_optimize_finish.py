"""The finish at dimension: the first-order check costs O(K) exact evaluations, sees a descent hidden
at a tie of knobs, rounds many discrete knobs without enumerating them, and returns the least-cost
point when more budget buys nothing."""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowmodel import fabric as fb
from flowmodel import optimize as opt
from flowmodel import routing as rt
from flowmodel import steptime as st
from flowmodel import traffic as tr

SITE = fb.Clos(tiers=2, gpus_per_leaf=1, leaves_per_pod=1, spines_per_pod=1)


def _mesh(sites: int, allowed=None):
    """A full mesh of long-haul links between tiny sites: one knob per link, as the synthetic
    objectives below need (they ignore the network)."""
    names = [f"s{i}" for i in range(sites)]
    pairs = list(itertools.combinations(names, 2))
    lengths = np.random.default_rng(0).uniform(20.0, 200.0, len(pairs))
    fleet = fb.Fleet(sites=tuple(fb.Site(n, scale_out=SITE, scale_up=None) for n in names),
                     long_haul=tuple(fb.LongHaul(a, b, 10e9, float(km)) for (a, b), km in zip(pairs, lengths)))
    net, info = fb.compile_fabric(fb.build(fleet))
    knobs = tuple(opt.Knob(f"long_haul/{a}-{b}", 10e9, 400e9, allowed) for a, b in pairs)
    return net, info, opt.Space(info, knobs, opt.CostModel(per_gbps_km=1.0))


def _capacity(space):
    """q(z): each knob's capacity over its span (capacity-linear), as the finish scales it."""
    offset = np.array([k.lower / (k.upper - k.lower) for k in space.knobs])
    return lambda z: offset + z


def _separable(space, seed=0):
    """A smooth step-time-like objective: sum_l w_l / q_l, and its optimum under a binding budget."""
    K = len(space.knobs)
    w = jnp.asarray(np.random.default_rng(seed).uniform(0.5, 2.0, K))
    q = _capacity(space)
    f = jax.jit(lambda z: jnp.sum(w / q(z)))
    a, b = space.cost_line()
    budget = a + 0.3 * b.sum()
    offset = q(np.zeros(K))

    def spend(mu):  # KKT: w / q^2 = mu b inside the box, so q = sqrt(w / (mu b)) clipped to it
        return np.clip(np.sqrt(np.asarray(w) / (mu * b)) - offset, 0.0, 1.0)

    lo, hi = 1e-12, 1e12
    for _ in range(200):  # bisection on the multiplier, in log space, until the budget is spent
        mid = np.sqrt(lo * hi)
        lo, hi = (mid, hi) if b @ spend(mid) > budget - a else (lo, mid)
    z = spend(hi)
    assert 0.0 < z.min() and z.max() < 1.0  # an interior optimum: every knob's gradient balances the budget
    return (lambda z: float(f(jnp.asarray(z)))), z, budget


@pytest.fixture(scope="module")
def mesh13():
    return _mesh(13)  # 78 knobs, the planning dimension


def test_the_check_costs_order_k_and_certifies_a_smooth_optimum(mesh13):
    _, _, space = mesh13
    K = len(space.knobs)
    f, z, budget = _separable(space)
    check = opt.optimality_check(f, z, space, budget=budget)
    assert check.passed and check.binding and check.multiplier > 0, check
    assert check.moves <= 2 * K + 13  # 2K one-sided differences and a bounded number of polls
    # budget moved from one knob to another: the same check fails, naming a budget-neutral pair
    a, b = space.cost_line()
    off = z.copy()
    i, j = int(np.argmax(z)), int(np.argmin(np.where(z < 0.9, z, 1.0)))
    shift = 0.3 * z[i]
    off[i] -= shift
    off[j] += shift * b[i] / b[j]
    bad = opt.optimality_check(f, off, space, budget=budget)
    assert not bad.passed and bad.best_gain > 5 * bad.tolerance
    assert bad.best_move.startswith(f"{space.knobs[i].group} up, ")  # give back what the shift took


def test_refine_from_a_perturbed_optimum_in_order_k_evaluations_per_round(mesh13):
    _, _, space = mesh13
    K = len(space.knobs)
    f, z_best, budget = _separable(space, seed=1)
    a, b = space.cost_line()
    rng = np.random.default_rng(2)
    z0 = np.clip(z_best + rng.normal(0, 0.02, K), 0, 1)
    z0 = np.asarray(opt.project_budget(jnp.asarray(z0), jnp.asarray(b), budget - a))
    rounds = 4
    z, value, check, evaluations = opt.refine(f, z0, space, budget=budget, rounds=rounds)
    assert value < f(z0) and a + b @ z <= budget * (1 + 1e-12)
    assert value <= f(z_best) * (1 + 1e-3)
    # every round: 2K differences (6K with a bundle at a tie), a bounded number of polls and line searches
    assert evaluations <= (rounds + 1) * (6 * K + 24 + 16 * 40)


def _tie(space):
    """Two jobs tied at the max, each on its own link, both on a shared third: at z1 = z2 each knob's
    one-sided derivatives alone admit a multiplier, but moving budget from both tied links together
    onto the shared one improves the max (the descent a per-knob check misses)."""
    q = _capacity(space)
    u, s = 1.0, 0.75

    def f(z):
        qz = q(np.asarray(z))
        return float(max(u / qz[0], u / qz[1]) + s / qz[2] + 1.0)

    return f


def test_the_tie_polls_see_a_descent_the_one_sided_derivatives_hide():
    _, _, space = _mesh(3)
    space = dataclasses.replace(space, cost=opt.CostModel(per_gbps={"long_haul": 1.0}))  # equal prices
    f = _tie(space)
    q0 = _capacity(space)(np.zeros(3))
    z = 0.6 - q0  # q = 0.6 each: s / q3^2 lies between u / (2 q1^2) and u / q1^2; the optimum is inside the box
    a, b = space.cost_line()
    budget = a + float(b @ z)
    check = opt.optimality_check(f, z, space, budget=budget)
    assert check.residual <= check.tolerance  # the per-knob KKT conditions alone would pass
    assert not check.passed and set(check.ties) == {k.group for k in space.knobs[:2]}, check
    # the refinement follows the poll to the true optimum: u / (2 q1^2) = s / q3^2 with the budget spent
    z1, value, done, _ = opt.refine(f, z, space, budget=budget)
    qz = _capacity(space)(z1)
    assert done.passed and value < f(z) and qz[0] == pytest.approx(qz[1], rel=1e-3)
    assert qz.sum() == pytest.approx(1.8, rel=1e-9) and qz.max() < 1.0
    assert 1.0 / (2 * qz[0] ** 2) == pytest.approx(0.75 / qz[2] ** 2, rel=2e-2)


def test_many_discrete_knobs_are_rounded_without_enumerating_them():
    values = (10e9, 50e9, 100e9, 200e9, 400e9)
    net, info, space = _mesh(7, allowed=values)  # 21 knobs x 5 values: 5^21 combinations
    f, z_best, budget = _separable(space, seed=3)
    calls = []

    def exact(n, lg):
        calls.append(1)
        group = {k.group: info.groups[k.group] for k in space.knobs}
        return f(space.positions({g: float(n.capacity[x.links[0]]) / float(x.coef[0]) for g, x in group.items()}))

    params = {g: {"value": v, "unit": "bytes/s"} for g, v in space.values(z_best).items()}
    res = opt.Result(baseline=f(z_best), optimized=f(z_best), parameters=params, cost=budget, history=np.zeros(1),
                     network=net, logits={}, restarts=[])
    done = opt.finish(res, net, space, exact, budget=budget, rounds=2)
    assert all(p["value"] in values for p in done.result.parameters.values())
    assert done.result.cost <= budget * (1 + 1e-12)
    assert done.roundings <= 1 + 4 * len(space.knobs)
    # no worse than the nearest feasible rounding, with the continuous search's optimum as the bound below
    assert f(z_best) <= done.result.optimized


def _line_nic_bound():
    """Two long-haul links in series under a ring all-reduce; past ~50 GB/s the NICs bound the step."""
    site = fb.Clos(tiers=2, gpus_per_leaf=4, leaves_per_pod=2, spines_per_pod=2, latency=1e-6)
    sites = tuple(fb.Site(n, scale_out=site, scale_up=None) for n in "abc")
    fleet = fb.Fleet(sites=sites, long_haul=(fb.LongHaul("a", "b", 20e9, 50.0), fb.LongHaul("b", "c", 20e9, 150.0)))
    net, info = fb.compile_fabric(fb.build(fleet))
    rps = [st.route_phase(ph, rt.Router(info)) for ph in tr.all_reduce(np.arange(info.num_gpus), 4e9).phases]
    space = opt.Space(info, (opt.Knob("long_haul/a-b", 10e9, 200e9), opt.Knob("long_haul/b-c", 10e9, 200e9)),
                      opt.CostModel(per_gbps_km=1.0))

    def time(n, lg, options=st.EXACT):
        return sum(st.phase_time(rp, n.capacity, n.latency, options) for rp in rps)

    return net, info, space, time


def test_least_cost_when_more_budget_buys_nothing():
    net, info, space, time = _line_nic_bound()
    exact = lambda n, lg: float(time(n, lg))  # noqa: E731
    a, b = space.cost_line()
    budget = a + 0.9 * b.sum()  # ~180 GB/s on each link: far past what the NICs can push
    res = opt.minimize(lambda n, lg: time(n, lg, st.Options(rates="smooth", sharpness=16.0)), net, space,
                       exact=exact, budget=budget, steps=10)
    done = opt.finish(res, net, space, exact, budget=budget)
    at_max = exact(fb.apply_groups(net, info, {"long_haul/a-b": 200e9, "long_haul/b-c": 200e9}), {})
    assert done.buys_nothing and done.saved > 0 and done.check.passed
    assert done.result.optimized <= at_max * (1 + 2e-6)
    # the cheapest equal capacity with the same step time, by bisection on the exact model
    lo, hi = 10e9, 200e9
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        t = exact(fb.apply_groups(net, info, {"long_haul/a-b": mid, "long_haul/b-c": mid}), {})
        lo, hi = (lo, mid) if t <= at_max * (1 + 1e-6) else (mid, hi)
    cheapest = space.cost_at({"long_haul/a-b": hi, "long_haul/b-c": hi})
    assert done.result.cost < 0.8 * budget
    assert done.result.cost == pytest.approx(cheapest, rel=0.03)


def test_a_binding_budget_that_buys_is_spent():
    net, info, space, time = _line_nic_bound()
    exact = lambda n, lg: float(time(n, lg))  # noqa: E731
    a, b = space.cost_line()
    budget = a + 0.15 * b.sum()  # below the NIC bound: every unit of budget shortens the step
    res = opt.minimize(lambda n, lg: time(n, lg, st.Options(rates="smooth", sharpness=16.0)), net, space,
                       exact=exact, budget=budget, steps=10)
    done = opt.finish(res, net, space, exact, budget=budget)
    assert not done.buys_nothing and done.saved == 0.0 and done.check.passed
    assert done.result.cost == pytest.approx(budget, rel=1e-9)


def test_progress_with_an_eta_on_stderr_and_silent_without(capsys):
    import time as clock

    _, _, space = _mesh(3)
    f = _tie(space)
    z = 0.6 - _capacity(space)(np.zeros(3))
    a, b = space.cost_line()
    budget = a + float(b @ z)

    def slow(w):
        clock.sleep(0.25)  # the check's stage runs past the 2 s a bar waits before it shows
        return f(w)

    opt.optimality_check(slow, z, space, budget=budget, progress=False)
    assert capsys.readouterr().err == ""
    opt.optimality_check(slow, z, space, budget=budget, progress=True)
    err = capsys.readouterr().err
    assert "certify" in err and "<" in err  # tqdm's elapsed<remaining
