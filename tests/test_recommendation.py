"""Recommendation (DLRM-class) training against a hand count and a closed form.

Tables are sharded table-wise over the job's GPUs; every GPU receives, for its local samples, the
pooled vector of every table from the table's owner (forward all-to-all), returns their gradients
(backward all-to-all, the same bytes) and all-reduces the dense MLP gradients (docs/sources.md, "DLRM").
"""

import numpy as np
import pytest

from flowmodel import config
from flowmodel import fabric as fb
from flowmodel import scenario as sc
from flowmodel import steptime as st
from flowmodel import traffic as tr

B = 100e9  # each GPU's link to the one switch, each way
HBM = 2e12
JOB = dict(name="rec", gpus=4, tables=8, rows=1000, dim=64, batch_per_gpu=256, pooling=10, element_bytes=4,
           grad_bytes=2, peak_flops=1e15, efficiency=0.5, hbm_bandwidth=HBM)


def _model(dense_params, *, gpus=4, **extra):
    job = tr.Recommendation(**{**JOB, "gpus": gpus, **extra}, dense_params=dense_params)
    site = fb.Site("a", scale_out=None, scale_up=fb.ScaleUp(size=gpus, bandwidth=B, latency=0.0))
    return sc.prepare(sc.Scenario("rec", fb.Fleet(sites=(site,)), recommendation=(job,))), job


# --- the hand count ------------------------------------------------------------------------------
# 8 tables over 4 GPUs: 2 per GPU. Global batch 4 x 256 = 1,024 samples.
# Forward all-to-all send buffer per GPU: 2 tables x 1,024 samples x 64 x 4 B = 524,288 B;
# to each other GPU (its 256 samples): 2 x 256 x 64 x 4 = 131,072 B; 3 peers: 393,216 B off the GPU.
A2A_SIZE, A2A_PAIR = 524_288, 131_072
# Dense all-reduce: 1e6 parameters x 2 B = 2e6 B per GPU; ring over 4: each GPU sends 2 x 3/4 x 2e6 = 3e6 B.
AR_SIZE, AR_FLOW = 2e6, 3e6
# Lookups: 524,288 B pooled from 10 rows each = 5,242,880 B of HBM reads per GPU (the update writes as many).
LOOKUP = 5_242_880


def test_bytes_of_every_collective_match_the_hand_count():
    model, job = _model(1e6)
    plan = model.recommendation[0]
    assert job.all_to_all_bytes() == A2A_SIZE and job.all_reduce_bytes() == AR_SIZE and job.lookup_bytes() == LOOKUP
    fwd = plan.forward.phase
    assert fwd.num_flows == 12 and np.all(fwd.bytes == A2A_PAIR) and np.all(fwd.src != fwd.dst)
    back, which = plan.backward.phase, plan.backward_collective
    assert np.all(back.bytes[which == 0] == A2A_PAIR) and (which == 0).sum() == 12
    assert np.all(back.bytes[which == 1] == AR_FLOW) and (which == 1).sum() == 4
    assert list(plan.backward_steps) == [1, 6]  # one all-to-all step; 2 (n - 1) ring steps
    assert plan.sizes == {"all_to_all_forward": ("all_to_all", A2A_SIZE, 4),
                          "all_to_all_backward": ("all_to_all", A2A_SIZE, 4),
                          "dense_all_reduce": ("all_reduce", AR_SIZE, 4)}
    # every flow crosses two links (GPU -> switch -> GPU): 2 x (2 x 12 x 131,072 + 4 x 3e6) bytes per iteration
    total = float(np.sum(st.recommendation_bytes(plan, model.network.num_links)))
    assert total == pytest.approx(2 * (2 * 12 * A2A_PAIR + 4 * AR_FLOW))
    assert job.embedding_bytes() == 2 * 1000 * 64 * 4


# --- the closed form on one switch ---------------------------------------------------------------
def _parts():
    emb = LOOKUP / HBM
    return emb, 6 * 1e6 * 256 / (1e15 * 0.5), emb


