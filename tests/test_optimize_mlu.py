"""Traffic splits for minimum MLU against the LP optimum (SciPy HiGHS)."""

import jax
import numpy as np
import pytest

import flowmodel as fm
from flowmodel import fabric as fb
from flowmodel import routing as rt
from flowmodel.peers import fattree


def _fleet(kind):
    if kind == "fat_tree":
        return fb.Fleet(sites=(fb.Site("s", scale_out=fb.Clos.from_radix(8, oversubscription=(2.0, 3.0)),
                                       scale_up=None),))
    clos = fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=4, spines_per_pod=4, oversubscription=(2.0,))
    sites = tuple(fb.Site(n, scale_out=clos, scale_up=None) for n in "abcd")
    return fb.Fleet(sites=sites, long_haul=fb.ring("abcd", capacity=[100e9, 200e9, 150e9, 120e9],
                                                   length_km=[10, 20, 30, 40]))


def mlu_instance(kind, flows, seed, permutation=False):
    """Paths between GPUs without their NIC links (the same for every path of a pair)."""
    net, info = fb.compile_fabric(fb.build(_fleet(kind)))
    rng = np.random.default_rng(seed)
    G = info.num_gpus
    if permutation:
        src, dst = np.arange(G), rng.permutation(G)
        src, dst = src[src != dst], dst[src != dst]
    else:
        src, dst = fattree.random_pairs(G, flows, rng)
    c = rt.Router(info, max_paths=64, site_paths=2).candidates(src, dst)
    capacity = np.asarray(net.capacity) * rng.uniform(0.7, 1.3, info.num_links)
    nic = info.tier == "nic"
    routes = np.where((c.links < 0) | nic[np.maximum(c.links, 0)], -1, c.links)
    routes = -np.sort(-routes, axis=1)  # pads last
    return routes, c.flow, rng.uniform(1e9, 20e9, src.size), capacity


def _mlu(routes, owner, demand, capacity, split):
    load = np.asarray(fm.link_bytes(routes, np.asarray(split) * demand[owner], capacity.size))
    return float(np.max(load / capacity))


@pytest.mark.parametrize("kind, flows, permutation", [("fat_tree", 300, False), ("fat_tree", 0, True),
                                                      ("ring", 200, False), ("ring", 0, True)])
def test_within_half_a_percent_of_the_lp_optimum(kind, flows, permutation):
    routes, owner, demand, capacity = mlu_instance(kind, flows, seed=1, permutation=permutation)
    _, lp = fm.optimize.lp_min_mlu(routes, owner, demand, capacity)
    split, mlu = fm.optimize.split_for_min_mlu(routes, owner, demand, capacity)
    split = np.asarray(split)
    assert (split >= 0).all()
    np.testing.assert_allclose(np.bincount(owner, weights=split), 1.0, rtol=1e-12)
    assert float(mlu) == pytest.approx(_mlu(routes, owner, demand, capacity, split), rel=1e-12)
    assert lp * (1 - 1e-9) <= float(mlu) <= lp * 1.005
    even = 1.0 / np.bincount(owner)[owner]
    assert _mlu(routes, owner, demand, capacity, even) > lp * 1.02  # the instance needs a real split


def test_vmap_over_demand_matrices_matches_a_loop_and_the_lp():
    routes, owner, demand, capacity = mlu_instance("ring", 60, seed=2)
    demands = np.stack([demand * f for f in (0.5, 1.0, 1.7)] + [demand[::-1].copy()])
    run = jax.vmap(lambda d: fm.optimize.split_for_min_mlu(routes, owner, d, capacity, check=False))
    splits, mlus = run(demands)
    for i, d in enumerate(demands):
        # batching reorders float sums, so the two searches drift apart within the search's tolerance
        _, m = fm.optimize.split_for_min_mlu(routes, owner, d, capacity)
        _, lp = fm.optimize.lp_min_mlu(routes, owner, d, capacity)
        assert float(mlus[i]) == pytest.approx(float(m), rel=1e-3)
        assert lp * (1 - 1e-9) <= float(mlus[i]) <= lp * 1.005


@pytest.mark.parametrize("args, match", [
    (([[0, -1]], [0], [1.0, 2.0], [1.0]), r"demand\[1\] has no path"),
    (([[0, -1]], [3], [1.0], [1.0]), r"path_owner\[0\] = 3 is not a demand"),
    (([[0, -1]], [0], [-1.0], [1.0]), "demand"),
    (([[0, -1]], [0], [1.0], [0.0]), "capacity"),
    (([[4, -1]], [0], [1.0], [1.0]), "route"),
])
def test_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        fm.optimize.split_for_min_mlu(*[np.asarray(a) for a in args])
