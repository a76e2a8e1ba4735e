"""RL post-training: hand counts of the weight sync's and the rollouts' bytes, closed-form iteration
times on one NVSwitch domain, the generation roofline, gradients, and key-path errors."""

import math

import jax
import numpy as np
import pytest
import yaml

from flowmodel import config
from flowmodel import fabric as fb
from flowmodel import scenario as sc
from flowmodel import traffic as tr
from flowmodel.steptime import step_bytes, step_time

B = 400e9  # the domain's per-GPU bandwidth, each way
SMALL = tr.Model("small", layers=4, hidden=1024, ffn_hidden=4096, heads=8, kv_heads=8, vocab=32000, seq_len=2048)


def _fleet(size=8, bandwidth=B):
    return fb.Fleet(sites=(fb.Site("a", scale_up=fb.ScaleUp(size=size, bandwidth=bandwidth, latency=0.0)),))


def _rl(**kw):
    trainer = tr.Training(SMALL, tr.Parallelism(tp=4), global_batch=4, ranks=(0, 1, 2, 3), name="t")
    base = dict(name="rl", trainer=trainer, rollouts=8, prompt_tokens=128, response_tokens=256,
                generators=((4, 5, 6, 7),))
    return tr.RL(**{**base, **kw})


def _model(job, fleet=None):
    return sc.prepare(sc.Scenario("rl", fleet or _fleet(), rl=(job,)))


def _parts(model):
    r = model.evaluate().rl["rl"]
    return float(r.step_time), {k: float(v) for k, v in r.breakdown.items()}


def test_broadcast_bytes_by_hand():
    job = _rl(bucket_bytes=10e6)
    W = SMALL.params * SMALL.dtype_bytes
    assert job.sync_bytes == W and job.buckets == math.ceil(W / 10e6)
    model = _model(job)
    plan = model.others[0]
    # one bucket down the chain 0 -> 4 -> 5 -> 6 -> 7: every generator GPU receives every bucket
    assert plan.sync.phase.src.tolist() == [0, 4, 5, 6] and plan.sync.phase.dst.tolist() == [4, 5, 6, 7]
    np.testing.assert_allclose(plan.sync.phase.bytes, W / job.buckets)
    assert plan.sync_calls * plan.sync.phase.bytes.sum() == pytest.approx(4 * W)
    # the rollouts: 8 sequences of 128 + 256 tokens at 8 bytes, from the instance's first GPU to the trainer's
    assert plan.rollout.phase.src.tolist() == [4] and plan.rollout.phase.dst.tolist() == [0]
    assert plan.rollout.phase.bytes.tolist() == [8 * 384 * 8]
    # per iteration on the fabric: the trainer's step, the buckets and the rollouts (NVSwitch: 2 hops a flow)
    L = model.info.num_links
    trainer = float(np.asarray(step_bytes(plan.trainer, L)).sum())
    assert float(np.asarray(plan.bytes(L)).sum()) == pytest.approx(trainer + 2 * (4 * W + 8 * 384 * 8), rel=1e-12)


def test_p2p_reshard_by_hand():
    # trainer TP4 -> generators TP2: trainer rank t holds a quarter of every layer, generator rank k half
    job = _rl(sync="p2p", generators=((4, 5), (6, 7)))
    plan = _model(job).others[0]
    W = job.sync_bytes
    ph = plan.sync.phase
    pairs = sorted(zip(ph.src.tolist(), ph.dst.tolist(), ph.bytes.tolist()))
    want = sorted([(0, 4, W / 4), (1, 4, W / 4), (2, 5, W / 4), (3, 5, W / 4),
                   (0, 6, W / 4), (1, 6, W / 4), (2, 7, W / 4), (3, 7, W / 4)])
    assert [p[:2] for p in pairs] == [p[:2] for p in want]
    np.testing.assert_allclose([p[2] for p in pairs], [p[2] for p in want])
    for g in (4, 5, 6, 7):  # every generator GPU gets exactly its shard
        assert ph.bytes[ph.dst == g].sum() == pytest.approx(W / 2)