def test_iteration_is_compute_plus_exposed_communication_all_reduce_exposed():
    model, _ = _model(1e6)
    r = model.evaluate().recommendation["rec"]
    x, y = A2A_PAIR, AR_FLOW
    emb_f, dense, emb_b = _parts()
    forward = 3 * x / B  # 3 flows of x on each GPU's uplink at B
    # backward: each uplink (and downlink) carries 3 all-to-all flows and 1 ring flow, B/4 each, until the
    # all-to-all ends at 4x/B; the ring flow then runs alone at B.
    a2a_end, ar_end = 4 * x / B, 4 * x / B + (y - x) / B
    expected = emb_f + forward + dense + max(a2a_end + emb_b, ar_end)
    assert float(r.step_time) == pytest.approx(expected, rel=1e-9)
    parts = {k: float(v) for k, v in r.breakdown.items()}
    assert parts["compute"] == pytest.approx(emb_f + dense + emb_b, rel=1e-12)
    assert parts["all_to_all_forward"] == pytest.approx(forward, rel=1e-9)
    assert parts["all_to_all_backward"] == pytest.approx(a2a_end, rel=1e-9)
    assert parts["all_reduce"] == pytest.approx(ar_end - a2a_end - emb_b, rel=1e-9) and parts["all_reduce"] > 0
    assert sum(parts.values()) == pytest.approx(float(r.step_time), rel=1e-12)
    assert float(r.collectives["dense_all_reduce"]["seconds"]) == pytest.approx(ar_end, rel=1e-9)
    assert float(r.collectives["all_to_all_forward"]["efficiency"]) == pytest.approx(1.0)


def test_small_all_reduce_is_hidden_behind_the_backward_all_to_all():
    model, _ = _model(1e4)  # ring flow y = 2 x 3/4 x 2e4 = 3e4 B, smaller than x
    r = model.evaluate().recommendation["rec"]
    x, y = A2A_PAIR, 3e4
    emb_f, dense, emb_b = _parts()
    dense = 6 * 1e4 * 256 / (1e15 * 0.5)
    # four flows at B/4 until the ring ends at 4y/B, then three all-to-all flows at B/3
    a2a_end = 4 * y / B + 3 * (x - y) / B
    assert float(r.step_time) == pytest.approx(emb_f + 3 * x / B + dense + a2a_end + emb_b, rel=1e-9)
    assert float(r.breakdown["all_reduce"]) == 0.0


@pytest.mark.filterwarnings("ignore:workloads. 8 of the fabric")
def test_a_recommendation_job_shares_the_fabric_with_a_training_job():
    # two leaves of 8 GPUs (two scale-up domains of 4 each), one spine: each job has half its GPUs on each
    # leaf, so both jobs' cross-leaf flows share the leaf-spine links (4:1 oversubscribed: the bottleneck)
    clos = fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=2, spines_per_pod=1, nic_bandwidth="100Gbps",
                   oversubscription=4)
    fleet = fb.Fleet(sites=(fb.Site("a", scale_up=fb.ScaleUp(size=4, bandwidth=400e9, latency=1e-6),
                                    scale_out=clos),))
    rec = tr.Recommendation(**{**JOB, "gpus": 8, "dense_params": 1e7}, ranks=(0, 1, 2, 3, 8, 9, 10, 11))
    model = tr.Model("m", layers=2, hidden=1024, ffn_hidden=4096, heads=8, kv_heads=8, vocab=1000, seq_len=1024)
    train = tr.Training(model, tr.Parallelism(dp=8), global_batch=8, ranks=(4, 5, 6, 7, 12, 13, 14, 15),
                        name="llm")
    alone = sc.prepare(sc.Scenario("r", fleet, recommendation=(rec,))).evaluate().recommendation["rec"]
    both = sc.prepare(sc.Scenario("r", fleet, training=(train,), recommendation=(rec,)))
    assert both.groups == ((0, 1),)  # one spine: their flows meet on its links
    fleet_result = both.evaluate()
    shared = fleet_result.recommendation["rec"]
    assert float(shared.step_time) > float(alone.step_time) * 1.001
    assert fleet_result.critical() in ("rec", "llm") and int(fleet_result.iterations) >= 1
    # the throughput objective weighs every job by its GPUs, the recommendation job's iteration included
    t = {name: float(r.step_time) for name, r in fleet_result.jobs.items()}
    assert float(both.score(fleet_result, "throughput")) == pytest.approx((8 * t["rec"] + 8 * t["llm"]) / 16)


