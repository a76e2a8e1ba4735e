"""Fabric descriptions, the graph builder, compilation, link groups and failures."""

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest

from flowmodel import fabric as fb
from flowmodel.peers import fattree


def _edges(g, **tags):
    return [(u, v, d) for u, v, d in g.edges(data=True) if all(d.get(k) == w for k, w in tags.items())]


def _kind(g, kind):
    return [n for n, d in g.nodes(data=True) if d["kind"] == kind]


@pytest.mark.parametrize("topology", ["switch", "full_mesh"])
def test_scale_up_domain(topology):
    su = fb.ScaleUp(size=8, bandwidth=400e9, latency=936e-9, topology=topology)
    g = fb.build(fb.Fleet(sites=(fb.Site("hgx", scale_out=None, scale_up=su),)))
    assert len(_kind(g, "gpu")) == 8
    for gpu in _kind(g, "gpu"):
        out = [d["capacity"] for _, _, d in g.out_edges(gpu, data=True)]
        assert sum(out) == pytest.approx(400e9)  # per-accelerator bandwidth, however it is wired
    if topology == "switch":
        assert len(_kind(g, "scale_up_switch")) == 1 and g.number_of_edges() == 16
        assert nx.path_weight(g, ["hgx/gpu0", "hgx/nvswitch0", "hgx/gpu5"], "latency") == pytest.approx(936e-9)
    else:
        assert g.number_of_edges() == 8 * 7
        assert g.edges["hgx/gpu0", "hgx/gpu5"]["latency"] == pytest.approx(936e-9)


def test_two_tier_clos_counts_and_capacities():
    clos = fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=6, spines_per_pod=4, nic_bandwidth=50e9,
                   oversubscription=(2.0,))
    g = fb.build(fb.Fleet(sites=(fb.Site("s", scale_out=clos, scale_up=fb.ScaleUp(size=4)),)))
    assert len(_kind(g, "gpu")) == 48 and len(_kind(g, "leaf")) == 6 and len(_kind(g, "spine")) == 4
    up = _edges(g, tier="leaf_spine", direction="up")
    assert len(up) == 6 * 4 and len(_edges(g, tier="leaf_spine", direction="down")) == 24
    # 8 GPUs x 50 GB/s = 400 GB/s down per leaf; 2:1 -> 200 GB/s up, over 4 spines
    assert {d["capacity"] for _, _, d in up} == {50e9}
    assert len(_edges(g, tier="nic")) == 2 * 48 and len(_edges(g, tier="scale_up")) == 2 * 48


def test_oversubscription_defaults_to_non_blocking_and_one_ratio_serves_every_tier():
    assert fb.Clos(tiers=2).oversubscription == (1.0,) and fb.Clos(tiers=3).oversubscription == (1.0, 1.0)
    assert fb.Clos(tiers=3, oversubscription=4).oversubscription == (4.0, 4.0)
    assert fb.Clos(tiers=3, oversubscription=4) == fb.Clos(tiers=3, oversubscription=(4.0, 4.0))
    with pytest.raises(ValueError, match=r"oversubscription: needs 2 ratio\(s\) for 3 tiers"):
        fb.Clos(tiers=3, oversubscription=(4.0,))
    with pytest.raises(ValueError, match=r"oversubscription\[0\]: must be > 0"):
        fb.Clos(tiers=3, oversubscription=-1)
    assert fb.Clos(tiers=3, oversubscription=np.array([1, 7])).oversubscription == (1.0, 7.0)
    with pytest.raises(ValueError, match=r"oversubscription: expected a ratio or a list of ratios, got '4'"):
        fb.Clos(tiers=3, oversubscription="4")


def test_meta_24k_preset_ratios_measured_from_the_graph():
    g = fb.build(fb.meta_24k())
    gpus, racks = _kind(g, "gpu"), _kind(g, "leaf")
    assert len(gpus) == 24_576 and len(racks) == 1_536 and len(_kind(g, "scale_up_switch")) == 3_072
    rack_gpus = {r: sum(1 for _ in g.predecessors(r) if g.nodes[_]["kind"] == "gpu") for r in racks}
    assert set(rack_gpus.values()) == {16}

    def ratio(switch, below, above):  # capacity in from below / capacity out to above
        down = sum(d["capacity"] for u, _, d in g.in_edges(switch, data=True) if g.nodes[u]["kind"] == below)
        up = sum(d["capacity"] for _, v, d in g.out_edges(switch, data=True) if g.nodes[v]["kind"] == above)
        return down / up

    assert {round(ratio(r, "gpu", "spine"), 12) for r in racks} == {0.5}  # rack -> cluster 1:2
    spines = _kind(g, "spine")
    assert {round(ratio(s, "leaf", "aggregation"), 12) for s in spines} == {7.0}  # cluster -> aggregation 7:1
    # 8 AI zones: the leaf-spine graph splits into 8 components of 192 racks
    zones = list(nx.weakly_connected_components(g.subgraph(racks + spines)))
    assert len(zones) == 8 and {len([n for n in z if n in set(racks)]) for z in zones} == {192}


