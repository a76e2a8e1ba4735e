"""Candidate paths and routing policies on built fabrics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowmodel as fm
from flowmodel import fabric as fb
from flowmodel import routing as rt
from flowmodel.peers import fattree


def _compile(*sites, long_haul=()):
    return fb.compile_fabric(fb.build(fb.Fleet(sites=sites, long_haul=long_haul)))


def _check_paths(info, c):
    """Every candidate is a contiguous walk from its flow's source GPU to its destination GPU."""
    for p, row in enumerate(c.links):
        hops = row[row >= 0]
        f = c.flow[p]
        assert info.src[hops[0]] == info.gpus[c.src[f]] and info.dst[hops[-1]] == info.gpus[c.dst[f]]
        assert (info.dst[hops[:-1]] == info.src[hops[1:]]).all()
        assert len(set(hops.tolist())) == hops.size


@pytest.mark.parametrize("k", [4, 8])
def test_fat_tree_path_counts(k):
    net, info = _compile(fb.Site("s", scale_out=fb.Clos.from_radix(k), scale_up=None))
    router = rt.Router(info, max_paths=k * k)
    half = k // 2
    per_pod = half * half
    src = [0, 0, 0]
    dst = [1, half, per_pod]  # same leaf, same pod, another pod
    c = router.candidates(src, dst)
    assert c.count.tolist() == [1, half, half * half]
    assert [(c.links[c.first[f]] >= 0).sum() for f in range(3)] == [2, 4, 6]
    assert len({tuple(r) for r in c.links}) == c.links.shape[0]  # distinct
    _check_paths(info, c)


def test_capped_candidates_are_deterministic_samples():
    _, info = _compile(fb.Site("s", scale_out=fb.Clos.from_radix(8), scale_up=None))
    a = rt.Router(info, max_paths=5).candidates([0, 3], [100, 127])
    b = rt.Router(info, max_paths=5).candidates([0, 3], [100, 127])
    np.testing.assert_array_equal(a.links, b.links)
    assert a.count.tolist() == [5, 5]
    other = rt.Router(info, max_paths=5, seed=1).candidates([0, 3], [100, 127])
    assert not np.array_equal(a.links, other.links)


def test_scale_up_pairs_stay_in_the_domain_and_fall_back_when_it_fails():
    site = fb.Site("s", scale_out=fb.Clos(tiers=2, gpus_per_leaf=4, leaves_per_pod=4, spines_per_pod=2),
                   scale_up=fb.ScaleUp(size=8))
    g = fb.build(fb.Fleet(sites=(site,)))
    _, info = fb.compile_fabric(g)
    c = rt.Router(info).candidates([0, 0], [7, 8])
    first = [info.link_name(link) for link in c.links[0] if link >= 0]
    assert first == ["s/gpu0->s/nvswitch0", "s/nvswitch0->s/gpu7"]
    assert info.tier[c.links[c.first[1]][0]] == "nic"
    _, broken = fb.compile_fabric(fb.fail(g, cables=[("s/gpu7", "s/nvswitch0")]))
    c = rt.Router(broken).candidates([0], [7])
    assert set(broken.tier[c.links[c.links >= 0]]) == {"nic", "leaf_spine"}


def test_rail_optimized_keeps_same_rail_traffic_on_one_leaf():
    clos = fb.Clos(tiers=2, gpus_per_leaf=4, leaves_per_pod=8, spines_per_pod=4, rail_optimized=True)
    _, info = _compile(fb.Site("s", scale_out=clos, scale_up=fb.ScaleUp(size=8)))
    router = rt.Router(info)
    same_rail = router.candidates([3], [8 + 3])  # rail 3 of servers 0 and 1
    assert same_rail.count[0] == 1 and (same_rail.links[0] >= 0).sum() == 2
    cross_rail = router.candidates([3], [8 + 4])
    assert cross_rail.count[0] == 4 and (cross_rail.links[0] >= 0).sum() == 4
    plain = fb.Clos(tiers=2, gpus_per_leaf=4, leaves_per_pod=8, spines_per_pod=4)
    _, info = _compile(fb.Site("s", scale_out=plain, scale_up=fb.ScaleUp(size=8)))
    assert rt.Router(info).candidates([3], [11]).count[0] == 4  # different racks


