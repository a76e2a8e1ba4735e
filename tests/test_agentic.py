"""Agentic inference: hand counts of a request's KV bytes, closed-form transfer times where the store,
the host link or the NIC is the bottleneck, the latency's parts, the service's load, routing seeds,
and key-path errors."""

import numpy as np
import pytest
import yaml

from flowmodel import config
from flowmodel import fabric as fb
from flowmodel import scenario as sc
from flowmodel import traffic as tr
from flowmodel.seeds import over_seeds
from flowmodel.steptime import average_load, plan_bytes

SMALL = tr.Model("small", layers=4, hidden=1024, ffn_hidden=4096, heads=8, kv_heads=8, vocab=32000, seq_len=2048)
KV = SMALL.kv_bytes_per_token()  # 2 x 1024 x 4 layers x 2 bytes


def _fleet():
    clos = fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=2, spines_per_pod=2, nic_bandwidth=50e9, latency=0.0)
    return fb.Fleet(sites=(fb.Site("a", scale_out=clos),))


def _service(**kw):
    base = dict(name="agent", model=SMALL, instances=((0, 1, 2, 3), (8, 9, 10, 11)), requests_per_s=2.0,
                context_tokens=10_000, output_tokens=100, turns=3, tool_tokens=50, tool_seconds=0.5,
                prefix_hit_rate=0.6, storage_bandwidth=1e15, host_bandwidth=1e15)
    return tr.Agentic(**{**base, **kw})


def _evaluate(job, training=()):
    model = sc.prepare(sc.Scenario("agentic", _fleet(), training=training, agentic=(job,)))
    return model, model.evaluate()


def test_kv_bytes_by_hand():
    job = _service()
    assert KV == 2 * 1024 * 4 * 2
    assert job.contexts().tolist() == [10_000, 10_150, 10_300]
    b = job.bytes()
    assert b["kv_fetch"] == pytest.approx(0.6 * 10_000 * KV)
    # the cache at each tool call: the call's context and its output, before the tool's 50 tokens
    assert b["kv_offload"] == b["kv_reload"] == pytest.approx((10_100 + 10_250) * KV)
    assert b["kv_write_back"] == pytest.approx((10_300 + 100) * KV)
    no = _service(offload=False, write_back=False, prefix_hit_rate=0.0).bytes()
    assert no == {"kv_fetch": 0.0, "kv_offload": 0.0, "kv_reload": 0.0, "kv_write_back": 0.0}


@pytest.mark.parametrize("limit", ["storage", "host", "nic"])
def test_fetch_time_at_its_bottleneck(limit):
    kw = {"storage": dict(storage_bandwidth=1e9), "host": dict(host_bandwidth=1e9), "nic": {}}[limit]
    job = _service(**kw)
    model, fleet = _evaluate(job)
    fetch = float(fleet.agentic["agent"].breakdown["kv_fetch"])
    total = job.bytes()["kv_fetch"]
    # every instance fetches one request's cache at once, each of its 4 GPUs a quarter
    want = {"storage": 2 * total / 1e9, "host": total / 4 / 1e9, "nic": total / 4 / 50e9}[limit]
    assert fetch == pytest.approx(want, rel=1e-9)


def test_latency_is_the_sum_of_its_parts_and_leaves_the_write_back_out():
    job = _service(host_bandwidth=10e9)
    model, fleet = _evaluate(job)
    r = fleet.agentic["agent"]
    parts = {k: float(v) for k, v in r.breakdown.items()}
    assert float(r.step_time) == pytest.approx(sum(parts.values()), rel=1e-12)
    b = job.bytes()
    assert parts["kv_offload"] == pytest.approx(b["kv_offload"] / 4 / 10e9, rel=1e-9)
    assert parts["kv_reload"] == pytest.approx(b["kv_reload"] / 4 / 10e9, rel=1e-9)
    c = job.compute_times()
    assert parts["tool"] == 2 * 0.5 == c["tool"]
    assert parts["prefill"] == pytest.approx(c["prefill"]) and parts["decode"] == pytest.approx(c["decode"])
    assert "kv_write_back" not in parts and float(r.collectives["kv_write_back"]["seconds"]) > 0
    assert not fleet.jobs and fleet.critical() is None  # a service's latency is not a step time


