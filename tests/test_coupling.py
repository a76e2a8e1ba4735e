"""The coupling between training jobs: only jobs that share a link are swept, the sweeps stop at a
tolerance, and the gradient goes through the fixed point (implicit function theorem)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowmodel import fabric as fb
from flowmodel import scenario as sc
from flowmodel import steptime as st
from flowmodel import traffic as tr
from flowmodel.steptime import _fleet
from flowmodel.steptime._training import step_bytes

pytestmark = pytest.mark.filterwarnings("ignore::flowmodel.scenario.ScenarioWarning")

TINY = tr.Model("tiny", layers=8, hidden=1024, ffn_hidden=4096, heads=16, kv_heads=4, vocab=8000, seq_len=2048)
PAR = tr.Parallelism(tp=4, pp=1, dp=4)


def _two_sites():
    clos = fb.Clos(tiers=3, gpus_per_leaf=8, leaves_per_pod=2, spines_per_pod=2, pods=2, aggs_per_plane=2,
                   oversubscription=(1.0, 4.0))
    su = fb.ScaleUp(size=4)
    return fb.Fleet(sites=(fb.Site("a", scale_out=clos, scale_up=su), fb.Site("b", scale_out=clos, scale_up=su)),
                    long_haul=(fb.LongHaul("a", "b", capacity=200e9, length_km=10),))


# site a: ranks 0-31 (pod 0: 0-15, pod 1: 16-31); a and b each take half of each pod, so their DP
# reductions share the spine-aggregation links; c and d sit in site b's two pods apart
A = tr.Training(TINY, PAR, global_batch=16, name="a", ranks=(*range(0, 8), *range(16, 24)))
B = tr.Training(TINY, PAR, global_batch=16, name="b", ranks=(*range(8, 16), *range(24, 32)))
C = tr.Training(TINY, PAR, global_batch=16, name="c", ranks=tuple(range(32, 48)))
D = tr.Training(TINY, PAR, global_batch=32, name="d", ranks=tuple(range(48, 64)))


@pytest.fixture(scope="module")
def coupled():
    return sc.prepare(sc.Scenario("coupled", _two_sites(), training=(A, B, C)))


def _gauss_seidel(model, network, sweeps):
    """The coupling unrolled: ``sweeps`` plain Gauss-Seidel sweeps over every job (the reference)."""
    loads = [step_bytes(p, network.num_links) for p in model.plans]
    times = [jnp.inf] * len(model.plans)
    for _ in range(sweeps):
        for j, plan in enumerate(model.plans):
            others = model.fixed_load + sum(loads[i] / times[i] for i in range(len(times)) if i != j)
            times[j] = st.step_time(plan, network, background=others).step_time
    return jnp.stack(times)


def test_groups_follow_shared_links(coupled):
    assert coupled.groups == ((0, 1), (2,))
    apart = sc.prepare(sc.Scenario("apart", _two_sites(), training=(A, C, D)))
    assert apart.groups == ((0,), (1,), (2,))  # c and d: different pods of site b, no shared link


def test_converged_fixed_point_equals_unrolled_sweeps(coupled):
    fleet = coupled.evaluate()
    assert bool(fleet.converged) and float(fleet.change) <= coupled.options.fleet_tol
    assert 2 <= int(fleet.iterations) < coupled.options.fleet_iterations
    ref = np.asarray(_gauss_seidel(coupled, coupled.network, 40))
    got = np.array([float(fleet.steps[n].step_time) for n in "abc"])
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    alone = sc.prepare(sc.Scenario("c", _two_sites(), training=(C,))).evaluate()
    assert float(fleet.steps["c"].step_time) == pytest.approx(float(alone.step_time), rel=1e-13)
    assert float(fleet.steps["a"].step_time) > float(alone.step_time) * 1.0001  # the shared links cost a


def test_independent_jobs_are_evaluated_once_each(monkeypatch):
    calls = []
    real = _fleet.step_time

    def counting(plan, *args, **kwargs):
        calls.append(plan.job.name)
        return real(plan, *args, **kwargs)

    monkeypatch.setattr(_fleet, "step_time", counting)
    apart = sc.prepare(sc.Scenario("apart", _two_sites(), training=(A, C, D)))
    fleet = apart.fleet()
    assert sorted(calls) == ["a", "c", "d"]
    assert int(fleet.iterations) == 0 and bool(fleet.converged)
    calls.clear()
    sc.prepare(sc.Scenario("coupled", _two_sites(), training=(A, B, C))).fleet()
    # the coupled pair: one traced sweep inside the loop, then each job's result at the fixed point
    assert sorted(calls) == ["a", "a", "b", "b", "c"]


def test_gradient_through_the_fixed_point(coupled):
    net = coupled.network
    grad = np.asarray(jax.grad(lambda n: coupled.fleet(n).steps["a"].step_time)(net).capacity)
    unrolled = np.asarray(jax.grad(lambda n: _gauss_seidel(coupled, n, 40)[0])(net).capacity)
    assert np.abs(grad).max() > 0
    np.testing.assert_allclose(grad, unrolled, rtol=1e-5, atol=1e-6 * np.abs(unrolled).max())
    # b's links reach a only through the coupling: its gradient there is the implicit part
    b_only = np.setdiff1d(_fleet.plan_links(coupled.plans[1]), _fleet.plan_links(coupled.plans[0]))
    assert np.abs(grad[b_only]).max() > 0
    for link in [int(np.argmin(grad)), int(b_only[np.argmax(np.abs(grad[b_only]))])]:
        h = 1e-6 * float(net.capacity[link])
        up = fb.Network(net.capacity.at[link].add(h), net.latency)
        down = fb.Network(net.capacity.at[link].add(-h), net.latency)
        fd = (float(coupled.fleet(up).steps["a"].step_time) - float(coupled.fleet(down).steps["a"].step_time)) / (2 * h)
        assert grad[link] == pytest.approx(fd, rel=1e-4)


def test_fixed_point_kernel_against_a_closed_form():
    """y = a + b / y has the fixed point y* = (a + sqrt(a^2 + 4b)) / 2; dy*/da, dy*/db in closed form."""

    def sweep(theta, y):
        a, b = theta
        return a + b / y

    def solve(a, b):
        return st.fixed_point(sweep, (a, b), jnp.ones(1) * 10.0, 1e-13, 200)[0][0]

    a, b = 1.5, 2.0
    y = (a + np.sqrt(a * a + 4 * b)) / 2
    assert float(solve(a, b)) == pytest.approx(y, rel=1e-12)
    da, db = jax.grad(solve, argnums=(0, 1))(a, b)
    # y^2 = a y + b: dy (2y - a) = y da + db
    assert float(da) == pytest.approx(y / (2 * y - a), rel=1e-9)
    assert float(db) == pytest.approx(1 / (2 * y - a), rel=1e-9)


def test_bad_coupling_options():
    with pytest.raises(ValueError, match="options.fleet_tol: must be > 0, got -1"):
        st.Options(fleet_tol=-1.0)
    with pytest.raises(ValueError, match="options.fleet_iterations"):
        st.Options(fleet_iterations=0)
    model = sc.prepare(sc.Scenario("apart", _two_sites(), training=(A, C)))
    with pytest.raises(ValueError, match="groups: must partition the 2 jobs"):
        st.evaluate_fleet(list(model.plans), model.network, groups=((0,),))
