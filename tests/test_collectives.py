"""Collectives against the NCCL cost model on ideal fabrics, and their bad input."""

import numpy as np
import pytest

from flowmodel import fabric as fb
from flowmodel import routing as rt
from flowmodel import steptime as st
from flowmodel import traffic as tr

B = 50e9  # NIC bytes/s
HOP = 1e-6  # seconds per link


def _one_switch(n, scale_up=None):
    """n GPUs on one leaf switch: a non-blocking fabric with per-rank bandwidth B."""
    clos = fb.Clos(tiers=2, gpus_per_leaf=n, leaves_per_pod=1, spines_per_pod=1, nic_bandwidth=B, latency=HOP)
    net, info = fb.compile_fabric(fb.build(fb.Fleet(sites=(fb.Site("s", scale_out=clos, scale_up=scale_up),))))
    return net, info, rt.Router(info)


def _time(collective, net, router, step_latency=0.0):
    return float(sum(st.phase_time(st.route_phase(ph, router), net.capacity, net.latency,
                                   st.Options(step_latency=step_latency))
                     for ph in collective.phases))


@pytest.mark.parametrize("n", [2, 5, 8])
def test_ring_collectives_match_the_nccl_cost_model(n):
    net, info, router = _one_switch(n)
    S, step_latency = 3e9, 4e-6
    step = 2 * HOP + step_latency  # GPU -> leaf -> GPU, plus the software latency
    cases = {
        tr.all_reduce(np.arange(n), S): S / B * 2 * (n - 1) / n + 2 * (n - 1) * step,
        tr.reduce_scatter(np.arange(n), S): S / B * (n - 1) / n + (n - 1) * step,
        tr.all_gather(np.arange(n), S): S / B * (n - 1) / n + (n - 1) * step,
        tr.all_to_all(np.arange(n), S): S / B * (n - 1) / n + step,
        tr.broadcast(np.arange(n), S): S / B + (n - 1) * step,
        tr.send_recv([0], [n - 1], S): S / B + step,
    }
    for coll, expected in cases.items():
        assert _time(coll, net, router, step_latency) == pytest.approx(expected, rel=1e-9), coll.kind


def test_busbw_of_an_ideal_ring_is_the_link_bandwidth():
    n = 8
    net, info, router = _one_switch(n)
    zero = net.__class__(capacity=net.capacity, latency=net.latency * 0)
    for coll in (tr.all_reduce(np.arange(n), 1e9), tr.all_gather(np.arange(n), 1e9), tr.all_to_all(np.arange(n), 1e9)):
        algbw, busbw = coll.bus_bandwidth(_time(coll, zero, router))
        assert busbw == pytest.approx(B, rel=1e-9)
        assert algbw == pytest.approx(B / tr.bus_factor(coll.kind, n), rel=1e-9)


def test_many_groups_at_once_share_nothing_on_a_big_switch():
    n = 16
    net, info, router = _one_switch(n)
    groups = np.arange(n).reshape(4, 4)
    assert _time(tr.all_reduce(groups, 1e9), net, router) == pytest.approx(_time(tr.all_reduce(groups[:1], 1e9), net,
                                                                                  router), rel=1e-12)


def test_double_binary_tree_all_reduce():
    n = 8
    t1, t2, depth = tr.double_binary_tree(n)
    for tree in (t1, t2):
        assert len(tree) == n - 1 and len({c for _, c in tree}) == n - 1  # a spanning tree: one parent each
    interior1 = {p for p, _ in t1}
    interior2 = {p for p, _ in t2}
    assert len(interior1 & interior2) <= 1  # complementary: interior in at most one tree (n even)
    net, info, router = _one_switch(n)
    S = 2e9
    degree = np.zeros(n, int)
    for p, c in t1 + t2:
        degree[p] += 1
        degree[c] += 1
    expected = degree.max() * (S / 2) / B + 2 * depth * 2 * HOP  # a node's NIC carries S/2 per tree edge
    assert _time(tr.all_reduce(np.arange(n), S, "tree"), net, router) == pytest.approx(expected, rel=1e-9)