def test_colocated_p2p_in_the_same_layout_moves_nothing():
    job = _rl(sync="p2p", generators=(), generator_tp=4)
    plan = _model(job, _fleet(4)).others[0]
    assert plan.sync is None and plan.rollout is None  # every piece and rollout stays on its GPU
    assert job.instances.tolist() == [[0, 1, 2, 3]]
    # from host memory, each GPU still reads its own quarter over its host link
    host = _model(_rl(sync="p2p", generators=(), generator_tp=4, weights_in_host=True, host_bandwidth=64e9),
                  _fleet(4))
    assert host.others[0].sync is None
    assert _parts(host)[1]["weight_sync"] == pytest.approx(job.sync_bytes / 4 / 64e9, rel=1e-9)
    report = host.evaluate().rl["rl"].collectives["weight_sync"]
    assert np.isfinite(float(report["bound_seconds"])) and float(report["efficiency"]) == pytest.approx(1.0)


def test_iteration_closed_form_on_one_switch():
    job = _rl(bucket_bytes=1e9)
    model = _model(job)
    total, parts = _parts(model)
    W = job.sync_bytes
    trainer = float(step_time(model.others[0].trainer, model.network).step_time)
    assert parts["weight_sync"] == pytest.approx(W / B, rel=1e-9)  # a pipelined chain: every link carries W
    assert parts["rollout_transfer"] == pytest.approx(8 * 384 * 8 / B, rel=1e-9)
    assert parts["training"] == pytest.approx(trainer, rel=1e-12)
    assert parts["generation"] == pytest.approx(job.generation_seconds(), rel=1e-12)
    assert total == pytest.approx(sum(parts.values()), rel=1e-12)
    # p2p: each generator GPU fetches its quarter straight from the trainer rank that holds it
    p2p = _parts(_model(_rl(sync="p2p")))[1]
    assert p2p["weight_sync"] == pytest.approx(W / 4 / B, rel=1e-9)
    # weights waiting in host memory: every bucket crosses its owner's 64 GB/s host link first
    host = _parts(_model(_rl(bucket_bytes=1e9, weights_in_host=True, host_bandwidth=64e9)))[1]
    assert host["weight_sync"] == pytest.approx(W / 64e9, rel=1e-9)


def test_one_step_off_hides_generation_behind_training():
    sync_total, sync_parts = _parts(_model(_rl()))
    off_total, off = _parts(_model(_rl(schedule="one_step_off")))
    hidden = max(sync_parts["generation"] + sync_parts["rollout_transfer"], sync_parts["training"])
    assert off_total == pytest.approx(hidden + sync_parts["weight_sync"], rel=1e-12)
    assert off_total < sync_total


def test_generation_roofline_by_hand():
    s = tr.Serving(peak_flops=1e15, hbm_bandwidth=2e12, efficiency=0.5)
    m = SMALL
    # prefill: 2 x active params per token + causal attention 4 x layers x heads x head_dim x tokens x (ctx + t/2)
    flops = 2 * m.active_params * 100 + 4 * 4 * 8 * 128 * 100 * (50 + 50)
    assert s.prefill(m, 100, 50, 2) == pytest.approx(flops / (2 * 1e15 * 0.5))
    # decode: memory-bound at batch 1 (weights + KV at the mean context, per GPU)
    kv = m.kv_bytes_per_token()
    memory = (m.params * 2 + 1 * (1000 + 5) * kv) / 2 / 2e12
    assert s.decode(m, 10, 1, 1000, 2) == pytest.approx(10 * memory)
    # an RL instance prefills its batch prompt by prompt (each attends to itself), then decodes the batch
    job = _rl(serving=s, rollouts=8, prompt_tokens=128, response_tokens=256)
    assert job.generation_seconds() == pytest.approx(8 * s.prefill(m, 128, 0, 4) + s.decode(m, 256, 8, 128, 4))


def test_gradient_matches_finite_differences():
    model = _model(_rl(bucket_bytes=1e9, sync="p2p", generators=((4, 5), (6, 7))))
    net = model.network

    def f(capacity):
        return model.fleet(fb.Network(capacity=capacity, latency=net.latency)).rl["rl"].step_time

    grad = np.asarray(jax.grad(f)(net.capacity))
    assert np.count_nonzero(grad) > 0
    for i in np.flatnonzero(grad)[:3]:
        h = 1e-6 * float(net.capacity[i])
        e = np.zeros(grad.shape)
        e[i] = h
        fd = (float(f(net.capacity + e)) - float(f(net.capacity - e))) / (2 * h)
        assert grad[i] == pytest.approx(fd, rel=1e-5)


