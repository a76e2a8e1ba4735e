"""Failure scenarios: re-routing, expected and tail step time, disconnection, batched degradations."""

import numpy as np
import pytest

from flowmodel import fabric as fb
from flowmodel import resilience as rs
from flowmodel import scenario as sc
from flowmodel import steptime as st
from flowmodel import traffic as tr

TINY = tr.Model("tiny", layers=4, hidden=1024, ffn_hidden=4096, heads=16, kv_heads=4, vocab=8000, seq_len=2048)
SITE = fb.Clos(tiers=2, gpus_per_leaf=4, leaves_per_pod=2, spines_per_pod=2, latency=1e-6)


def _ring():
    sites = tuple(fb.Site(n, scale_out=SITE, scale_up=fb.ScaleUp(size=4)) for n in "abc")
    return fb.Fleet(sites=sites, long_haul=fb.ring("abc", capacity=[40e9, 40e9, 40e9], length_km=[100.0, 300.0, 200.0]))


JOB = tr.Training(TINY, tr.Parallelism(tp=4, pp=1, dp=4), global_batch=8, name="ab", ranks=tuple(range(16)))


def _model(*jobs):
    return sc.prepare(sc.Scenario("ring", _ring(), training=jobs or (JOB,)))


def test_long_haul_failures_reroute_round_the_ring():
    model = _model()
    scenarios = rs.single_failures(model.graph, tiers=("long_haul",))
    assert len(scenarios) == 3
    report = rs.evaluate_failures(model, scenarios)
    t = report.step_times["ab"]
    assert np.isfinite(t).all()  # a ring survives any single cut
    assert (t >= report.healthy["ab"] * (1 - 1e-9)).all()
    cut = report.scenarios.index("a/border-b/border down")
    assert report.worst["ab"][0] == report.scenarios[cut]  # losing the job's own link costs most
    assert t[cut] > report.healthy["ab"] * 1.05  # it now crosses 500 km and shares two links
    # weights 1 (healthy) and 1 per failure: (t_h + sum t_i) / 4
    assert report.expected["ab"] == pytest.approx((report.healthy["ab"] + t.sum()) / 4)
    assert report.p99["ab"] == pytest.approx(t.max())
    again = rs.evaluate_failures(model, scenarios)
    np.testing.assert_array_equal(again.step_times["ab"], t)  # deterministic


def test_a_job_that_loses_its_site_or_path_is_reported():
    other = tr.Training(TINY, tr.Parallelism(tp=4, pp=1, dp=2), global_batch=4, name="c", ranks=tuple(range(16, 24)))
    cut_a = rs.Failure("a isolated", cables=("long_haul/a-b", "long_haul/c-a"), probability=0.5)
    site_c = rs.Failure("site c down", sites=("c",), probability=0.5)
    report = rs.evaluate_failures(_model(JOB, other), [cut_a, site_c])
    assert report.disconnected["ab"] == ["a isolated"] and report.disconnected["c"] == ["site c down"]
    assert np.isinf(report.step_times["ab"][0]) and np.isfinite(report.step_times["ab"][1])
    assert np.isfinite(report.step_times["c"][0])
    assert report.p99["ab"] == np.inf and np.isfinite(report.expected["ab"])


def test_degradations_in_one_vmap_match_a_loop_and_only_slow_down():
    model = _model()
    net, info, plan = model.network, model.info, model.plans[0]
    lh = info.links_where(tier="long_haul")
    rng = np.random.default_rng(0)
    masks = np.ones((6, info.num_links))
    for i in range(1, 6):
        masks[i, lh] = rng.uniform(0.2, 1.0, lh.size)
    batched = np.asarray(rs.degraded_step_times(model, masks))
    loop = [float(st.step_time(plan, fb.Network(capacity=net.capacity * m, latency=net.latency)).step_time)
            for m in masks]
    np.testing.assert_allclose(batched, loop, rtol=1e-9)
    assert np.isfinite(batched).all() and (batched[1:] >= batched[0] * (1 - 1e-12)).all()
    with pytest.raises(ValueError, match=r"masks\[0, 3\]: must be in \(0, 1\]"):
        bad = masks.copy()
        bad[0, 3] = 0.0
        rs.degraded_step_times(model, bad)


