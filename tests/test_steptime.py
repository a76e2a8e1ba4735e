"""Pipeline schedules, training step time and its sanity properties, gradients, bad parallelism."""

import dataclasses

import jax
import networkx as nx
import numpy as np
import pytest

from flowmodel import fabric as fb
from flowmodel import reference as ref
from flowmodel import routing as rt
from flowmodel import scenario as sc
from flowmodel import steptime as st
from flowmodel import traffic as tr

TINY = tr.Model("tiny", layers=8, hidden=1024, ffn_hidden=4096, heads=16, kv_heads=4, vocab=8000, seq_len=2048)


@pytest.mark.parametrize("p, m, v", [(4, 8, 1), (4, 8, 2), (3, 6, 3), (1, 4, 1), (5, 3, 1)])
def test_one_f_one_b_runs_every_op_once(p, m, v):
    schedule = st.one_f_one_b(p, m, v)
    for s, ops in enumerate(schedule):
        chunks = [c * p + s for c in range(v)]
        assert sorted(ops) == sorted((kind, mb, k) for kind in "FB" for mb in range(m) for k in chunks)


def test_one_f_one_b_closed_form():
    p, m, tf, tb = 4, 8, 1.0, 2.0
    free = st.evaluate_schedule(st.one_f_one_b(p, m), [tf] * p, [tb] * p, [0.0] * p, [0.0] * p).free
    assert max(free) == pytest.approx((m + p - 1) * (tf + tb))


@pytest.mark.parametrize("p, m, v", [(4, 8, 1), (3, 6, 2), (2, 5, 1)])
def test_schedule_is_the_longest_path_of_its_dag(p, m, v):
    """Against networkx's longest path over the same DAG, with random durations and send times."""
    rng = np.random.default_rng(p * 100 + m)
    V = p * v
    tf, tb = rng.uniform(0.5, 2, V), rng.uniform(1, 3, V)
    sf, sb = rng.uniform(0, 0.5, p), rng.uniform(0, 0.5, p)
    schedule = st.one_f_one_b(p, m, v)
    free = st.evaluate_schedule(schedule, list(tf), list(tb), list(sf), list(sb)).free
    g = nx.DiGraph()
    dur = {op: (tf if op[0] == "F" else tb)[op[2]] for ops in schedule for op in ops}
    for ops in schedule:
        g.add_edge("start", ops[0], w=0.0)
        for a, b in zip(ops, ops[1:]):
            g.add_edge(a, b, w=dur[a])  # the rank runs one op at a time
        g.add_edge(ops[-1], "end", w=dur[ops[-1]])
    for op in dur:
        kind, mb, k = op
        if kind == "F" and k > 0:
            g.add_edge(("F", mb, k - 1), op, w=dur[("F", mb, k - 1)] + sf[(k - 1) % p])
        if kind == "B":
            dep = ("F", mb, k) if k == V - 1 else ("B", mb, k + 1)
            g.add_edge(dep, op, w=dur[dep] + (0.0 if k == V - 1 else sb[k % p]))
    longest = nx.dag_longest_path_length(g, weight="w")
    assert max(free) == pytest.approx(longest, rel=1e-12)


def test_interleaving_divides_the_bubble_by_the_chunk_count():
    p, m, v, tf, tb = 4, 8, 2, 0.5, 1.0  # per chunk; a stage is v chunks
    free = st.evaluate_schedule(st.one_f_one_b(p, m, v), [tf] * (p * v), [tb] * (p * v), [0.0] * p, [0.0] * p).free
    assert max(free) == pytest.approx(m * v * (tf + tb) + (p - 1) * (tf + tb))  # bubble (p-1)(t_f+t_b)/v


SCHEDULES = [(1, 4, 1), (2, 5, 1), (2, 64, 1), (4, 8, 1), (4, 8, 2), (3, 6, 3), (4, 64, 4), (8, 64, 1), (8, 64, 2)]


def _durations(rng, p, V):
    return rng.uniform(0.5, 2, V), rng.uniform(1, 3, V), rng.uniform(0, 0.5, p), rng.uniform(0, 0.5, p)


