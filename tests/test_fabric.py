"""k-ary fat-tree: sizes, link numbering against the networkx graph, routes, bad input."""

import networkx as nx
import numpy as np
import pytest

from flowmodel.peers import fattree


@pytest.mark.parametrize("k", [2, 4, 8])
def test_sizes_and_graph(k):
    ft = fattree.fat_tree(k)
    g = ft.to_networkx()
    hosts = [n for n in g if n.startswith("host")]
    assert len(hosts) == ft.num_hosts == k**3 // 4
    assert g.number_of_edges() == ft.num_links == 6 * ft.num_hosts
    assert sum(n.startswith("core") for n in g) == (k // 2) ** 2
    assert all(g.has_edge(v, u) for u, v in g.edges)  # every link has its reverse
    assert sorted(d["link"] for _, _, d in g.edges(data=True)) == list(range(ft.num_links))


def test_routes_are_shortest_up_down_paths():
    k = 4
    ft = fattree.fat_tree(k)
    g = ft.to_networkx()
    by_index = {d["link"]: (u, v) for u, v, d in g.edges(data=True)}
    rng = np.random.default_rng(0)
    src, dst = fattree.random_pairs(ft.num_hosts, 200, rng)
    routes = ft.route(src, dst, rng)
    for s, d, route in zip(src, dst, routes):
        hops = [by_index[link] for link in route if link >= 0]
        assert hops[0][0] == f"host{s}" and hops[-1][1] == f"host{d}"
        assert all(a[1] == b[0] for a, b in zip(hops, hops[1:]))  # contiguous
        assert len(hops) == nx.shortest_path_length(g, f"host{s}", f"host{d}")


def test_ecmp_spreads_over_all_core_paths():
    ft = fattree.fat_tree(4)
    rng = np.random.default_rng(1)
    routes = ft.route(np.zeros(4000, int), np.full(4000, ft.num_hosts - 1), rng)
    assert len({tuple(r) for r in routes}) == (4 // 2) ** 2


def test_heterogeneity_is_deterministic_and_bounded():
    a = fattree.fat_tree(4, capacity=10.0, heterogeneity=0.5, seed=3)
    b = fattree.fat_tree(4, capacity=10.0, heterogeneity=0.5, seed=3)
    np.testing.assert_array_equal(a.capacity, b.capacity)
    assert a.capacity.min() >= 5.0 and a.capacity.max() <= 15.0


@pytest.mark.parametrize("call, match", [
    (lambda: fattree.fat_tree(3), "k must be an even integer"),
    (lambda: fattree.fat_tree(4, capacity=-1.0), r"capacity\[host_up\] must be > 0"),
    (lambda: fattree.fat_tree(4, heterogeneity=1.0), "heterogeneity must be in"),
    (lambda: fattree.fat_tree(4).route([0], [16], np.random.default_rng()), r"dst\[0\] = 16 is not a host"),
    (lambda: fattree.fat_tree(4).route([1], [1], np.random.default_rng()), "a flow needs two hosts"),
    (lambda: fattree.random_pairs(4, 13, np.random.default_rng()), "num_flows must be in 1..12"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