def test_bad_scenarios():
    model = _model()
    with pytest.raises(ValueError, match="scenarios: none given"):
        rs.evaluate_failures(model, [])
    with pytest.raises(ValueError, match="probabilities must be > 0"):
        rs.evaluate_failures(model, [rs.Failure("x", cables=("long_haul/a-b",), probability=0.0)])
    with pytest.raises(ValueError, match="no cable, switch or site matches"):
        rs.single_failures(model.graph, tiers=("core",))
    with pytest.raises(ValueError, match="failures.switches: unknown node 'a/spine9'"):
        rs.evaluate_failures(model, [rs.Failure("x", switches=("a/spine9",))])
    with pytest.raises(ValueError, match="failures: the scenario has no failures section"):
        rs.failure_scenarios(model)


def test_resilience_aware_plan_buys_the_detour():
    from flowmodel import optimize as opt

    model = _model()
    net, info = model.network, model.info
    groups = ["long_haul/a-b", "long_haul/b-c", "long_haul/c-a"]
    space = opt.Space(info, tuple(opt.Knob(n, 10e9, 200e9) for n in groups), opt.CostModel(per_gbps_km=1.0))
    a, b = space.cost_line()
    budget = a + 0.35 * b.sum()
    cut = rs.Failure("a-b cut", cables=("long_haul/a-b",), probability=1.0)
    plain = model.objective()
    aware_obj, aware_exact, lost = rs.expected_objective(model, [cut], groups)
    assert lost == []
    free = opt.minimize(plain[0], net, space, exact=plain[1], budget=budget, steps=60)
    aware = opt.minimize(aware_obj, net, space, exact=aware_exact, budget=budget, steps=60)
    detour = lambda res: res.parameters["long_haul/b-c"]["value"] + res.parameters["long_haul/c-a"]["value"]  # noqa
    assert detour(aware) > detour(free) * 1.2  # capacity moves onto the path the cut leaves
    assert aware.parameters["long_haul/a-b"]["value"] < free.parameters["long_haul/a-b"]["value"]
    assert aware_exact(aware.network, {}) < aware_exact(free.network, {}) * 0.99  # lower expected step time
    values = fb.group_values(aware.network, info, groups)
    for n in groups:
        assert float(values[n]) == pytest.approx(aware.parameters[n]["value"], rel=1e-12)


def test_sampled_independent_failures():
    model = _model()
    g = model.graph
    samples = rs.sampled_failures(g, {"long_haul": 0.3, "spine": 0.1}, 40, seed=1)
    assert len(samples) == 40 and sum(s.probability for s in samples) == pytest.approx(1.0)
    again = rs.sampled_failures(g, {"long_haul": 0.3, "spine": 0.1}, 40, seed=1)
    assert [s.name for s in samples] == [s.name for s in again]
    cuts = np.mean([len(s.cables) for s in samples])
    assert 0.3 < cuts < 2.0  # 3 long-haul cables at p = 0.3: 0.9 expected
    report = rs.evaluate_failures(model, samples[:8])
    t = report.step_times["ab"]
    assert not np.isnan(t).any()
    assert set(report.disconnected["ab"]) == {samples[i].name for i in np.flatnonzero(np.isinf(t))}
    with pytest.raises(ValueError, match=r"probabilities\[core\]: no cable tier or switch kind"):
        rs.sampled_failures(g, {"core": 0.1}, 5)


def test_expected_weighs_healthy_and_each_probability_as_the_optimizer_does():
    model = _model()
    cuts = [rs.Failure(f.name, cables=f.cables, probability=p)
            for f, p in zip(rs.single_failures(model.graph, tiers=("long_haul",)), (0.5, 0.01, 0.2))]
    for w in (2.0, 0.0, 1e-6):
        report = rs.evaluate_failures(model, cuts, healthy_weight=w)
        t, t_h = report.step_times["ab"], report.healthy["ab"]
        by_hand = (w * t_h + 0.5 * t[0] + 0.01 * t[1] + 0.2 * t[2]) / (w + 0.71)
        assert report.expected["ab"] == pytest.approx(by_hand, rel=1e-12)
        cases, lost = rs.expected_cases(model, cuts, healthy_weight=w)
        assert lost == [] and sum(c[0] for c in cases) == pytest.approx(1.0)
        exact = sum(c[0] * float(c[1].evaluate().step_time) for c in cases)
        assert exact == pytest.approx(report.expected["ab"], rel=1e-12)  # one expectation, CLI and optimizer
    with pytest.raises(ValueError, match="healthy_weight: must be >= 0"):
        rs.evaluate_failures(model, cuts, healthy_weight=-1.0)