@pytest.mark.parametrize("p, m, v", SCHEDULES)
def test_schedule_matches_the_event_simulation(p, m, v):
    """Every op's end, each rank's finish and each stage's last backward, against the float64 oracle."""
    rng = np.random.default_rng(p * 1000 + m * 10 + v)
    tf, tb, sf, sb = _durations(rng, p, p * v)
    lists = st.one_f_one_b(p, m, v)
    schedule = st.Schedule.build(lists)
    times = st.evaluate_schedule(schedule, tf, tb, sf, sb)
    end, free = ref.pipeline_schedule(lists, tf, tb, sf, sb)
    np.testing.assert_allclose(times.end, [end[op] for op in schedule.ops], rtol=1e-12)
    np.testing.assert_allclose(times.free, free, rtol=1e-12)
    last = [max(end[("B", mb, k)] for mb in range(m)) for k in range(p * v)]
    np.testing.assert_allclose(times.last_backward, last, rtol=1e-12)
    assert schedule.waves.shape[1] == p  # a rank's ops never share a wave


def _makespan(schedule, p, V):
    def f(d):
        times = st.evaluate_schedule(schedule, d[:V], d[V:2 * V], d[2 * V:2 * V + p], d[2 * V + p:])
        return jax.numpy.max(times.free) + times.last_backward @ np.linspace(1.0, 2.0, V)
    return f


@pytest.mark.parametrize("p, m, v", [(1, 4, 1), (2, 5, 1), (4, 8, 2), (3, 6, 3), (8, 32, 1)])
def test_schedule_gradient_matches_finite_differences(p, m, v):
    rng = np.random.default_rng(7 * p + m + v)
    V = p * v
    d = np.concatenate(_durations(rng, p, V))  # random durations: no ties between the two ways in
    schedule = st.Schedule.build(st.one_f_one_b(p, m, v))
    f = _makespan(schedule, p, V)
    grad = jax.jit(jax.grad(f))(d)
    h, step = 1e-6, np.eye(len(d)) * 1e-6
    fd = (jax.jit(jax.vmap(f))(d + step) - jax.jit(jax.vmap(f))(d - step)) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(jax.grad(f)(d), grad, rtol=1e-12)  # eager == jit
    np.testing.assert_allclose(f(d), jax.jit(f)(d), rtol=1e-12)


def test_schedule_gradient_splits_ties_like_max():
    """Equal durations and no sends: ties everywhere. Half to each side (jnp.maximum's rule) makes the
    gradient a convex combination of the critical paths' gradients, so Euler's identity for the
    1-homogeneous makespan holds: grad . durations = makespan = (m + p - 1)(t_f + t_b)."""
    p, m = 4, 8
    schedule = st.Schedule.build(st.one_f_one_b(p, m))

    def f(tf, tb):
        return jax.numpy.max(st.evaluate_schedule(schedule, tf, tb, np.zeros(p), np.zeros(p)).free)

    gf, gb = jax.grad(f, argnums=(0, 1))(np.ones(p), 2 * np.ones(p))
    assert np.all(gf >= 0) and np.all(gb >= 0)
    assert float(f(np.ones(p), 2 * np.ones(p))) == pytest.approx((m + p - 1) * 3.0, rel=1e-12)
    assert float(gf.sum() + 2 * gb.sum()) == pytest.approx((m + p - 1) * 3.0, rel=1e-12)


def test_schedule_vmap_equals_a_loop():
    p, m, v = 4, 16, 2
    V = p * v
    rng = np.random.default_rng(3)
    d = np.stack([np.concatenate(_durations(rng, p, V)) for _ in range(5)])
    f = _makespan(st.Schedule.build(st.one_f_one_b(p, m, v)), p, V)
    value, grad = jax.jit(f), jax.jit(jax.grad(f))
    np.testing.assert_allclose(jax.jit(jax.vmap(f))(d), [value(x) for x in d], rtol=1e-12)
    np.testing.assert_allclose(jax.jit(jax.vmap(jax.grad(f)))(d), [grad(x) for x in d], rtol=1e-12)


def _eqns(jaxpr) -> int:
    """Equations of a jaxpr, those of the jaxprs in its equations' parameters included."""
    n = 0
    for eqn in jaxpr.eqns:
        n += 1
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                sub = getattr(sub, "jaxpr", sub)  # ClosedJaxpr -> Jaxpr
                if hasattr(sub, "eqns"):
                    n += _eqns(sub)
    return n


