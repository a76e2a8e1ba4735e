"""The planner's objectives: throughput is the GPU-weighted mean, expected weighs failures by their
probability, and a config that names an objective without its section is refused by key."""

import jax
import numpy as np
import pytest
import yaml

from flowmodel import config, resilience
from flowmodel import scenario as sc
from flowmodel.objectives import planning_objective

pytestmark = pytest.mark.filterwarnings("ignore::flowmodel.scenario.ScenarioWarning")

# two buildings joined by one long-haul link; a job across both, a smaller one inside b0
TEXT = """
name: two_jobs
fabric:
  sites:
    - name: b
      copies: 2
      scale_up: {size: 4, bandwidth: 400GB/s, latency: 1us}
      scale_out: {tiers: 2, gpus_per_leaf: 4, leaves_per_pod: 4, spines_per_pod: 2, nic_bandwidth: 400Gbps,
                  oversubscription: [2], latency: 1us}
  long_haul:
    - {a: b0, b: b1, capacity: 800Gbps, length: 100km}
workloads:
  training:
    - {name: big, model: {name: s, layers: 4, hidden: 1024, ffn_hidden: 4096, heads: 8, kv_heads: 8, vocab: 32000,
                          seq_len: 2048}, parallelism: {tp: 4, dp: 4}, global_batch: 8, first_rank: 8}
    - {name: small, model: {name: s, layers: 4, hidden: 2048, ffn_hidden: 8192, heads: 8, kv_heads: 8, vocab: 32000,
                            seq_len: 2048}, parallelism: {tp: 4, dp: 2}, global_batch: 4, first_rank: 0}
optimize:
  knobs:
    - {group: b0/leaf_up, lower: 1, upper: 4}
    - {group: b1/leaf_up, lower: 1, upper: 4}
    - {group: long_haul/b0-b1, lower: 100Gbps, upper: 3.2Tbps}
  cost: {per_gbps: {leaf_spine: 1.0}}
"""


def _scenario(**optimize):
    doc = yaml.safe_load(TEXT)
    doc["optimize"].update(optimize)
    return config.parse(doc)


@pytest.fixture(scope="module")
def model():
    return sc.prepare(_scenario())


def test_throughput_is_the_gpu_weighted_mean(model):
    fleet = model.evaluate()
    big, small = (float(fleet.steps[n].step_time) for n in ("big", "small"))
    assert big != pytest.approx(small, rel=1e-3)  # the two jobs differ, so the weighting matters
    objective = planning_objective(model, "throughput")
    assert objective.exact(model.network, None) == pytest.approx((16 * big + 8 * small) / 24, rel=1e-12)
    assert planning_objective(model, "step_time").exact(model.network, None) == pytest.approx(max(big, small))
    # the slowest job's step time sees one job's links; the weighted mean sees both jobs'
    slowest = planning_objective(model, "step_time").differentiable
    g_max = np.asarray(jax.grad(lambda n: slowest(n, None))(model.network).capacity)
    g_mean = np.asarray(jax.grad(lambda n: objective.differentiable(n, None))(model.network).capacity)
    assert (np.abs(g_mean) > 0).sum() > (np.abs(g_max) > 0).sum()


def test_expected_follows_the_probability_formula():
    base = yaml.safe_load(TEXT)
    values = {}
    for p in (0.5, 1e-4):
        doc = dict(base, failures={"tiers": ["long_haul"], "fraction": 0.25, "probability": p,
                                 "healthy_weight": 2.0})
        m = sc.prepare(config.parse(doc))
        failure = resilience.failure_scenarios(m)
        assert len(failure) == 1
        cut = resilience.failed(m, failure[0])
        t_h, t_f = float(m.evaluate().step_time), float(cut.evaluate().step_time)
        values[p] = planning_objective(m, "expected").exact(m.network, None)
        assert values[p] == pytest.approx((2.0 * t_h + p * t_f) / (2.0 + p), rel=1e-12)
    assert values[0.5] != pytest.approx(values[1e-4], rel=1e-6)


@pytest.mark.parametrize("optimize, match", [
    ({"objective": "fastest"}, "optimize.objective: unknown objective 'fastest'"),
    ({"objective": "expected"}, "optimize.objective: expected needs a failures section"),
    ({"objective": "time_to_train"}, "optimize.objective: time_to_train needs a reliability section"),
    ({"search": "newton"}, "optimize.search: must be smooth or exact, got 'newton'"),
    ({"kv_weight": -1.0}, "optimize.kv_weight: must be >= 0"),
])
def test_bad_objectives_name_the_key(optimize, match):
    with pytest.raises(ValueError, match=match):
        _scenario(**optimize)


def test_wcmp_splits_join_the_search():
    import optax

    from flowmodel import optimize

    doc = yaml.safe_load(TEXT)
    doc["fabric"]["routing"] = {"policy": "wcmp", "max_paths": 4}
    doc["optimize"]["routing"] = "wcmp"
    m = sc.prepare(config.parse(doc))
    logits = m.split_logits()
    assert logits and all(k.split("/", 1)[0] in ("0", "1") for k in logits)
    objective = planning_objective(m, "throughput", search="exact")
    start = {k: jax.numpy.asarray(v) for k, v in logits.items()}
    g = jax.grad(lambda lg: objective.differentiable(m.network, lg))(start)
    assert max(float(np.abs(v).max()) for v in g.values()) > 0  # the splits move the objective
    space = optimize.Space(m.info, m.scenario.optimize.knobs, m.scenario.optimize.cost)
    res = optimize.minimize(objective.search, m.network, space, exact=objective.exact, logits=logits, steps=8,
                            optimizer=optax.adam(0.05))
    assert res.baseline == pytest.approx(objective.exact(m.network, None), rel=1e-12)  # zeros: the as-built split
    assert res.optimized <= res.baseline * (1 + 1e-12)
    assert any(np.abs(np.asarray(v)).max() > 0 for v in res.logits.values())


def test_wcmp_routing_needs_a_policy_with_weights():
    doc = yaml.safe_load(TEXT)
    doc["optimize"]["routing"] = "wcmp"
    with pytest.raises(ValueError, match="optimize.routing: wcmp knobs need split weights, but fabric.routing.policy"):
        config.parse(doc)
    doc["fabric"]["routing"] = {"policy": "wcmp"}
    doc["optimize"]["objective"] = "expected"
    doc["failures"] = {"tiers": ["long_haul"]}
    with pytest.raises(ValueError, match="optimize.routing: wcmp splits are searched with the step_time or throughput"):
        config.parse(doc)