def test_fat_tree_from_radix_is_the_closed_form_fat_tree():
    k = 4
    g = fb.build(fb.Fleet(sites=(fb.Site("s", scale_out=fb.Clos.from_radix(k), scale_up=None),)))
    ref = fattree.fat_tree(k).to_networkx()
    assert nx.is_isomorphic(nx.Graph(g), nx.Graph(ref))


def test_scale_across_latency_and_groups():
    site = fb.Site("x", scale_out=fb.Clos(tiers=2, gpus_per_leaf=4, leaves_per_pod=2, spines_per_pod=2),
                   scale_up=fb.ScaleUp(size=4))
    sites = tuple(fb.Site(n, scale_out=site.scale_out, scale_up=site.scale_up) for n in "abcd")
    fleet = fb.Fleet(sites=sites, long_haul=fb.ring("abcd", capacity=1e11, length_km=[10, 100, 1000, 2000]))
    g = fb.build(fleet)
    lh = _edges(g, tier="long_haul")
    assert len(lh) == 8
    assert g.edges["c/border", "d/border"]["latency"] == pytest.approx(1000 * 4.9e-6)
    assert g.edges["a/border", "d/border"]["length_km"] == 2000
    net, info = fb.compile_fabric(g)
    assert set(info.groups) >= {"long_haul/a-b", "long_haul/d-a", "a/border_up", "d/leaf_up", "b/nic"}
    assert info.groups["long_haul/c-d"].links.size == 2  # both directions follow one parameter


def test_ring_of_regions_and_full_mesh():
    links = fb.ring_of_regions({"r1": ["a", "b", "c"], "r2": ["d", "e"], "r3": ["f"]}, campus_capacity=1.0,
                               campus_km=2.0, ring_capacity=3.0, ring_km=[500, 800, 1200])
    names = sorted(lh.name for lh in links)
    assert names == sorted(["a-b", "a-c", "b-c", "d-e", "a-d", "d-f", "f-a"])
    assert len(fb.full_mesh(list("abcd"), capacity=1.0, length_km=1.0)) == 6


def test_compilation_is_deterministic_and_round_trips():
    fleet = fb.Fleet(sites=(fb.Site("a"), fb.Site("b", scale_out=fb.Clos.from_radix(4))),
                     long_haul=(fb.LongHaul("a", "b", 1e11, 50.0),))
    n1, i1 = fb.compile_fabric(fb.build(fleet))
    n2, i2 = fb.compile_fabric(fb.build(fleet))
    np.testing.assert_array_equal(n1.capacity, n2.capacity)
    assert i1.nodes == i2.nodes and (i1.src == i2.src).all() and (i1.dst == i2.dst).all()
    n3, i3 = fb.compile_fabric(fb.to_networkx(n1, i1))
    np.testing.assert_array_equal(n1.capacity, n3.capacity)
    np.testing.assert_array_equal(n1.latency, n3.latency)
    assert i3.nodes == i1.nodes and (i3.src == i1.src).all() and (i3.tier == i1.tier).all()
    assert (i3.gpus == i1.gpus).all() and set(i3.groups) == set(i1.groups)


def test_groups_map_parameters_to_capacity_differentiably():
    clos = fb.Clos(tiers=3, gpus_per_leaf=4, leaves_per_pod=2, spines_per_pod=2, pods=2, aggs_per_plane=2,
                   oversubscription=(1.0, 4.0))
    net, info = fb.compile_fabric(fb.build(fb.Fleet(sites=(fb.Site("s", scale_out=clos),))))
    same = fb.apply_groups(net, info, info.group_values())
    np.testing.assert_allclose(same.capacity, net.capacity, rtol=1e-15)
    links = info.groups["s/spine_up"].links
    half = fb.apply_groups(net, info, {"s/spine_up": 8.0})
    np.testing.assert_allclose(half.capacity[links], net.capacity[links] / 2, rtol=1e-15)
    others = np.setdiff1d(np.arange(info.num_links), links)
    np.testing.assert_array_equal(half.capacity[others], net.capacity[others])

    def total(r):
        return fb.apply_groups(net, info, {"s/spine_up": r}).capacity.sum()

    g = jax.grad(total)(4.0)
    fd = (total(4.0 + 1e-4) - total(4.0 - 1e-4)) / 2e-4
    assert g == pytest.approx(float(fd), rel=1e-6) and g < 0
    assert jnp.isfinite(jax.jit(total)(2.0))
    with pytest.raises(ValueError, match="did you mean 's/spine_up'"):
        fb.apply_groups(net, info, {"s/spine_upp": 2.0})
    with pytest.raises(ValueError, match=r"groups\[s/nic\]: must be a scalar > 0"):
        fb.apply_groups(net, info, {"s/nic": -1.0})