def test_hierarchical_all_reduce_closed_form():
    d, m = 4, 3  # 3 scale-up domains of 4
    su = fb.ScaleUp(size=d, bandwidth=400e9, latency=1e-6)
    net, info, router = _one_switch(d * m, scale_up=su)
    S = 4e9
    coll = tr.all_reduce(np.arange(d * m), S, "hierarchical", local_size=d)
    inside = S / 400e9 * (d - 1) / d + (d - 1) * 1e-6
    across = (S / d) / B * 2 * (m - 1) / m + 2 * (m - 1) * 2 * HOP
    assert _time(coll, net, router) == pytest.approx(2 * inside + across, rel=1e-9)
    assert [ph.steps for ph in coll.phases] == [d - 1, 2 * (m - 1), d - 1]


@pytest.mark.parametrize("d, m, channels", [(4, 2, 4), (4, 3, 4), (8, 4, 2), (2, 5, 2)])
def test_channel_rings_are_rings_that_use_every_nic(d, m, channels):
    orders = tr.channel_orders(d * m, d, channels)
    assert orders.shape == (channels, d * m)
    for order in orders:
        assert sorted(order.tolist()) == list(range(d * m))  # a ring over every member
        block = order // d
        assert (np.diff(block) >= 0).all() and len(set(block[::d].tolist())) == m  # each block in one run
        exits = np.flatnonzero(block != np.roll(block, -1))
        hop_from, hop_to = order[exits] % d, np.roll(order, -1)[exits] % d
        # between blocks the ring keeps its local index (one rail), except the wrap of an odd block count
        assert (hop_from != hop_to).sum() == (m % 2)
    senders = [(o[i] // d, o[i] % d) for o in orders for i in range(d * m) if o[i] // d != o[(i + 1) % (d * m)] // d]
    assert len(set(senders)) == len(senders)  # no NIC sends two channels between blocks
    if channels == d:
        assert len(senders) == d * m  # every member's NIC sends one


def test_channel_rings_closed_form_on_a_non_blocking_fabric():
    d, m = 4, 3  # 3 scale-up domains of 4 on one leaf: a flat ring sends between domains on one NIC each
    su = fb.ScaleUp(size=d, bandwidth=400e9, latency=0.0)
    net, info, router = _one_switch(d * m, scale_up=su)
    n, S = d * m, 4e9
    assert st.ring_channels(info, np.arange(n)[None, :]) == (d, d)
    assert st.ring_channels(info, np.arange(d)[None, :]) == (1, 1)  # one domain: no NIC to spread over
    assert st.ring_channels(info, np.arange(0, n, d)[None, :]) == (1, 1)  # one member per domain
    assert st.ring_channels(info, np.arange(n)[None, :], limit=2) == (d, 2)
    swapped = np.arange(n)
    swapped[[4, 5]] = swapped[[5, 4]]  # the second domain's members in another order: their rails differ
    assert st.ring_channels(info, swapped[None, :]) == (1, 1)
    latency = 2 * (n - 1) * 2 * HOP  # every step waits for the slowest route: GPU -> leaf -> GPU
    for channels in (1, 2, d):
        coll = tr.all_reduce(np.arange(n), S, local_size=d, channels=channels)
        assert coll.phases[0].num_flows == channels * n
        assert coll.phases[0].bytes.sum() == pytest.approx(2 * (n - 1) * S)  # channels split the bytes
        expected = 2 * (n - 1) / n * S / (channels * B) + latency
        assert _time(coll, net, router) == pytest.approx(expected, rel=1e-9)
    for make in (tr.all_gather, tr.reduce_scatter):
        one, four = (_time(make(np.arange(n), S, local_size=d, channels=c), net, router) for c in (1, d))
        assert four - latency / 2 == pytest.approx((one - latency / 2) / d, rel=1e-9)


def test_training_rings_run_one_channel_per_gpu_of_a_domain():
    model = tr.Model("m", layers=2, hidden=1024, ffn_hidden=4096, heads=8, kv_heads=8, vocab=1000, seq_len=1024)
    su = fb.ScaleUp(size=4, bandwidth=400e9, latency=0.0)
    net, info, router = _one_switch(16, scale_up=su)
    par = tr.Parallelism(tp=2, dp=8)  # a DP group: 2 GPUs in each of 4 domains
    auto, flat = (st.plan_training(tr.Training(model, par, global_batch=8, channels=c), info, router)
                  for c in (None, 1))
    assert auto.dp.sub.parent.size > 0 and np.unique(auto.dp.sub.parent).size == 2 * 16
    assert np.unique(flat.dp.sub.parent).size == 16
    dp = [st.step_time(plan, net).collectives["dp_all_reduce"]["seconds"] for plan in (auto, flat)]
    assert float(dp[0]) < 0.6 * float(dp[1])
    with pytest.raises(ValueError, match="training.channels: must be an integer >= 1, got 0"):
        tr.Training(model, par, global_batch=8, channels=0)


@pytest.mark.parametrize("make, match", [
    (lambda: tr.all_reduce(np.arange(8), 1.0, local_size=4, channels=5), r"channels: must be an integer in \[1, "
                                                                          r"local_size = 4\], got 5"),
    (lambda: tr.all_reduce(np.arange(8), 1.0, "tree", local_size=4, channels=2), "channels: parallel rings are for "
                                                                                   "the ring algorithm, not 'tree'"),
    (lambda: tr.all_gather(np.arange(6), 1.0, local_size=4, channels=2), "local_size: must be a positive divisor"),
    (lambda: tr.reduce_scatter(np.arange(6), 1.0, local_size=4), "local_size: must be a positive divisor of the "
                                                                 "group size 6, got 4"),
    (lambda: tr.all_reduce(np.arange(4), -1.0), "size: must be > 0 and finite bytes, got -1"),
    (lambda: tr.all_reduce(np.arange(4), float("nan")), "size: must be > 0"),
    (lambda: tr.all_reduce(np.arange(4), 1.0, "butterfly"), "unknown all-reduce algorithm 'butterfly'"),
    (lambda: tr.all_reduce(np.arange(6), 1.0, "hierarchical", local_size=4), "local_size: must be a positive divisor"),
    (lambda: tr.all_gather([[0, 1, 1]], 1.0), r"groups\[0\]: a rank appears twice"),
    (lambda: tr.reduce_scatter([[-1, 2]], 1.0), "ranks must be >= 0"),
    (lambda: tr.all_to_all(np.arange(4), 1.0, "ring"), "unknown all_to_all algorithm 'ring'"),
    (lambda: tr.bus_factor("gather", 4), "unknown collective 'gather'"),
])
def test_bad_collectives(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_a_rank_beyond_the_fabric_is_named():
    net, info, router = _one_switch(4)
    with pytest.raises(ValueError, match=r"src\[4\] = 4 is not a GPU rank"):
        st.route_phase(tr.all_reduce(np.arange(5), 1.0).phases[0], router)


def test_training_report_gives_nccl_bus_bandwidth():
    from flowmodel import steptime
    model = tr.Model("m", layers=2, hidden=1024, ffn_hidden=4096, heads=8, kv_heads=8, vocab=1000, seq_len=1024)
    su = fb.ScaleUp(size=4, bandwidth=400e9, latency=0.0)
    net, info, router = _one_switch(8, scale_up=su)
    job = tr.Training(model, tr.Parallelism(tp=4, dp=2), global_batch=2)
    res = steptime.step_time(steptime.plan_training(job, info, router), net)
    ag = res.collectives["tp_all_gather"]
    assert ag["bytes"] == 1024 * 1024 * 2 and ag["ranks"] == 4
    assert ag["busbw"] == pytest.approx(400e9, rel=1e-9)  # an ideal NVSwitch domain runs at line rate