def test_schedule_program_does_not_grow_with_the_micro_batch_count():
    p, v = 2, 2
    V = p * v
    d = np.ones(2 * V + 2 * p)
    sizes = []
    for m in (8, 512):
        f = _makespan(st.Schedule.build(st.one_f_one_b(p, m, v)), p, V)
        sizes.append((_eqns(jax.make_jaxpr(f)(d).jaxpr), _eqns(jax.make_jaxpr(jax.grad(f))(d).jaxpr)))
    assert sizes[0] == sizes[1]


def test_schedule_of_an_unknown_dependency_is_an_error():
    with pytest.raises(ValueError, match=r"\('B', 0, 0\) waits for \('F', 0, 0\)"):
        st.Schedule.build([[("B", 0, 0)]])
    with pytest.raises(RuntimeError, match="deadlocked"):
        st.Schedule.build([[("B", 0, 0), ("F", 0, 0)]])
    with pytest.raises(ValueError, match="virtual stage 0 runs its backward on ranks 0 and 1"):
        st.Schedule.build([[("F", 0, 0), ("B", 0, 0)], [("F", 1, 0), ("B", 1, 0)]])


def _fleet(ratio=1.0, latency=0.0, km=None):
    clos = fb.Clos(tiers=3, gpus_per_leaf=8, leaves_per_pod=2, spines_per_pod=2, pods=2, aggs_per_plane=2,
                   oversubscription=(1.0, ratio), latency=latency)
    su = fb.ScaleUp(size=4, latency=latency)
    if km is None:
        return fb.Fleet(sites=(fb.Site("a", scale_out=clos, scale_up=su),))
    return fb.Fleet(sites=(fb.Site("a", scale_out=clos, scale_up=su), fb.Site("b", scale_out=clos, scale_up=su)),
                    long_haul=(fb.LongHaul("a", "b", capacity=200e9, length_km=km),))


def _setup(fleet, job, **kw):
    net, info = fb.compile_fabric(fb.build(fleet))
    return net, info, st.plan_training(job, info, rt.Router(info), **kw)


JOB = tr.Training(TINY, tr.Parallelism(tp=4, pp=2, dp=4), global_batch=16)


def test_breakdown_adds_up_and_names_the_domains():
    net, info, plan = _setup(_fleet(), JOB)
    res = st.step_time(plan, net, info=info)
    total = sum(float(v) for v in res.breakdown.values())
    assert total == pytest.approx(float(res.step_time), rel=1e-12)
    assert all(float(v) >= -1e-15 for v in res.breakdown.values())
    assert plan.domains["tp_all_gather"] == "scale_up" and plan.domains["dp_all_reduce"] == "scale_out"
    assert float(res.by_domain["scale_up"]) == pytest.approx(float(res.breakdown["tp"]))
    for report in res.collectives.values():
        assert 0 < float(report["bound_seconds"]) <= float(report["seconds"]) * (1 + 1e-12)


def test_doubling_bandwidth_halves_exposed_communication():
    job = dataclasses.replace(JOB, parallelism=tr.Parallelism(tp=4, pp=1, dp=8), global_batch=16)
    net, info, plan = _setup(_fleet(), job)
    one = st.step_time(plan, net)
    two = st.step_time(plan, fb.Network(capacity=2 * net.capacity, latency=net.latency))
    assert float(two.breakdown["compute"]) == pytest.approx(float(one.breakdown["compute"]))
    for part in ("tp", "dp"):
        assert float(one.breakdown[part]) > 0
        assert float(two.breakdown[part]) == pytest.approx(float(one.breakdown[part]) / 2, rel=1e-9)
    assert float(two.step_time) < float(one.step_time)


def test_removing_oversubscription_never_slows_a_step():
    job = dataclasses.replace(JOB, parallelism=tr.Parallelism(tp=4, pp=2, dp=4), global_batch=32)
    net, info, plan = _setup(_fleet(ratio=7.0), job)
    times = [float(st.step_time(plan, fb.apply_groups(net, info, {"a/spine_up": r})).step_time)
             for r in (7.0, 4.0, 2.0, 1.0)]
    assert all(later <= earlier * (1 + 1e-12) for earlier, later in zip(times, times[1:]))
    assert times[-1] < times[0]  # the DP rings cross pods: 7:1 costs something


