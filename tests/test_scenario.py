"""One scenario, one model: every command evaluates the same step time, and every option reaches it."""

import copy
import os

import numpy as np
import pytest
import yaml

from flowmodel import cli, config, optimize, resilience, scenario, seeds, sweep
from flowmodel.steptime import Options

HERE = os.path.dirname(__file__)
CONFIGS = os.path.join(HERE, "..", "configs")
SHIPPED = sorted(f[:-5] for f in os.listdir(CONFIGS) if f.endswith(".yaml"))
LARGE = {"multi_building_129k", "llama3_24k"}  # 129K and 24K GPUs: the slowest to build, route and evaluate


def _commands_agree(name):
    sc = config.load(os.path.join(CONFIGS, f"{name}.yaml"))
    model = scenario.prepare(sc)
    run = cli.fleet_result(model, model.evaluate())["step_time_s"]
    # optimize: the baseline of its exact objective
    baseline = optimize.baseline_value(model.objective()[1], model.network)
    # sweep: one point at the scenario's own values of the grid's groups
    groups = list(sc.sweep.axes) if sc.sweep else [next(iter(model.info.groups))]
    point = sweep.grid(**{g: [model.info.groups[g].value] for g in groups})
    swept = float(sweep.sweep(cli.sweep_evaluation(model), point)["step_time_s"][0])
    # failures: the healthy case of the failure evaluation
    if sc.failures is not None:
        report = resilience.evaluate_failures(model, resilience.failure_scenarios(model)[:1])
        healthy = max(report.healthy.values())
    else:
        healthy = max(resilience.job_step_times(model).values())
    values = {"run": run, "optimize baseline": baseline, "sweep": swept, "failures healthy": healthy}
    for what, v in values.items():
        assert v == pytest.approx(run, rel=1e-9, abs=0), (name, what, values)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in LARGE else n for n in SHIPPED])
def test_every_command_evaluates_the_same_step_time(name):
    _commands_agree(name)


@pytest.mark.slow
def test_every_command_evaluates_the_same_mean_over_seeds():
    """run, sweep, the optimizer's exact objective and the failures' healthy case, over ECMP seeds 0-3."""
    from flowmodel.objectives import planning_objective

    model = scenario.prepare(config.load(os.path.join(CONFIGS, "dsf_vs_ecmp.yaml")))
    batch = seeds.over_seeds(model, range(4))
    run = cli.seeded_result(model, batch.evaluate(), batch.seeds)["step_time_s"]
    group = next(iter(model.info.groups))
    point = sweep.grid(**{group: [model.info.groups[group].value]})
    swept = float(sweep.sweep(cli.sweep_evaluation(model, batch), point)["step_time_s"][0])
    baseline = planning_objective(model, "step_time", seeds=batch.seeds).exact(model.network, None)
    nothing = resilience.Failure("nothing fails")  # a healthy draw: the healthy case's own figures
    healthy = resilience.evaluate_failures(model, [nothing], seeds=batch.seeds).healthy["dp-heavy"]
    values = {"run": run, "sweep": swept, "optimize baseline": baseline, "failures healthy": healthy}
    for what, v in values.items():
        assert v == pytest.approx(run, rel=1e-9, abs=0), (what, values)
    assert run != pytest.approx(float(model.evaluate().step_time), rel=1e-3)  # the mean is not seed 0's value


def test_every_shipped_config_is_checked():
    assert len(SHIPPED) >= 7 and LARGE <= set(SHIPPED)


# A small two-building scenario where every option has something to act on: an oversubscribed
# leaf-spine in each building, a 100 km long-haul link, a TP x PP x DP job across both buildings,
# a prefill/decode service whose KV caches cross the long-haul link, and a background class.
BASE = yaml.safe_load("""
name: walk
fabric:
  sites:
    - name: b
      copies: 2
      scale_up: {size: 8, bandwidth: 400GB/s, latency: 1us}
      scale_out: {tiers: 2, gpus_per_leaf: 8, leaves_per_pod: 8, spines_per_pod: 4, nic_bandwidth: 400Gbps,
                  oversubscription: [2], latency: 1us}
  long_haul:
    - {a: b0, b: b1, capacity: 800Gbps, length: 100km}
  routing: {policy: ecmp}
workloads:
  training:
    - name: job
      model: {name: small, layers: 8, hidden: 2048, ffn_hidden: 8192, heads: 16, kv_heads: 8, vocab: 32000,
              seq_len: 2048}
      parallelism: {tp: 8, pp: 2, dp: 4}
      global_batch: 8
      first_rank: 32
  inference:
    - name: serve
      model: {name: small, layers: 8, hidden: 2048, ffn_hidden: 8192, heads: 16, kv_heads: 8, vocab: 32000,
              seq_len: 2048}
      prefill: {first_rank: 0, instances: 2, tp: 8}
      decode: {first_rank: 96, instances: 2, tp: 8}
      requests_per_s: 20
      prompt_tokens: 4096
  background:
    - {name: storage, src: [16, 17, 18, 19], dst: [112, 113, 114, 115], rate: 5GB/s}
""")

