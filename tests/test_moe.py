"""MoE training traffic against a hand count: every collective of one small job, for EP = 1, 2 and 8.

Megatron-Core's convention (docs/sources.md, "MoE training traffic"): dense parameters are sharded over
TP and their gradients reduced over DP x CP; routed experts are sharded over TP x EP and reduced over
their expert-data-parallel group of DP x CP / EP ranks; a MoE layer dispatches and combines with
all-to-alls over EP and gathers the routed tokens over TP for the expert matmuls.
"""

import dataclasses

import numpy as np
import pytest

from flowmodel import config
from flowmodel import fabric as fb
from flowmodel import scenario as sc
from flowmodel import steptime as st
from flowmodel import traffic as tr

# h 512, 8 heads of 64, 2 KV heads (kv_dim 128), SwiGLU 2,048; 16 experts of 256, top-2, capacity
# factor 1.25, one shared expert; the first layer dense, layers 1-3 MoE.
MODEL = tr.Model("moe-small", layers=4, hidden=512, ffn_hidden=2048, heads=8, kv_heads=2, vocab=8000, seq_len=1024,
                 experts=16, top_k=2, moe_ffn_hidden=256, capacity_factor=1.25, shared_experts=1, dense_layers=1)
TP, CP, PP, DP = 2, 2, 2, 8  # 64 GPUs; micro-batch 1, global batch 16: 2 micro-batches per pipeline


def _plan(ep, channels=1):
    """The job on 8 domains of 8 GPUs; ``channels=1``: one flat ring per group, the hand count's."""
    job = tr.Training(MODEL, tr.Parallelism(tp=TP, cp=CP, pp=PP, dp=DP, ep=ep), global_batch=16, channels=channels)
    clos = fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=8, spines_per_pod=4)
    fleet = fb.Fleet(sites=(fb.Site("a", scale_up=fb.ScaleUp(size=8, bandwidth=400e9, latency=1e-6),
                                    scale_out=clos),))
    model = sc.prepare(sc.Scenario("moe", fleet, training=(job,)))
    return model, model.plans[0]


# --- the hand count ------------------------------------------------------------------------------
ATTENTION = 512 * 512 + 512 * 2 * 128 + 512 * 512  # Q, K and V, output: 655,360
DENSE_MLP = 3 * 512 * 2048  # 3,145,728
EXPERT = 3 * 512 * 256  # 393,216
ROUTER = 512 * 16  # 8,192
EMBED = 8000 * 512  # 4,096,000 (input embedding on stage 0, output head on stage 1)
# stage 0: layers 0 (dense) and 1 (MoE); stage 1: layers 2, 3 (MoE)
DENSE_PARAMS = [ATTENTION + DENSE_MLP + ATTENTION + EXPERT + ROUTER + EMBED,  # 8,953,856 (shared expert: dense)
                2 * (ATTENTION + EXPERT + ROUTER) + EMBED]  # 6,209,536
EXPERT_PARAMS = [16 * EXPERT, 2 * 16 * EXPERT]  # 6,291,456 and 12,582,912


def test_the_hand_count_adds_up():
    assert ATTENTION == 655_360 and DENSE_PARAMS == [8_953_856, 6_209_536] and EXPERT_PARAMS == [6_291_456, 12_582_912]
    assert MODEL.params == sum(DENSE_PARAMS) + sum(EXPERT_PARAMS)
    # a token passes through the dense parts and 2 of the 16 experts
    assert MODEL.active_params == sum(DENSE_PARAMS) + 3 * 2 * EXPERT


