"""The step-time optimizer: known optima, budget projection, rounding, grid search, no recompilation."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from flowmodel import fabric as fb
from flowmodel import optimize as opt
from flowmodel import routing as rt
from flowmodel import scenario as sc
from flowmodel import steptime as st
from flowmodel import traffic as tr

TINY = tr.Model("tiny", layers=4, hidden=1024, ffn_hidden=4096, heads=16, kv_heads=4, vocab=8000, seq_len=2048)
SITE = fb.Clos(tiers=2, gpus_per_leaf=4, leaves_per_pod=2, spines_per_pod=2, latency=1e-6)


def _fleet(capacity=10e9):
    sites = tuple(fb.Site(n, scale_out=SITE, scale_up=fb.ScaleUp(size=4)) for n in "ab")
    return fb.Fleet(sites=sites, long_haul=(fb.LongHaul("a", "b", capacity=capacity, length_km=100.0),))


def _two_sites(capacity=10e9):
    return fb.compile_fabric(fb.build(_fleet(capacity)))


def test_spends_a_long_haul_budget_on_the_bottleneck():
    net, info = _two_sites()
    job = tr.Training(TINY, tr.Parallelism(tp=4, pp=1, dp=4), global_batch=8)
    plan = st.plan_training(job, info, rt.Router(info))
    space = opt.Space(info, (opt.Knob("long_haul/a-b", 10e9, 400e9),), opt.CostModel(per_gbps_km=1.0))
    target = 100e9  # below the 4 x 50 GB/s the DP rings could push across: the link stays the bottleneck
    budget = target / opt.GBPS * 100.0 * 2  # both directions, 100 km
    model = sc.prepare(sc.Scenario("two sites", _fleet(), training=(job,)))
    objective, exact = model.objective()
    res = opt.minimize(objective, net, space, exact=exact, budget=budget, steps=80)
    assert res.parameters["long_haul/a-b"]["value"] == pytest.approx(target, rel=0.01)
    assert res.parameters["long_haul/a-b"]["unit"] == "bytes/s"
    assert res.cost <= budget * (1 + 1e-9)
    best = float(st.step_time(plan, fb.apply_groups(net, info, {"long_haul/a-b": target})).step_time)
    assert res.optimized == pytest.approx(best, rel=0.01)
    assert res.optimized < res.baseline and len(res.history) == 80


def test_wcmp_weights_undo_an_ecmp_collision():
    clos = fb.Clos(tiers=2, gpus_per_leaf=2, leaves_per_pod=2, spines_per_pod=2, oversubscription=(2.0,), latency=0.0)
    g = fb.build(fb.Fleet(sites=(fb.Site("s", scale_out=clos, scale_up=None),)))
    g = fb.fail(g, degrade={("s/leaf0", "s/spine1"): 0.5, ("s/leaf1", "s/spine1"): 0.5})
    net, info = fb.compile_fabric(g)
    S = 1e9
    rp = st.route_phase(tr.send_recv([0, 1], [2, 3], S).phases[0], rt.Router(info), "wcmp")
    ecmp = st.route_phase(tr.send_recv([0, 1], [2, 3], S).phases[0], rt.Router(info), "ecmp", seed=3)
    t_ecmp = float(st.phase_time(ecmp, net.capacity, net.latency))
    space = opt.Space(info, (), opt.CostModel())

    def time(n, lg, sharpness=None):
        options = st.EXACT if sharpness is None else st.Options(rates="smooth", sharpness=sharpness)
        return st.phase_time(rp.with_logits(lg["p"]), n.capacity, n.latency, options)

    res = opt.minimize(lambda n, lg: time(n, lg, 256.0), net, space, exact=lambda n, lg: float(time(n, lg)),
                       logits={"p": np.zeros(rp.num_candidates)}, steps=150, optimizer=__import__("optax").adam(0.1))
    ideal = 2 * S / (25e9 + 12.5e9)  # both flows share both spines' capacity, balanced
    assert res.optimized == pytest.approx(ideal, rel=0.01)
    assert res.baseline == pytest.approx(S / 12.5e9, rel=1e-9)  # the even split waits on the slow spine
    assert t_ecmp >= res.optimized


def _line():
    sites = tuple(fb.Site(n, scale_out=SITE, scale_up=None) for n in "abc")
    fleet = fb.Fleet(sites=sites, long_haul=(fb.LongHaul("a", "b", 20e9, 50.0), fb.LongHaul("b", "c", 20e9, 150.0)))
    net, info = fb.compile_fabric(fb.build(fleet))
    router = rt.Router(info)
    ranks = np.arange(info.num_gpus)
    rps = [st.route_phase(ph, router) for ph in tr.all_reduce(ranks, 4e9).phases]
    space = opt.Space(info, (opt.Knob("long_haul/a-b", 10e9, 200e9), opt.Knob("long_haul/b-c", 10e9, 200e9)),
                      opt.CostModel(per_gbps_km=1.0))

    def time(n, lg, sharpness=None):
        options = st.EXACT if sharpness is None else st.Options(rates="smooth", sharpness=sharpness)
        return sum(st.phase_time(rp, n.capacity, n.latency, options) for rp in rps)

    return net, info, space, time


def test_within_one_percent_of_grid_search_with_ten_times_fewer_evaluations():
    net, info, space, time = _line()
    a, b = space.cost_line()
    budget = a + 0.6 * b.sum()
    exact = lambda n, lg: float(time(n, lg))  # noqa: E731
    grid_best, grid_params, grid_evals = opt.grid_search(exact, net, space, 25, budget=budget)
    steps = 25
    res = opt.minimize(lambda n, lg: time(n, lg, 128.0), net, space, exact=exact, budget=budget, steps=steps,
                       optimizer=__import__("optax").adam(0.08))
    assert grid_evals >= 10 * steps
    assert res.optimized <= grid_best * 1.01
    assert res.cost <= budget * (1 + 1e-9)
    random_best, _, random_evals = opt.random_search(exact, net, space, steps, budget=budget, seed=0)
    assert random_evals == steps and res.optimized <= random_best * (1 + 1e-9)


def test_update_step_compiles_once():
    net, info, space, time = _line()
    traces = []

    def objective(n, lg):
        traces.append(1)
        return time(n, lg, 64.0)

    opt.minimize(objective, net, space, exact=lambda n, lg: float(time(n, lg)), steps=15)
    assert len(traces) == 1


def test_rounding_snaps_to_allowed_values_within_budget():
    net, info, space, time = _line()
    space = dataclasses.replace(space, knobs=tuple(dataclasses.replace(k, allowed=(10e9, 50e9, 100e9, 200e9))
                                                   for k in space.knobs))
    a, b = space.cost_line()
    budget = a + 0.5 * b.sum()
    exact = lambda n, lg: float(time(n, lg))  # noqa: E731
    res = opt.minimize(lambda n, lg: time(n, lg, 64.0), net, space, exact=exact, budget=budget, steps=30)
    done = opt.finish(res, net, space, exact, budget=budget)
    rounded = done.result
    for p in rounded.parameters.values():
        assert p["value"] in (10e9, 50e9, 100e9, 200e9)
    assert rounded.cost <= budget * (1 + 1e-12)
    assert rounded.optimized == pytest.approx(exact(rounded.network, {}), rel=1e-12)
    assert done.roundings == 16  # few discrete knobs: every combination of allowed values is tried
    best = min(exact(fb.apply_groups(net, info, {"long_haul/a-b": x, "long_haul/b-c": y}), {})
               for x in (10e9, 50e9, 100e9, 200e9) for y in (10e9, 50e9, 100e9, 200e9)
               if space.cost_at({"long_haul/a-b": x, "long_haul/b-c": y}) <= budget * (1 + 1e-12))
    assert rounded.optimized == pytest.approx(best, rel=1e-12)


def test_refinement_reaches_the_known_optimum_and_certifies_it():
    # the ring crosses both links with the same bytes: the optimum equalises them and spends the budget
    net, info, space, time = _line()
    a, b = space.cost_line()
    budget = a + 0.15 * b.sum()  # 38.5 GB/s each: below the 50 GB/s NICs, the links stay the bottleneck
    exact = lambda n, lg: float(time(n, lg))  # noqa: E731
    price = space.cost_at({"long_haul/a-b": 1.0, "long_haul/b-c": 1.0})  # cost of 1 byte/s on both
    best = budget / price
    res = opt.minimize(lambda n, lg: time(n, lg, 16.0), net, space, exact=exact, budget=budget, steps=10)
    done = opt.finish(res, net, space, exact, budget=budget)
    values = [p["value"] for p in done.result.parameters.values()]
    assert values == pytest.approx([best, best], rel=2e-3)
    assert done.result.cost == pytest.approx(budget, rel=1e-9)
    at_best = exact(fb.apply_groups(net, info, {"long_haul/a-b": best, "long_haul/b-c": best}), {})
    assert done.result.optimized == pytest.approx(at_best, rel=2e-3)
    assert done.check.passed and done.check.moves > 0 and done.check.best_gain <= 1e-3
    # away from the optimum the same check fails, naming the move that helps
    z = space.positions({"long_haul/a-b": 0.5 * best, "long_haul/b-c": best})
    check = opt.optimality_check(lambda z: exact(space.network(net, jnp.asarray(z)), {}), z, space, budget=budget)
    assert not check.passed and "long_haul/a-b up" in check.best_move


def test_pareto_front_is_monotone_and_every_point_certified():
    net, info, space, time = _line()
    exact = lambda n, lg: float(time(n, lg))  # noqa: E731
    budgets = opt.budget_range(space, 5)
    res = opt.minimize(lambda n, lg: time(n, lg, 16.0), net, space, exact=exact, budget=float(budgets[2]), steps=5)
    points = opt.pareto(res, net, space, exact, budgets)
    costs = [p.result.cost for p in points]
    times = [p.result.optimized for p in points]
    assert all(c <= bud * (1 + 1e-12) for c, bud in zip(costs, budgets))
    assert all(t1 <= t0 * (1 + 1e-12) for t0, t1 in zip(times, times[1:]))
    assert all(p.check.passed for p in points)


def test_budget_projection_is_exact():
    rng = np.random.default_rng(0)
    for _ in range(20):
        y = rng.normal(0.5, 1.0, 5)
        b = rng.uniform(0, 2, 5)
        slack = rng.uniform(0, b.sum())
        z = np.asarray(opt.project_budget(jnp.asarray(y), jnp.asarray(b), slack))
        assert (z >= -1e-12).all() and (z <= 1 + 1e-12).all() and b @ z <= slack * (1 + 1e-9) + 1e-12
        # optimality: no feasible random point is closer to y
        for _ in range(200):
            w = np.clip(rng.uniform(0, 1, 5), 0, 1)
            if b @ w <= slack:
                assert np.linalg.norm(w - y) >= np.linalg.norm(z - y) - 1e-9


@pytest.mark.parametrize("make, match", [
    (lambda net, info, space, time: opt.minimize(time, net, space, budget=1.0), "budget: 1 is infeasible"),
    (lambda net, info, space, time: opt.minimize(time, net, dataclasses.replace(space, knobs=())),
     "nothing to optimise"),
    (lambda net, info, space, time: opt.Knob("long_haul/a-b", 5.0, 1.0), "bounds reversed, lower 5.0 > upper 1.0"),
    (lambda net, info, space, time: opt.Space(info, (opt.Knob("long_haul/a-q", 1.0, 2.0),), opt.CostModel()),
     "unknown link group 'long_haul/a-q'"),
    (lambda net, info, space, time: opt.CostModel(per_gbps={"core": 1.0}).link_prices(info),
     "no link has tier 'core'"),
    (lambda net, info, space, time: opt.Knob("x", 0.0, 1.0), r"knobs\[x\].lower: must be > 0"),
])
def test_bad_input(make, match):
    with pytest.raises(ValueError, match=match):
        make(*_line())


def test_the_exact_gradient_polish_reaches_the_same_optimum():
    net, info, space, time = _line()
    a, b = space.cost_line()
    budget = a + 0.15 * b.sum()
    best = budget / space.cost_at({"long_haul/a-b": 1.0, "long_haul/b-c": 1.0})
    exact = lambda n, lg: float(time(n, lg))  # noqa: E731
    res = opt.minimize(lambda n, lg: time(n, lg, 16.0), net, space, exact=exact, budget=budget, steps=3)
    done = opt.finish(res, net, space, exact, budget=budget, gradient=lambda n, lg: time(n, lg))
    assert [p["value"] for p in done.result.parameters.values()] == pytest.approx([best, best], rel=2e-3)
    assert done.check.passed and done.gradients > 0 and done.result.cost <= budget * (1 + 1e-12)