KEEP = object()  # the base scenario's value

# section -> key -> (edit of the base as {key path: value}, the values A and B, what to compare)
# or a string: why the key cannot change this scenario's result.
ROUTING = "fabric.routing"
MODEL = "model"
JOB = "workloads.training[0]"
PAR = "workloads.training[0].parallelism"
INF = "workloads.inference[0]"
BG = "workloads.background[0]"
WALK = {
    ROUTING: {
        "policy": ({}, "ecmp", "spray", "step"),
        "max_paths": ({f"{ROUTING}.policy": "spray"}, 1, 16, "step"),
        "site_paths": "two buildings joined by one link: there is one site-level path",
        "seed": ({"fabric.long_haul[0].capacity": "25.6Tbps"}, 0, 3, "step"),  # collisions in the Clos matter
        "qps": ({f"{ROUTING}.policy": "qp_scaling"}, 1, 8, "step"),
        "seeds": ({"fabric.long_haul[0].capacity": "25.6Tbps"}, 1, 4, "mean"),  # the mean over seeds 0-3
    },
    MODEL: {
        "sharpness": ({}, 8.0, 64.0, "smooth"),
        "step_latency": ({}, 0.0, "100us", "step"),
        "window": ({}, None, "1MB", "step"),
        "queueing": ({}, False, True, "step"),
        "packet": ({f"{MODEL}.queueing": True}, "1KB", "64KB", "step"),
        "buffer": ({f"{MODEL}.queueing": True}, "64KB", "64MB", "step"),
        "fleet_iterations": "one training job: the coupling between jobs needs a second one (tests/test_coupling.py)",
        "fleet_tolerance": "one training job: the coupling between jobs needs a second one (tests/test_coupling.py)",
        "transport": ({}, None, "dctcp", "step"),
        "protocol": ({}, "simple", "nccl", "step"),
        "nccl_latency_scale": ({f"{MODEL}.protocol": "nccl"}, 1.0, 0.5, "step"),
        "nccl_floor": ({f"{MODEL}.protocol": "nccl"}, 0.0, "1ms", "step"),
        "engine": "where the kernels run, never the numbers: host and xla agree to 1e-12 (tests/test_engine_paths.py)",
    },
    JOB: {
        "name": "a label",
        "model": ({f"{JOB}.model.layers": 4}, KEEP, {**BASE["workloads"]["training"][0]["model"], "layers": 8},
                  "step"),
        "parallelism": "a section (walked key by key)",
        "global_batch": ({}, 8, 16, "step"),
        "micro_batch": ({f"{JOB}.global_batch": 16}, 1, 2, "step"),
        "efficiency": ({}, 0.5, 0.25, "step"),
        "peak_flops": ({}, 989e12, 400e12, "step"),
        "grad_bytes": ({}, 2, 4, "step"),
        "algorithm": ({}, "ring", "tree", "step"),
        "first_rank": ({f"{BG}.src": [0, 1, 2, 3]}, 32, 0, "step"),
        "hbm": "a guard: the job's estimated memory per GPU must fit in it (tests/test_front_door.py)",
        "tokens": "how much to train: used by the reliability section (tests/test_reliability.py)",
        "steps": "how much to train: used by the reliability section (tests/test_reliability.py)",
        "zero_stage": "memory per GPU only: its hand count is in tests/test_front_door.py",
        "optimizer_bytes": "memory per GPU only: its hand count is in tests/test_front_door.py",
        "recompute": ({}, "none", "full", "step"),
        # DP rings with two GPUs per domain on sprayed, non-blocking leaves: two NICs, or one (under ECMP here
        # the hash collisions bound both alike)
        "channels": ({f"{PAR}.tp": 4, f"{PAR}.pp": 1, f"{PAR}.dp": 8, f"{ROUTING}.policy": "spray",
                      "fabric.sites[0].scale_out.oversubscription": [1]}, None, 1, "step"),
    },
    PAR: {
        "tp": ({}, KEEP, 4, "step"),
        "pp": ({}, KEEP, 1, "step"),
        "dp": ({f"{PAR}.pp": 1, f"{JOB}.global_batch": 16}, 8, 4, "step"),
        "cp": ({f"{PAR}.dp": 2}, 1, 2, "step"),
        "ep": "the model has no experts",
        "virtual_stages": ({f"{JOB}.global_batch": 16}, 1, 2, "step"),
        "order": ({}, KEEP, ["tp", "cp", "dp", "pp"], "step"),
        "tp_across_domains": "TP groups fit in one scale-up domain: it only permits other placements",
    },
    INF: {
        "name": "a label",
        "model": ({}, KEEP, "llama3-405b", "kv"),
        "prefill": ({}, KEEP, {"first_rank": 64, "instances": 2, "tp": 8}, "kv"),  # next to decode
        "decode": ({}, KEEP, {"first_rank": 16, "instances": 2, "tp": 8}, "kv"),  # next to prefill
        "requests_per_s": ({}, KEEP, 60, "step"),
        "prompt_tokens": ({}, KEEP, 1024, "kv"),
    },
    BG: {
        "name": "a label",
        "src": ({}, KEEP, [116, 117, 118, 119], "step"),  # no longer across the long-haul link
        "dst": ({}, KEEP, [40, 48, 56, 64], "step"),
        "rate": ({}, KEEP, "10GB/s", "step"),
    },
}
SPECS = {ROUTING: config.ROUTING, MODEL: config.OPTIONS, JOB: config.TRAINING, PAR: config.PARALLELISM,
         INF: config.INFERENCE, BG: config.BACKGROUND}