def test_failures_remove_and_degrade():
    fleet = fb.Fleet(sites=(fb.Site("a"), fb.Site("b"), fb.Site("c")),
                     long_haul=fb.ring("abc", capacity=1e11, length_km=100.0))
    g = fb.build(fleet)
    broken = fb.fail(g, cables=["long_haul/a-b", ("a/leaf0", "a/spine3")], switches=["b/spine0"],
                     degrade={("c/leaf1", "c/spine2"): 0.25})
    assert not broken.has_edge("a/border", "b/border") and not broken.has_edge("b/border", "a/border")
    assert not broken.has_edge("a/spine3", "a/leaf0") and "b/spine0" not in broken
    cable = ("c/spine2", "c/leaf1")
    assert broken.edges[cable]["capacity"] == pytest.approx(g.edges[cable]["capacity"] / 4)
    assert g.has_edge("a/border", "b/border")  # the original is untouched
    net, info = fb.compile_fabric(broken)
    full, _ = fb.compile_fabric(g)
    assert info.num_links == full.num_links - 2 - 2 - 2 * 16 - 2 * 1  # long-haul, cable, spine's links
    # surviving links keep their build order
    order = [d["link"] for _, _, d in broken.edges(data=True)]
    assert sorted(order) == [int(x) for x in np.sort(order)]
    gone = fb.fail(g, sites=["b"])
    _, ginfo = fb.compile_fabric(gone)
    assert ginfo.num_gpus == 3 * 256 and (ginfo.gpus[256:512] == -1).all()


@pytest.mark.parametrize("make, match", [
    (lambda: fb.Clos(tiers=3, pods=2, oversubscription=(1.0, 0.0)), r"scale_out.oversubscription\[1\]: must be > 0"),
    (lambda: fb.Clos(oversubscription=(-1.0,)), r"scale_out.oversubscription\[0\]: must be > 0 and finite, got -1"),
    (lambda: fb.Clos(gpus_per_leaf=0), "scale_out.gpus_per_leaf: must be an integer >= 1, got 0"),
    (lambda: fb.Clos(tiers=4), "scale_out.tiers: must be 2 or 3, got 4"),
    (lambda: fb.Clos(tiers=3, oversubscription=(1.0,)), "needs 2 ratio"),
    (lambda: fb.Clos(radix=16), "scale_out.radix: a leaf switch needs 32 ports, radix is 16"),
    (lambda: fb.ScaleUp(size=0), "scale_up.size: must be an integer >= 1, got 0"),
    (lambda: fb.ScaleUp(topology="torus"), "scale_up.topology: must be 'switch' or 'full_mesh', got 'torus'"),
    (lambda: fb.ScaleUp(bandwidth=float("nan")), "scale_up.bandwidth: must be > 0"),
    (lambda: fb.Site("s", scale_up=fb.ScaleUp(size=7)), r"sites\[s\].scale_up.size: 7 does not divide"),
    (lambda: fb.Fleet(sites=()), "fleet.sites: must name at least one site"),
    (lambda: fb.Fleet(sites=(fb.Site("a"), fb.Site("a"))), "site name 'a' is used twice"),
    (lambda: fb.Fleet(sites=(fb.Site("a"), fb.Site("b"))), r"sites \['b'\] are disconnected"),
    (lambda: fb.Fleet(sites=(fb.Site("a"),), long_haul=(fb.LongHaul("a", "z", 1.0, 1.0),)), "unknown site 'z'"),
    (lambda: fb.LongHaul("a", "b", 0.0, 1.0), r"long_haul\[a-b\].capacity: must be > 0"),
    (lambda: fb.LongHaul("a", "b", 1.0, -5.0), r"long_haul\[a-b\].length_km: must be >= 0"),
    (lambda: fb.ring(["a", "b", "c"], capacity=1.0, length_km=[1.0, 2.0]), "ring.length_km: needs 3 values"),
    (lambda: fb.compile_fabric(fb.fail(fb.build(fb.Fleet(sites=(fb.Site("a"),))), cables=[("a/gpu0", "a/leaf1")])),
     "no link between 'a/gpu0' and 'a/leaf1'"),
    (lambda: fb.fail(fb.build(fb.Fleet(sites=(fb.Site("a"),))), sites=["q"]), "failures.sites: unknown site 'q'"),
    (lambda: fb.fail(fb.build(fb.Fleet(sites=(fb.Site("a"),))), degrade={("a/leaf0", "a/spine0"): 1.5}),
     r"fraction must be in \(0, 1\]"),
    (lambda: fb.compile_fabric(fb.build(fb.Fleet(sites=(fb.Site("a"),))))[1].links_where(tier="core"),
     "tier: no link is tagged 'core'"),
])
def test_bad_descriptions(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_compile_rejects_bad_link_attributes():
    g = nx.DiGraph()
    g.add_edge("u", "v", capacity=float("nan"))
    with pytest.raises(ValueError, match="link u->v: capacity must be > 0"):
        fb.compile_fabric(g)
    g.edges["u", "v"].update(capacity=1.0, latency=-1.0)
    with pytest.raises(ValueError, match="link u->v: latency must be >= 0"):
        fb.compile_fabric(g)