def test_a_dp_ring_across_1000_km_pays_its_latency_terms():
    job = dataclasses.replace(JOB, parallelism=tr.Parallelism(tp=4, pp=1, dp=16), global_batch=16)
    near = _setup(_fleet(km=0.0), job)
    far = _setup(_fleet(km=1000.0), job)
    t_near = float(st.step_time(near[2], near[0]).step_time)
    t_far = float(st.step_time(far[2], far[0]).step_time)
    steps = far[2].dp.steps
    assert steps == 2 * (16 - 1)
    assert t_far - t_near >= steps * 1000 * 4.9e-6 * (1 - 1e-9)
    assert far[2].domains["dp_all_reduce"] == "scale_across"


def test_step_time_gradient_matches_finite_differences():
    job = dataclasses.replace(JOB, parallelism=tr.Parallelism(tp=4, pp=2, dp=4), global_batch=16)
    net, info, plan = _setup(_fleet(ratio=4.0, latency=1e-6), job)

    def step(ratio, nic):
        n = fb.apply_groups(net, info, {"a/spine_up": ratio, "a/nic": nic})
        return st.step_time(plan, n).step_time

    # jitted: one compiled program for the gradient and one for the four evaluations (eager, the same
    # numbers cost three times the CPU)
    g = jax.jit(jax.grad(step, argnums=(0, 1)))(4.0, 50e9)
    step = jax.jit(step)
    for i, (x, h) in enumerate(((4.0, 1e-4), (50e9, 1e4))):
        args = [4.0, 50e9]
        up, down = list(args), list(args)
        up[i], down[i] = x + h, x - h
        fd = (float(step(*up)) - float(step(*down))) / (2 * h)
        assert float(g[i]) == pytest.approx(fd, rel=1e-4, abs=1e-18)
    assert float(g[0]) > 0 and float(g[1]) < 0  # more oversubscription is slower, more NIC is faster


def test_smooth_model_tracks_the_exact_one():
    net, info, plan = _setup(_fleet(ratio=4.0), JOB)
    exact = float(st.step_time(plan, net).step_time)
    smooth = [float(st.step_time(plan, net, st.Options(rates="smooth", sharpness=a)).step_time) for a in (16.0, 256.0)]
    # static alpha-fair rates (no re-sharing) and a soft max: an upper bound that tightens with sharpness
    assert exact * (1 - 1e-9) <= smooth[1] <= smooth[0] and smooth[1] <= 1.1 * exact
    g = jax.jit(jax.grad(lambda c: st.step_time(plan, fb.Network(capacity=c, latency=net.latency),
                                                st.Options(rates="smooth")).step_time))(net.capacity)
    assert np.isfinite(np.asarray(g)).all() and float(np.abs(g).sum()) > 0


def test_background_classes_take_capacity_first():
    job = dataclasses.replace(JOB, parallelism=tr.Parallelism(tp=4, pp=1, dp=8), global_batch=16)
    net, info, plan = _setup(_fleet(), job)
    router = rt.Router(info)
    storage = st.background_load(router, [0, 8, 16], [31, 23, 15], 20e9)
    base = float(st.step_time(plan, net).step_time)
    loaded = float(st.step_time(plan, net, info=info, background=storage).step_time)
    assert loaded > base
    with pytest.raises(ValueError, match=r"background: a/gpu0->a/leaf0 carries 6e\+10 bytes/s"):
        st.step_time(plan, net, info=info, background=st.background_load(router, [0], [31], 60e9))
    with pytest.raises(ValueError, match=r"background.rate\[0\]: must be > 0"):
        st.background_load(router, [0], [31], -1.0)


def test_llama3_405b_figures():
    model = tr.llama3_405b()
    assert model.params == pytest.approx(405e9, rel=0.01)
    assert model.kv_bytes_per_token() == 504 * 1024  # docs/sources.md: ~504 KiB per token
    job = tr.llama3_405b_training()
    assert job.micro_batches == 16 and job.parallelism.size == 16_384