def test_run_json_reports_the_iteration_in_parts(tmp_path):
    from flowmodel import cli

    data = {"fabric": {"sites": [{"name": "a", "scale_up": {"size": 4, "bandwidth": "800Gbps", "latency": "0us"}}]},
            "workloads": {"recommendation": [{**{k: v for k, v in JOB.items() if k != "hbm_bandwidth"},
                                             "hbm_bandwidth": "2TB/s", "dense_params": 1e6}]}}
    scenario = config.parse(data)
    result = cli.cmd_run(scenario, str(tmp_path), quiet=True, links=True)
    job = result["jobs"]["rec"]
    assert job["kind"] == "recommendation" and result["critical_job"] == "rec"
    assert set(job["breakdown_s"]) == {"compute", "all_to_all_forward", "all_to_all_backward", "all_reduce"}
    assert job["collectives"]["all_to_all_forward"]["bytes"] == A2A_SIZE
    assert sum(job["breakdown_s"].values()) == pytest.approx(job["step_time_s"])
    view = sc.prepare(scenario).links()  # the link view replays both phases of the iteration
    assert sorted({(p.workload, p.phase) for p in view.phases}) == [("rec", "backward"), ("rec", "forward")]
    assert result["links"]


def test_bad_recommendation_inputs_name_the_key_path():
    base = {k: v for k, v in JOB.items() if k != "hbm_bandwidth"} | {"dense_params": 1e6}
    data = {"fabric": {"sites": [{"name": "a", "scale_up": {"size": 8, "bandwidth": "400GB/s", "latency": "1us"}}]}}
    cases = [({"tables": 6}, r"workloads\.recommendation\[0\]\.tables: 6 tables cannot be sharded table-wise over 4"),
             ({"pooling": -1}, r"workloads\.recommendation\[0\]\.pooling: must be > 0 and finite, got -1"),
             ({"batch_per_gpu": 0}, r"workloads\.recommendation\[0\]\.batch_per_gpu: must be an integer >= 1, got 0"),
             ({"gpus": 16, "tables": 16}, r"workloads\.recommendation\[0\]: needs GPUs 0\.\.15, the fabric has 8"),
             ({"efficiency": 1.5}, r"workloads\.recommendation\[0\]\.efficiency: must be in \(0, 1\]"),
             ({"dense_params": -5}, r"workloads\.recommendation\[0\]\.dense_params: must be >= 0")]
    for edit, message in cases:
        with pytest.raises(config.ConfigError, match=message):
            config.parse({**data, "workloads": {"recommendation": [{**base, **edit}]}})
    with pytest.raises(ValueError, match=r"recommendation\.gpus: 16 GPUs, but the fabric has 8"):
        tr.Recommendation(**{**base, "gpus": 16, "tables": 16}).job_ranks(8)
    overlap = {**data, "workloads": {"recommendation": [base], "training": [
        {"name": "llm", "model": {"name": "m", "layers": 2, "hidden": 512, "ffn_hidden": 2048, "heads": 8,
                                  "kv_heads": 8, "vocab": 1000, "seq_len": 512},
         "parallelism": {"dp": 4}, "global_batch": 4, "first_rank": 2}]}}
    with pytest.raises(ValueError, match=r"GPU rank 2 belongs to both 'llm' and 'rec'"):
        sc.prepare(config.parse(overlap))


def test_smooth_rates_and_gradients_pass_through_the_iteration():
    import jax
    import jax.numpy as jnp

    model, _ = _model(1e6)
    smooth = model.options.relaxed()
    exact = float(model.evaluate().recommendation["rec"].step_time)
    # the smooth model holds each flow at its alpha-fair rate without re-sharing, so the ring flow keeps
    # B/4 after the all-to-all ends: never below the exact time
    assert float(model.evaluate(options=smooth).recommendation["rec"].step_time) >= exact * (1 - 1e-6)
    for options in (smooth, model.options):
        grad = jax.grad(lambda net, o=options: model.fleet(net, o).step_time)(model.network).capacity
        assert bool(jnp.all(jnp.isfinite(grad))) and float(jnp.min(grad)) <= 0 < float(jnp.sum(jnp.abs(grad)))