def _ring_fleet(lengths=(10.0, 100.0, 1000.0, 2000.0)):
    clos = fb.Clos(tiers=2, gpus_per_leaf=4, leaves_per_pod=2, spines_per_pod=2)
    sites = tuple(fb.Site(n, scale_out=clos, scale_up=fb.ScaleUp(size=4)) for n in "abcd")
    return fb.Fleet(sites=sites, long_haul=fb.ring("abcd", capacity=1e11, length_km=list(lengths)))


def test_scale_across_both_ways_round_the_ring():
    g = fb.build(_ring_fleet())
    net, info = fb.compile_fabric(g)
    c = rt.Router(info, max_paths=8, site_paths=2).candidates([0], [8 + 8])  # site a -> site c
    _check_paths(info, c)
    lh = [tuple(info.link_name(x) for x in row if x >= 0 and info.tier[x] == "long_haul") for row in c.links]
    ways = set(lh)
    assert ways == {("a/border->b/border", "b/border->c/border"), ("a/border->d/border", "d/border->c/border")}
    short = ("a/border->b/border", "b/border->c/border")  # 110 km against 3,000 km
    assert all(eq == (way == short) for eq, way in zip(c.equal_cost, lh))
    assert c.num_equal[0] == 4 and c.count[0] == 8
    sub = rt.ecmp(c)
    assert sub.routes.shape[0] == 1 and c.equal_cost[np.flatnonzero((c.links == sub.routes[0]).all(1))[0]]
    latency = fm.route_latency(jnp.asarray(c.links), net.latency)
    assert float(latency.max()) == pytest.approx(3000 * 4.9e-6 + 6 * 1e-6, rel=1e-12)
    # the short way fails: traffic goes round the long way
    _, broken = fb.compile_fabric(fb.fail(g, cables=["long_haul/b-c"]))
    c = rt.Router(broken, max_paths=8, site_paths=2).candidates([0], [16])
    tiers = [broken.link_name(x) for x in c.links[0] if x >= 0 and broken.tier[x] == "long_haul"]
    assert tiers == ["a/border->d/border", "d/border->c/border"] and c.equal_cost.all()


def test_unreachable_pairs_are_reported_or_raise():
    g = fb.build(_ring_fleet())
    lonely = fb.fail(g, cables=["long_haul/a-b", "long_haul/d-a"])
    _, info = fb.compile_fabric(lonely)
    router = rt.Router(info)
    with pytest.raises(ValueError, match=r"routing: 1 of 2 flows have no path, e.g. 0 \(a/gpu0\) -> 9 \(b/gpu1\)"):
        router.candidates([0, 8], [9, 20])
    c = router.candidates([0, 8], [9, 20], unreachable="report")
    assert c.unreachable.tolist() == [0] and c.count[0] == 0
    sub = rt.ecmp(c)
    finish = sub.flow_finish(jnp.ones(sub.routes.shape[0]))
    assert finish.tolist() == [np.inf, 1.0]
    _, gone = fb.compile_fabric(fb.fail(g, sites=["b"]))
    with pytest.raises(ValueError, match=r"-> 9 \(failed\)"):
        rt.Router(gone).candidates([0], [9])


def _mixed_candidates(max_paths=16):
    _, info = _compile(fb.Site("s", scale_out=fb.Clos.from_radix(8), scale_up=fb.ScaleUp(size=4)))
    rng = np.random.default_rng(0)
    src, dst = fattree.random_pairs(info.num_gpus, 300, rng)
    return rt.Router(info, max_paths=max_paths).candidates(src, dst)