def _set(data, path, value):
    if value is KEEP:
        return
    keys = [k for part in path.split(".") for k in part.replace("]", "").split("[")]
    node = data
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node.setdefault(k, {})
    last = keys[-1]
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value


_MEASURED = {}


def _measure(data, what):
    key = (yaml.safe_dump(data), what)  # the base case is measured once for all keys
    if key not in _MEASURED:
        _MEASURED[key] = _measure_now(data, what)
    return _MEASURED[key]


def _measure_now(data, what):
    model = scenario.prepare(config.parse(data))
    if what == "smooth":
        return float(model.step_time(options=model.options.relaxed()))
    if what == "mean":  # what the commands report: the mean over the routing seeds
        return float(np.mean(seeds.over_seeds(model).fleet().step_time))
    fleet = model.fleet()  # eager: the kernels compile once per shape, not one program per case
    return float(fleet.step_time) if what == "step" else float(fleet.kv_transfer_s["serve"])


def test_the_walk_covers_every_key_of_the_schema():
    for section, spec in SPECS.items():
        assert set(WALK[section]) == set(spec), section


CASES = [(section, key) for section, keys in WALK.items() for key, case in keys.items() if not isinstance(case, str)]


@pytest.mark.slow
@pytest.mark.parametrize("section, key", CASES, ids=[f"{s}.{k}" for s, k in CASES])
def test_every_option_changes_the_result_where_it_matters(section, key):
    edits, a, b, what = WALK[section][key]
    data = copy.deepcopy(BASE)
    for path, value in edits.items():
        _set(data, path, value)
    results = []
    for value in (a, b):
        case = copy.deepcopy(data)
        _set(case, f"{section}.{key}", value)
        results.append(_measure(case, what))
    assert np.isfinite(results).all()
    assert results[0] != pytest.approx(results[1], rel=1e-6), (section, key, results)


def test_qps_one_is_ecmp_and_more_queue_pairs_help():
    data = copy.deepcopy(BASE)
    ecmp = _measure(data, "step")
    data["fabric"]["routing"] = {"policy": "qp_scaling", "qps": 1}
    assert _measure(data, "step") == pytest.approx(ecmp, rel=1e-12)
    data["fabric"]["routing"]["qps"] = 8
    assert _measure(data, "step") < ecmp


def test_python_scenario_equals_the_yaml_one():
    from flowmodel import fabric as fb

    sc = config.parse(copy.deepcopy(BASE))
    again = scenario.Scenario(sc.name, fb.Fleet(sites=sc.fleet.sites, long_haul=sc.fleet.long_haul),
                              routing=scenario.Routing(), training=sc.training, inference=sc.inference,
                              background=sc.background, options=Options())
    assert float(scenario.prepare(again).evaluate().step_time) == float(scenario.prepare(sc).evaluate().step_time)
    with pytest.raises(ValueError, match=r"routing.qps: must be an integer >= 1, got 0"):
        scenario.Routing(qps=0)
    with pytest.raises(ValueError, match="workloads: needs at least one training job or inference service"):
        scenario.Scenario("empty", sc.fleet)