def _expected(ep):
    """kind -> (collective, bytes per rank, ranks per group): nccl-tests' sizes, by hand."""
    tokens = 1024 // CP // TP  # 256 tokens per rank (sequence parallel): b x s / (cp x tp)
    out = {
        "tp_all_gather": ("all_gather", 512 * 512 * 2, TP),  # b x s/cp x h x 2 bytes = 524,288
        "tp_reduce_scatter": ("reduce_scatter", 512 * 512 * 2, TP),
        "cp_all_gather": ("all_gather", 1024 * 2 * 128 * 2 / TP, CP),  # K and V of the sequence, per TP shard
        "cp_reduce_scatter": ("reduce_scatter", 1024 * 2 * 128 * 2 / TP, CP),  # 262,144
        # routed tokens gathered over TP: b x s/cp x top_k x capacity factor x h x 2 = 1,310,720
        "etp_all_gather": ("all_gather", 512 * 2 * 1.25 * 512 * 2, TP),
        "etp_reduce_scatter": ("reduce_scatter", 512 * 2 * 1.25 * 512 * 2, TP),
        "pp_send_recv": ("send_recv", 512 * 512 * 2 / TP, 2),  # 262,144
        # gradients: bf16, the fullest rank; dense over DP x CP = 16 ranks; experts over TP x EP, and
        # reduced over 16 / EP ranks (stage 1 holds more experts)
        "dp_all_reduce": ("all_reduce", DENSE_PARAMS[0] / TP * 2, DP * CP),  # 8,953,856
        "dp_expert_all_reduce": ("all_reduce", EXPERT_PARAMS[1] / (TP * ep) * 2, DP * CP // ep),
    }
    if ep > 1:  # the rank's tokens x top_k x capacity factor x h x 2 = 655,360; 1/ep of it stays local
        out["ep_all_to_all"] = ("all_to_all", tokens * 2 * 1.25 * 512 * 2, ep)
    return out


@pytest.mark.parametrize("ep", [1, 2, 8])
def test_every_collective_matches_the_hand_count(ep):
    model, plan = _plan(ep)
    expected = _expected(ep)
    assert set(plan.sizes) == set(expected)
    for kind, (collective, nbytes, n) in expected.items():
        assert plan.sizes[kind][0] == collective and plan.sizes[kind][2] == n, kind
        assert plan.sizes[kind][1] == pytest.approx(nbytes, rel=1e-12), kind

    # the flows: a ring all-gather / reduce-scatter sends (n-1)/n of the buffer per rank; an
    # all-to-all S/ep to each of the ep-1 others (the 1/ep that stays on the rank is no flow)
    for kind, phases in plan.collectives.items():
        (ph,) = phases
        collective, nbytes, n = expected[kind]
        per_flow = nbytes / n if collective == "all_to_all" else (n - 1) / n * nbytes
        flows = 64 * (n - 1) if collective == "all_to_all" else 64
        assert ph.phase.num_flows == flows and np.allclose(ph.phase.bytes, per_flow, rtol=1e-12), kind

    # the gradient reductions: one ring per group and stage, each with its own steps
    dense_steps, expert_n = 2 * (16 - 1), 16 // ep
    assert plan.dp_kinds == (("dp_all_reduce", "dp_expert_all_reduce") if expert_n > 1 else ("dp_all_reduce",))
    assert plan.dp_steps.tolist() == [dense_steps, 2 * (expert_n - 1)][:len(plan.dp_kinds)]
    ph = plan.dp.phase
    for stage in range(2):
        dense = (plan.dp_collective == 0) & (plan.dp_stage == stage)
        assert dense.sum() == TP * 16  # TP groups of 16 DP x CP ranks
        assert np.allclose(ph.bytes[dense], 2 * 15 / 16 * DENSE_PARAMS[stage] / TP * 2, rtol=1e-12)
        expert = (plan.dp_collective == 1) & (plan.dp_stage == stage)
        assert expert.sum() == (TP * ep * expert_n if expert_n > 1 else 0)
        assert np.allclose(ph.bytes[expert], 2 * (expert_n - 1) / expert_n * EXPERT_PARAMS[stage] / (TP * ep) * 2,
                           rtol=1e-12)
    # an expert ring joins ranks of the same TP rank and EP position: DP ranks ep apart (both CP ranks)
    grid = plan.grid
    groups = st.dp_groups(plan.job, grid, 0, expert=True)
    assert groups.shape == (TP * ep, expert_n)
    assert groups[0].tolist() == grid[::ep, 0, :, 0].reshape(-1).tolist()

    # calls per step (2 micro-batches; per layer forward + backward; averaged over the 2 pipeline ranks)
    moe_layers = 3
    assert st.calls_per_step(plan, "tp_all_gather[0]") == 2 * (1 * 4 + moe_layers * 4) / 2  # shared expert: TP
    assert st.calls_per_step(plan, "etp_all_gather[0]") == 2 * moe_layers * 2 / 2
    if ep > 1:
        assert st.calls_per_step(plan, "ep_all_to_all[0]") == 2 * moe_layers * 4 / 2

    # the step time reports the same bytes, and its DP reductions take time
    res = st.step_time(plan, model.network, model.options)
    for kind, (_, nbytes, n) in expected.items():
        report = res.collectives[kind]
        assert report["bytes"] == pytest.approx(nbytes, rel=1e-12) and report["ranks"] == n, kind
    assert float(res.collectives["dp_all_reduce"]["seconds"]) > 0 and float(res.step_time) > 0
    if ep > 1:
        assert float(res.breakdown["ep"]) > 0


def test_gradient_bytes_fall_as_ep_grows():
    per_rank = []
    for ep in (1, 2, 4, 8):
        job = tr.Training(MODEL, tr.Parallelism(tp=TP, cp=CP, pp=PP, dp=DP, ep=ep), global_batch=16)
        dense, expert = job.dp_gradients()
        per_rank.append(max(dense[s] + expert[s] for s in range(2)))
        assert job.memory()["weights"] == pytest.approx(2 * max((DENSE_PARAMS[s] + EXPERT_PARAMS[s] / ep) / TP
                                                                for s in range(2)))
    assert all(a > b for a, b in zip(per_rank, per_rank[1:]))
    assert per_rank[0] == pytest.approx((6_209_536 + 12_582_912) / TP * 2)  # stage 1 at EP 1: all its experts


def test_moe_errors_name_the_key_path():
    base = {"name": "j", "model": {"name": "m", "layers": 4, "hidden": 512, "ffn_hidden": 2048, "heads": 8,
                                   "kv_heads": 2, "vocab": 8000, "seq_len": 1024, "experts": 12, "top_k": 2},
            "parallelism": {"tp": 1, "dp": 8, "ep": 8}, "global_batch": 8}
    data = {"fabric": {"sites": [{"name": "a", "scale_up": {"size": 8, "bandwidth": "400GB/s", "latency": "1us"}}]},
            "workloads": {"training": [base]}}
    cases = [({}, r"workloads\.training\[0\]\.parallelism\.ep: 8 does not divide the model's 12 experts"),
             ({"top_k": 13}, r"workloads\.training\[0\]\.model\.top_k: 13 is more than the 12 experts"),
             ({"capacity_factor": 0}, r"workloads\.training\[0\]\.model\.capacity_factor: must be > 0"),
             ({"dense_layers": 5}, r"workloads\.training\[0\]\.model\.dense_layers: 5 is more than the 4 layers"),
             ({"experts": 0, "shared_experts": 1}, r"model\.shared_experts: 1 needs a MoE model"),
             ({"rope_head_dim": 64}, r"model\.rope_head_dim: 64 needs latent attention")]
    for edit, message in cases:
        case = {**data, "workloads": {"training": [{**base, "model": {**base["model"], **edit}}]}}
        with pytest.raises(config.ConfigError, match=message):
            config.parse(case)


def test_deepseek_v3_preset_has_its_published_size():
    m = tr.deepseek_v3()
    # DeepSeek-V3 technical report: 671B parameters, 37B activated per token (docs/sources.md)
    assert m.params == pytest.approx(671e9, rel=0.02) and m.active_params == pytest.approx(37e9, rel=0.02)
    # by hand: MLA q 7168*1536 + 1536*128*192, kv 7168*576 + 512*128*256, out 128*128*7168
    attention = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert m.attention_params == attention == 187_105_280
    expert = 3 * 7168 * 2048
    total = 61 * attention + 3 * 3 * 7168 * 18432 + 58 * (257 * expert + 7168 * 256) + 2 * 129_280 * 7168
    assert m.params == total
    assert m.active_params == total - 58 * (256 - 8) * expert
    assert m.kv_bytes_per_token() == (512 + 64) * 61 * 2  # the latent and the rotary key: 70,272 bytes
    assert m.moe_layers == 58 and m.kv_width == 128 * 192 + 128 * 128
    assert config.MODEL_PRESETS["deepseek-v3"]() == m
    # an EP64 x PP16 layout over 1,024 GPUs reduces experts over DP / EP ranks only
    job = tr.Training(m, tr.Parallelism(tp=1, pp=16, dp=64, ep=64), global_batch=1024, micro_batch=1)
    assert job.expert_dp == 1 and job.memory()["weights"] < 80e9
    with pytest.raises(ValueError, match="parallelism.ep: 48 does not divide the model's 256 experts"):
        tr.Training(m, tr.Parallelism(tp=1, pp=16, dp=48, ep=48), global_batch=48)
    assert dataclasses.replace(m, kv_lora_rank=0, q_lora_rank=0, rope_head_dim=0).kv_bytes_per_token() == \
        2 * 128 * 128 * 61 * 2


def test_default_channels_split_every_reduction_ring_over_the_two_gpus_a_domain_holds():
    flat, plan = _plan(2)[1], _plan(2, channels=None)[1]
    dense = lambda p: p.dp_collective == 0  # noqa: E731
    # a DP x CP group holds both CP ranks of a domain: two channels, each with half the bytes
    assert dense(plan).sum() == 2 * dense(flat).sum()
    assert plan.dp.phase.bytes[dense(plan)].sum() == pytest.approx(flat.dp.phase.bytes[dense(flat)].sum(), rel=1e-12)
    assert plan.dp_steps.tolist() == flat.dp_steps.tolist()
    for kind in ("tp_all_gather", "cp_all_gather"):  # inside one domain: one ring
        assert plan.collectives[kind][0].phase.num_flows == flat.collectives[kind][0].phase.num_flows


def test_smooth_model_times_both_reductions():
    model, plan = _plan(2)
    exact = st.step_time(plan, model.network, model.options)
    smooth = st.step_time(plan, model.network, model.options.relaxed())
    for kind in ("dp_all_reduce", "dp_expert_all_reduce"):  # no re-sharing when a flow ends: slower, same scale
        e, s = float(exact.collectives[kind]["seconds"]), float(smooth.collectives[kind]["seconds"])
        assert np.isfinite(s) and e <= s * 1.01 and s < 2 * e, kind
    assert float(smooth.step_time) == pytest.approx(float(exact.step_time), rel=0.25)