def test_the_services_load_is_bytes_per_request_times_its_rate():
    job = _service()
    model, fleet = _evaluate(job)
    plan = model.others[0]
    L = model.info.num_links
    per_request = np.asarray(plan_bytes(plan, L))
    # fabric bytes of one request: its fetch down 2 fabric links (spine -> leaf -> GPU), its write-back up 2
    b = job.bytes()
    assert per_request.sum() == pytest.approx(2 * (b["kv_fetch"] + b["kv_write_back"]), rel=1e-12)
    load = np.asarray(average_load(plan, per_request, float(fleet.agentic["agent"].step_time)))
    np.testing.assert_allclose(load, per_request * 2.0)


def test_a_training_job_slows_when_the_service_shares_its_links():
    job = tr.Training(SMALL, tr.Parallelism(tp=4, dp=2), global_batch=8, ranks=(4, 5, 6, 7, 12, 13, 14, 15),
                      name="train")
    alone = sc.prepare(sc.Scenario("alone", _fleet(), training=(job,))).evaluate()
    model, both = _evaluate(_service(requests_per_s=40.0), training=(job,))
    assert model.groups == ((0, 1),)  # coupled through the leaf-spine links
    assert float(both.steps["train"].step_time) > float(alone.steps["train"].step_time)


def test_pinned_phases_are_the_same_under_every_seed():
    model = sc.prepare(sc.Scenario("s", _fleet(), agentic=(_service(),)))
    batch = over_seeds(model, [0, 1, 2]).evaluate()
    latency = np.asarray(batch.agentic["agent"].step_time)
    assert latency.shape == (3,) and np.all(latency == latency[0])
    assert latency[0] == pytest.approx(float(model.evaluate().agentic["agent"].step_time), rel=1e-12)


BASE = """
fabric:
  sites: [{name: a, accelerator: b200_hgx,
           scale_out: {tiers: 2, gpus_per_leaf: 8, leaves_per_pod: 4, spines_per_pod: 4}}]
workloads:
  agentic:
    - name: agent
      model: llama3-70b
      instances: {first_rank: 0, instances: 2, tp: 8}
      requests_per_s: 0.5
      context_tokens: 100000
      output_tokens: 500
      turns: 5
      tool_seconds: 1s
      prefix_hit_rate: 0.5
"""


def _load(**changes):
    data = yaml.safe_load(BASE)
    data["workloads"]["agentic"][0].update(changes)
    return config.parse(data)


def test_a_scenario_file_takes_the_sites_accelerator():
    job = _load().agentic[0]
    b200 = config.hardware.preset("b200_hgx")
    assert job.serving.peak_flops == b200.bf16_flops and job.host_bandwidth == b200.host_bandwidth
    assert job.tool_seconds == 1.0 and job.tp == 8


@pytest.mark.parametrize("changes, message", [
    ({"prefix_hit_rate": -0.1}, "workloads.agentic[0].prefix_hit_rate: must be in [0, 1], got -0.1"),
    ({"instances": {"first_rank": 56, "instances": 2, "tp": 8}}, "workloads.agentic[0].instances: needs GPUs 56..71"),
    ({"tool_seconds": 1}, "workloads.agentic[0].tool_seconds: 1: needs a unit"),
    ({"turns": 0}, "workloads.agentic[0].turns: must be an integer >= 1"),
    ({"storage_bandwidth": "0Gbps"}, "workloads.agentic[0].storage_bandwidth: must be > 0"),
])
def test_bad_agentic_keys_are_named(changes, message):
    with pytest.raises(config.ConfigError) as e:
        _load(**changes)
    assert message in str(e.value)