BASE = """
fabric:
  sites: [{name: a, accelerator: h100_hgx,
           scale_out: {tiers: 2, gpus_per_leaf: 8, leaves_per_pod: 4, spines_per_pod: 4}}]
workloads:
  rl:
    - name: rl
      trainer: {model: llama3-8b, parallelism: {tp: 8}, global_batch: 8, first_rank: 0}
      generators: {first_rank: 8, instances: 2, tp: 8}
      rollouts: 16
      prompt_tokens: 256
      response_tokens: 512
"""


def _load(**changes):
    data = yaml.safe_load(BASE)
    job = data["workloads"]["rl"][0]
    for k, v in changes.items():
        if v is None:
            job.pop(k)
        else:
            job[k] = v
    return config.parse(data)


def test_a_scenario_file_fills_the_generators_figures_from_the_site():
    job = _load().rl[0]
    h100 = config.hardware.preset("h100_hgx")
    assert job.serving.peak_flops == h100.bf16_flops and job.serving.hbm_bandwidth == h100.hbm_bandwidth
    assert job.trainer.name == "rl/trainer" and job.trainer.ranks == tuple(range(8))
    assert job.instances.tolist() == [list(range(8, 16)), list(range(16, 24))]


@pytest.mark.parametrize("changes, message", [
    ({"sync": "gossip"}, "workloads.rl[0].sync: must be one of broadcast, p2p, got 'gossip'"),
    ({"generators": None, "generator_tp": 3}, "workloads.rl[0].generator_tp: 3 does not divide the trainer's 8"),
    ({"generators": {"first_rank": 4, "instances": 1, "tp": 8}}, "workloads.rl[0].generators: GPU rank 4 is also"),
    ({"generators": {"first_rank": 8, "instances": 0, "tp": 8}}, "workloads.rl[0].generators: instances and tp"),
    ({"generators": {"first_rank": 30, "instances": 1, "tp": 8}}, "workloads.rl[0].generators: needs GPUs 30..37"),
    ({"generators": None, "schedule": "one_step_off"}, "workloads.rl[0].schedule: one_step_off needs generators"),
    ({"rollouts": 1}, "workloads.rl[0].rollouts: 1 rollouts leave some of the 2 generator instances idle"),
    ({"bucket": "0GB"}, "workloads.rl[0].bucket: must be > 0"),
    ({"efficiency": 1.5}, "workloads.rl[0].efficiency: must be in (0, 1]"),
    ({"prompt_tokens": None}, "workloads.rl[0].prompt_tokens: is required"),
])
def test_bad_rl_keys_are_named(changes, message):
    with pytest.raises(config.ConfigError) as e:
        _load(**changes)
    assert message in str(e.value)


def test_broadcast_channels_cross_domains_through_different_nics():
    # two 4-GPU NVLink domains joined by one leaf; each GPU has a 50 GB/s NIC
    clos = fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=1, spines_per_pod=1, nic_bandwidth=50e9, latency=0.0)
    fleet = fb.Fleet(sites=(fb.Site("a", scale_up=fb.ScaleUp(size=4, bandwidth=B, latency=0.0), scale_out=clos),))
    trainer = tr.Training(SMALL, tr.Parallelism(tp=4, dp=2), global_batch=4, ranks=tuple(range(8)), name="t")
    job = dict(name="rl", trainer=trainer, rollouts=8, prompt_tokens=128, response_tokens=256, generators=(),
               generator_tp=4, bucket_bytes=1e12)  # co-located: two instances, one per domain
    W = tr.RL(**job).sync_bytes
    one = _model(tr.RL(**job), fleet)
    two = _model(tr.RL(**job, channels=2), fleet)
    assert _parts(one)[1]["weight_sync"] == pytest.approx(W / 50e9, rel=1e-9)  # one chain, one NIC crossing
    plan = two.others[0]
    assert plan.sync.phase.src.tolist() == [0, 1, 2, 3, 4, 5, 6, 0, 2, 3, 1, 5, 6, 7]
    assert plan.sync.phase.dst.tolist() == [1, 2, 3, 4, 5, 6, 7, 2, 3, 1, 5, 6, 7, 4]
    assert _parts(two)[1]["weight_sync"] == pytest.approx(W / 2 / 50e9, rel=1e-9)  # half a bucket per NIC