def test_ecmp_hash_is_deterministic_stable_and_uniform():
    c = _mixed_candidates()
    a, b = rt.ecmp(c, seed=3), rt.ecmp(c, seed=3)
    np.testing.assert_array_equal(a.routes, b.routes)
    assert not np.array_equal(a.routes, rt.ecmp(c, seed=4).routes)
    assert a.routes.shape[0] == c.num_flows and (a.fraction == 1.0).all()
    # adding flows does not move the existing ones (the hash reads the pair, not the position)
    _, info = _compile(fb.Site("s", scale_out=fb.Clos.from_radix(8), scale_up=fb.ScaleUp(size=4)))
    router = rt.Router(info)
    few = rt.ecmp(router.candidates([0, 5], [100, 77]), seed=3)
    more = rt.ecmp(router.candidates([9, 0, 1, 5], [40, 100, 2, 77]), seed=3)
    np.testing.assert_array_equal(few.routes[:, :6], more.routes[[1, 3], :6])
    # uniform over the (k/2)^2 = 16 core paths: many flows of one pair
    c = router.candidates(np.zeros(3200, int), np.full(3200, 100))
    picks = rt.ecmp(c).routes
    _, counts = np.unique(picks, axis=0, return_counts=True)
    assert counts.size == 16 and counts.min() > 140 and counts.max() < 260  # 200 expected, ~4 sigma


def test_spray_qp_and_wcmp_split_flows():
    c = _mixed_candidates()
    for sub in (rt.spray(c), rt.qp_scaling(c, 4, seed=1), rt.wcmp(c, jnp.zeros(c.links.shape[0]))):
        total = jax.ops.segment_sum(jnp.asarray(sub.fraction), sub.parent, num_segments=c.num_flows)
        np.testing.assert_allclose(total, 1.0, rtol=1e-12)
        assert (np.diff(sub.parent) >= 0).all()
        assert (sub.first + sub.count == np.r_[sub.first[1:], sub.routes.shape[0]]).all()
    assert rt.spray(c).count.tolist() == c.num_equal.tolist()
    assert (rt.qp_scaling(c, 4).count == 4).all()
    sizes = np.arange(1.0, c.num_flows + 1)
    sub = rt.qp_scaling(c, 3)
    np.testing.assert_allclose(sub.sizes(sizes), np.repeat(sizes / 3, 3))
    with pytest.raises(ValueError, match=r"logits: expected shape"):
        rt.wcmp(c, jnp.zeros(3))
    with pytest.raises(ValueError, match=r"qps: must be an integer >= 1, got 0"):
        rt.qp_scaling(c, 0)
    with pytest.raises(ValueError, match="unknown policy 'hash'"):
        rt.route(rt.Router(_compile(fb.Site("s"))[1]), [0], [20], "hash")


def test_spray_beats_ecmp_collisions_and_matches_the_certificate():
    """All-to-all between two racks: ECMP collides on spine links, spray balances them exactly."""
    clos = fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=2, spines_per_pod=8)
    net, info = _compile(fb.Site("s", scale_out=clos, scale_up=None))
    src = np.repeat(np.arange(8), 8)
    dst = 8 + np.tile(np.arange(8), 8)
    c = rt.Router(info).candidates(src, dst)
    throughput = {}
    for name, sub in (("ecmp", rt.ecmp(c)), ("spray", rt.spray(c))):
        w = sub.weights()
        rates = fm.maxmin_rates(sub.routes, net.capacity, weights=w)
        assert fm.reference.maxmin_violations(np.asarray(sub.routes), np.asarray(net.capacity), np.asarray(rates),
                                              weights=np.asarray(w)) == []
        throughput[name] = float(sub.flow_rate(rates).sum())
    assert throughput["spray"] == pytest.approx(8 * 50e9, rel=1e-12)  # the NICs, every one full
    assert throughput["ecmp"] < throughput["spray"]


def test_wcmp_gradient_matches_finite_differences():
    clos = fb.Clos(tiers=2, gpus_per_leaf=2, leaves_per_pod=2, spines_per_pod=2, oversubscription=(2.0,))
    net, info = _compile(fb.Site("s", scale_out=clos, scale_up=None))
    c = rt.Router(info).candidates([0, 1], [2, 3])
    sizes = jnp.array([3e9, 1e9])

    def makespan(logits):
        sub = rt.wcmp(c, logits)
        finish = fm.completion_times(sub.routes, sub.sizes(sizes), net.capacity, weights=sub.weights())
        return sub.flow_finish(finish).max()

    logits = jnp.array([0.3, -0.2, 0.1, 0.4])
    g = jax.grad(makespan)(logits)
    eps = 1e-6
    fd = [(makespan(logits.at[i].add(eps)) - makespan(logits.at[i].add(-eps))) / (2 * eps) for i in range(4)]
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-12)
    assert float(jnp.abs(g).max()) > 0