@pytest.mark.parametrize("make, match", [
    (lambda: tr.Parallelism(tp=0), "parallelism.tp: must be an integer >= 1, got 0"),
    (lambda: tr.Parallelism(dp=6, ep=4), "parallelism.ep: 4 does not divide dp = 6"),
    (lambda: tr.Parallelism(order=("tp", "dp")), "parallelism.order"),
    (lambda: tr.Training(TINY, tr.Parallelism(dp=3), global_batch=16), "global_batch: 16 is not a multiple"),
    (lambda: tr.Training(TINY, tr.Parallelism(pp=4, virtual_stages=4), global_batch=16),
     r"pp: 4 x 4 virtual stages is more than the model's 8 layers"),
    (lambda: tr.Training(TINY, tr.Parallelism(pp=4, virtual_stages=2), global_batch=6),
     "needs the micro-batch count"),
    (lambda: tr.Training(TINY, tr.Parallelism(pp=2, dp=8), global_batch=64_000_000_000),
     r"^training.global_batch: 64000000000 gives 8000000000 micro-batches per pipeline .* at most 65536 "),
    (lambda: tr.Training(dataclasses.replace(TINY, layers=64), tr.Parallelism(pp=8, virtual_stages=8),
                         global_batch=32776),
     r"^training.global_batch: 32776 gives 32776 micro-batches per pipeline .* and 4195328 pipeline-schedule ops"),
    (lambda: tr.Model("m", layers=2, hidden=100, ffn_hidden=4, heads=3, kv_heads=1, vocab=10, seq_len=8),
     "model.heads: 3 does not divide hidden 100"),
    (lambda: _setup(_fleet(), tr.Training(TINY, tr.Parallelism(tp=4, pp=2, dp=3), global_batch=12,
                                          ranks=tuple(range(32)))),
     r"tp x cp x pp x dp = 4 x 1 x 2 x 3 = 24 does not match the job's 32 GPUs"),
    (lambda: _setup(_fleet(), tr.Training(TINY, tr.Parallelism(tp=4, pp=2, dp=8), global_batch=16)),
     r"= 64 GPUs, but the fabric has 32"),
    (lambda: _setup(_fleet(), tr.Training(TINY, tr.Parallelism(tp=4, pp=2, dp=1), global_batch=16,
                                          ranks=tuple(range(30, 38)))),
     r"training.ranks\[2\] = 32 is not one of the fabric's 32 GPUs"),
    (lambda: _setup(_fleet(), tr.Training(TINY, tr.Parallelism(tp=8, pp=1, dp=4), global_batch=16)),
     "parallelism.tp: TP group .* spans scale-up domains"),
])
def test_bad_parallelism(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_tp_across_domains_when_asked():
    job = tr.Training(TINY, tr.Parallelism(tp=8, pp=1, dp=4, tp_across_domains=True), global_batch=16)
    net, info, plan = _setup(_fleet(), job)
    assert plan.domains["tp_all_gather"] == "scale_out"
    assert float(st.step_time(plan, net).step_time) > 0


def test_step_time_is_differentiable_in_routing_logits():
    job = dataclasses.replace(JOB, parallelism=tr.Parallelism(tp=4, pp=2, dp=4), global_batch=16)
    net, info, plan = _setup(_fleet(ratio=4.0, latency=1e-6), job, policy="wcmp")
    phases = st.routed_phases(plan)
    rng = np.random.default_rng(0)
    logits = {name: rng.normal(size=ph.num_candidates) for name, ph in phases.items() if ph.num_candidates > 1}
    assert "dp" in logits and any(n.startswith("pp_forward") for n in logits)

    def step(dp_logits):
        return st.step_time(plan, net, logits={**logits, "dp": dp_logits}).step_time

    g = np.asarray(jax.jit(jax.grad(step))(logits["dp"]))  # jitted: the same numbers as eager, at a third of the CPU
    step = jax.jit(step)
    assert np.abs(g).max() > 0
    for i in np.argsort(-np.abs(g))[:3]:
        h = 1e-5
        up, down = logits["dp"].copy(), logits["dp"].copy()
        up[i] += h
        down[i] -= h
        fd = (float(step(up)) - float(step(down))) / (2 * h)
        assert g[i] == pytest.approx(fd, rel=1e-4, abs=1e-12)
    with pytest.raises(ValueError, match="the plan has no phase 'dq'"):
        st.step_time(plan, net, logits={"dq": logits["dp"]})


def test_concurrent_jobs_slow_each_other_only_where_they_share_links():
    fleet = _fleet(ratio=4.0)
    par = tr.Parallelism(tp=4, pp=1, dp=4)
    # pod 0 holds ranks 0-15, pod 1 ranks 16-31: each job takes half of each pod, so DP crosses pods
    a = tr.Training(TINY, par, global_batch=16, name="a", ranks=tuple([*range(0, 8), *range(16, 24)]))
    b = tr.Training(TINY, par, global_batch=16, name="b", ranks=tuple([*range(8, 16), *range(24, 32)]))
    alone = sc.prepare(sc.Scenario("alone", fleet, training=(a,))).evaluate()
    both = sc.prepare(sc.Scenario("both", fleet, training=(a, b))).evaluate()
    assert bool(both.converged) and 1 <= int(both.iterations) < st.Options().fleet_iterations
    t_alone, t_both = float(alone.steps["a"].step_time), float(both.steps["a"].step_time)
    assert t_both > t_alone  # the spine-aggregation links are shared
    assert float(both.steps["a"].breakdown["tp"]) == pytest.approx(float(alone.steps["a"].breakdown["tp"]))
    with pytest.raises(ValueError, match="GPU rank 0 belongs to both 'a' and 'c'"):
        sc.prepare(sc.Scenario("clash", fleet, training=(a, dataclasses.replace(b, name="c", ranks=tuple(range(16))))))


def test_disaggregated_inference_kv_transfer_and_background():
    model = tr.llama3_405b()
    serve = tr.Inference("serve", model, prefill=((0, 1, 2, 3),), decode=((16, 17, 18, 19),), requests_per_s=1.0,
                         prompt_tokens=8192)
    assert serve.kv_bytes == 8192 * 504 * 1024  # ~4.1 GB per 8K prompt (docs/sources.md)
    idle = sc.prepare(sc.Scenario("idle", _fleet(), inference=(serve,))).evaluate()
    shard = serve.kv_bytes / 4
    # one NIC per shard at 50 GB/s, plus the average load of 1 request/s on the same NICs
    expected = shard / (50e9 - serve.kv_bytes / 4)
    assert idle.kv_transfer_s["serve"] == pytest.approx(expected, rel=1e-9)
    storage = tr.Background("storage", src=(0,), dst=(20,), rate=10e9)
    busy = sc.prepare(sc.Scenario("busy", _fleet(), inference=(serve,), background=(storage,))).evaluate()
    assert busy.kv_transfer_s["serve"] > idle.kv_transfer_s["serve"]
    with pytest.raises(ValueError, match=r"inference\[x\]: prefill and decode"):
        tr.Inference("x", model, prefill=((0, 1),), decode=((2,),), requests_per_s=1.0, prompt_tokens=10)


def test_moe_and_context_parallel_traffic():
    moe = dataclasses.replace(TINY, name="moe", experts=8, top_k=2, moe_ffn_hidden=1024)
    job = tr.Training(moe, tr.Parallelism(tp=4, cp=2, pp=1, dp=4, ep=2), global_batch=8)
    net, info, plan = _setup(_fleet(), job)
    b, s, h, dt = 1, moe.seq_len // 2, moe.hidden, moe.dtype_bytes
    a2a = plan.collectives["ep_all_to_all"][0].phase
    assert a2a.bytes[0] == pytest.approx(b * s / 4 * 2 * h * dt / 2)  # tokens per rank x top_k x h, over ep
    kv = plan.collectives["cp_all_gather"][0].phase
    assert kv.bytes[0] == pytest.approx(2 * moe.seq_len * moe.kv_dim * dt / 4 / 2)  # (cp-1)/cp of K and V per TP shard
    res = st.step_time(plan, net)
    assert float(res.breakdown["ep"]) > 0 and float(res.breakdown["cp"]) > 0
    assert moe.params < 8 * TINY.params and moe.layer_flops_per_token(True) < 2 * TINY.layer_flops_per_token(False)
