"""The array paths of routing and fabric building against their per-pair / per-link references.

``Router.candidates`` computes every leaf pair of a call at once (path tables, ancestor classes,
vectorised sampling); these tests assemble the same Candidates pair by pair from the reference
methods (``Router._between``, ``random.Random``, a dict lookup of scale-up links) and ask for
identical arrays, on one- and multi-site fabrics, with failures, full-mesh and switched scale-up
domains (and their fallback to the scale-out fabric), and a fabric where one GPU's leaf is above
another's. ``build_table`` / ``compile_table`` are checked against ``build`` / ``compile_fabric``.
"""

import random

import jax
import numpy as np
import pytest

from flowmodel import fabric as fb
from flowmodel import routing as rt
from flowmodel import scenario as sc
from flowmodel import traffic as tr
from flowmodel._programs import Program
from flowmodel.routing._sample import sample_sorted

SU = fb.ScaleUp(size=8)
CLOS3 = fb.Clos(tiers=3, pods=2, aggs_per_plane=2, oversubscription=(1.0, 4.0))


def _reference(router: rt.Router, src, dst) -> rt.Candidates:
    """The candidates assembled flow by flow from the per-pair methods (the former implementation)."""
    info = router.info
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    scale_up = {}
    for i in np.flatnonzero(info.tier == fb.Tier.SCALE_UP).tolist():
        scale_up[(int(info.src[i]), int(info.dst[i]))] = i
    out_links = {}
    for (u, v), i in scale_up.items():
        out_links.setdefault(u, []).append((v, i))
    up_link, leaf, down_link = router._endpoints()
    rows, flows, equal = [], [], []
    for f, (s, d) in enumerate(zip(src.tolist(), dst.tolist())):
        a, b = int(info.gpus[s]), int(info.gpus[d])
        if a < 0 or b < 0:
            continue
        if info.gpu_domain[s] >= 0 and info.gpu_domain[s] == info.gpu_domain[d]:
            path = (scale_up[(a, b)],) if (a, b) in scale_up else next(
                ((up, scale_up[(w, b)]) for w, up in out_links.get(a, []) if (w, b) in scale_up), None)
            if path is not None:
                rows.append(path), flows.append(f), equal.append(True)
                continue
        if up_link[s] < 0 or down_link[d] < 0:
            continue
        paths, eq = router._between(int(leaf[s]), int(leaf[d]))
        for p, e in zip(paths, eq):
            rows.append((int(up_link[s]), *p, int(down_link[d]))), flows.append(f), equal.append(e)
    # the former layout: scale-up rows first, then the others, each flow's equal-cost rows first
    first_part = [i for i, r in enumerate(rows) if len(r) <= 2 and all(info.tier[x] == fb.Tier.SCALE_UP for x in r)]
    rest = [i for i in range(len(rows)) if i not in set(first_part)]
    order = first_part + rest
    flow, eq = np.array([flows[i] for i in order], np.int64), np.array([equal[i] for i in order], bool)
    width = max(len(r) for r in rows)
    links = np.full((len(rows), width), -1, np.int32)
    for k, i in enumerate(order):
        links[k, :len(rows[i])] = rows[i]
    sort = np.lexsort((~eq, flow))
    count = np.bincount(flow, minlength=src.size)
    return rt.Candidates(src=src, dst=dst, links=links[sort], flow=flow[sort], equal_cost=eq[sort],
                         first=np.concatenate([[0], np.cumsum(count)[:-1]]), count=count,
                         num_equal=np.bincount(flow[eq], minlength=src.size), unreachable=np.flatnonzero(count == 0))


def _pairs(num_gpus: int, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_gpus, n)
    dst = (src + rng.integers(1, num_gpus, n)) % num_gpus
    near = np.arange(min(num_gpus, 32))  # scale-up neighbours too
    return np.r_[src, near], np.r_[dst, (near ^ 1) % num_gpus]


def _assert_same(c: rt.Candidates, ref: rt.Candidates):
    for field in ("src", "dst", "flow", "equal_cost", "first", "count", "num_equal", "unreachable"):
        np.testing.assert_array_equal(getattr(c, field), getattr(ref, field), err_msg=field)
    width = max(c.links.shape[1], ref.links.shape[1])
    pad = [np.pad(x.links, ((0, 0), (0, width - x.links.shape[1])), constant_values=-1) for x in (c, ref)]
    np.testing.assert_array_equal(*pad)


def _ring():
    names = ["r0", "r1", "r2", "r3"]
    return fb.Fleet(sites=tuple(fb.Site(n, scale_out=CLOS3, scale_up=SU) for n in names),
                    long_haul=fb.ring(names, capacity=1e12, length_km=[100.0, 800.0, 2000.0, 400.0]))


def _graphs():
    two = fb.Fleet(sites=(fb.Site("a", scale_out=CLOS3, scale_up=SU), fb.Site("b", scale_out=CLOS3, scale_up=SU)),
                   long_haul=(fb.LongHaul("a", "b", 3.2e12 / 8, 30.0),))
    ring = fb.build(_ring())
    up = [(u, v) for u, v, d in ring.edges(data=True) if d["direction"] == "up" and d["tier"] != fb.Tier.NIC]
    mesh = fb.build(fb.Fleet(sites=(fb.Site("m", scale_out=fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=4),
                                            scale_up=fb.ScaleUp(size=4, topology="full_mesh")),)))
    mesh_links = [(u, v) for u, v, d in mesh.edges(data=True) if d["tier"] == fb.Tier.SCALE_UP]
    switched = fb.build(fb.Fleet(sites=(fb.Site("s", scale_out=fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=4),
                                                scale_up=SU),)))
    su_links = [(u, v) for u, v, d in switched.edges(data=True) if d["tier"] == fb.Tier.SCALE_UP]
    return {
        "two sites": fb.build(two),
        "ring of four": ring,
        "ring, cables and switches failed": fb.fail(ring, cables=random.Random(1).sample(up, 40),
                                                    switches=["r0/spine1", "r1/aggregation0"]),
        "ring, a site failed": fb.fail(ring, sites=["r2"]),
        "ring, a long-haul link failed": fb.fail(ring, cables=["long_haul/r0-r1"]),
        "full mesh, links failed (two-hop fallback)": fb.fail(mesh, cables=[mesh_links[0], mesh_links[4],
                                                                             ("m/gpu0", "m/leaf0")]),
        "switched scale-up, links failed (scale-out fallback)": fb.fail(switched, cables=su_links[:6]),
    }


@pytest.mark.parametrize("name", list(_graphs()))
@pytest.mark.parametrize("kwargs", [{}, {"max_paths": 3, "seed": 7}, {"max_paths": 1, "site_paths": 3}])
def test_candidates_equal_the_per_pair_reference(name, kwargs):
    net, info = fb.compile_fabric(_graphs()[name])
    src, dst = _pairs(info.num_gpus, 1500)
    router = rt.Router(info, **kwargs)
    c = router.candidates(src, dst, unreachable="report")
    _assert_same(c, _reference(rt.Router(info, **kwargs), src, dst))
    again = router.candidates(src[::-1], dst[::-1], unreachable="report")  # the router's tables reused
    _assert_same(again, _reference(router, src[::-1], dst[::-1]))


def test_a_leaf_above_another_leaf_takes_the_per_pair_path():
    """One GPU hangs off a spine: its 'leaf' is an ancestor of the other leaves (the fallback)."""
    g = fb.build(fb.Fleet(sites=(fb.Site("a", scale_out=fb.Clos(tiers=3, pods=2, aggs_per_plane=2)),)))
    spine = "a/spine0"
    g.remove_edges_from([("a/gpu0", "a/leaf0"), ("a/leaf0", "a/gpu0")])
    top = max(d["link"] for *_, d in g.edges(data=True))
    g.add_edge("a/gpu0", spine, link=top + 1, capacity=1e10, latency=0.0, tier=fb.Tier.NIC, direction="up")
    g.add_edge(spine, "a/gpu0", link=top + 2, capacity=1e10, latency=0.0, tier=fb.Tier.NIC, direction="down")
    net, info = fb.compile_fabric(g)
    src = np.r_[np.zeros(40, np.int64), np.arange(1, 41)]
    dst = np.r_[np.arange(1, 41), np.zeros(40, np.int64)]
    router = rt.Router(info, max_paths=4)
    c = router.candidates(src, dst)
    _assert_same(c, _reference(rt.Router(info, max_paths=4), src, dst))
    assert (c.links[c.flow == 0, 1] >= 0).all()  # gpu0 -> spine0 -> leaf of gpu 1 -> gpu 1


def test_tree_all_reduce_candidates_equal_the_reference():
    net, info = fb.compile_fabric(fb.build(_ring()))
    ranks = np.random.default_rng(3).permutation(info.num_gpus)[:400]
    phase = tr.all_reduce(ranks[None, :], 1e9, "tree").phases[0]
    router = rt.Router(info, max_paths=5)
    want = _reference(rt.Router(info, max_paths=5), phase.src, phase.dst)
    _assert_same(router.candidates(phase.src, phase.dst), want)


@pytest.mark.parametrize("budget, low, high", [(16, 17, 70), (16, 17, 400), (16, 86, 10**6), (4, 5, 30),
                                               (1, 2, 5), (60, 61, 64), (5, 6, 200)])
def test_sample_equals_random_sample(budget, low, high):
    """Both of random.sample's algorithms (small and large population), and _randbelow's rejections."""
    rng = np.random.default_rng(budget + high)
    totals = rng.integers(low, high, 700)
    keys = [f"{rng.integers(0, 9)}/{rng.integers(0, 10**7)}/{rng.integers(0, 10**7)}/{i % 3}" for i in range(700)]
    want = [sorted(random.Random(k).sample(range(int(t)), budget)) for k, t in zip(keys, totals)]
    np.testing.assert_array_equal(sample_sorted(keys, totals, budget), np.array(want))


def test_sample_falls_back_when_a_key_runs_out_of_outputs():
    """With 20 outputs per key, 16 draws from 17..63 exhaust some keys (rejections): those go the slow way."""
    keys = [f"0/{i}/{i + 1}" for i in range(300)]
    totals = 17 + np.arange(300) % 47
    want = [sorted(random.Random(k).sample(range(int(t)), 16)) for k, t in zip(keys, totals)]
    np.testing.assert_array_equal(sample_sorted(keys, totals, 16, outputs=20), np.array(want))
    np.testing.assert_array_equal(sample_sorted(keys, totals, 16, outputs=16), np.array(want))


@pytest.mark.parametrize("fleet", ["24k", "ring", "mesh", "rail", "scale-up only"])
def test_table_compiles_to_the_graph_arrays(fleet):
    fleet = {"24k": fb.meta_24k(), "ring": _ring(),
             "mesh": fb.Fleet(sites=(fb.Site("m", scale_out=fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=4),
                                             scale_up=fb.ScaleUp(size=4, topology="full_mesh")),)),
             "rail": fb.Fleet(sites=(fb.Site("r", scale_out=fb.Clos(tiers=2, gpus_per_leaf=4, leaves_per_pod=8,
                                                                    rail_optimized=True), scale_up=SU),)),
             "scale-up only": fb.Fleet(sites=(fb.Site("u", scale_up=SU),))}[fleet]
    (n1, i1), (n2, i2) = fb.compile_fabric(fb.build(fleet)), fb.compile_table(fb.build_table(fleet))
    np.testing.assert_array_equal(n1.capacity, n2.capacity)
    np.testing.assert_array_equal(n1.latency, n2.latency)
    assert i1.nodes == i2.nodes and i1.node_index == i2.node_index
    for field in ("node_kind", "node_site", "src", "dst", "tier", "direction", "site", "length_km", "gpus",
                  "gpu_domain"):
        a, b = getattr(i1, field), getattr(i2, field)
        assert a.dtype == b.dtype, field
        np.testing.assert_array_equal(a, b, err_msg=field)
    assert list(i1.groups) == list(i2.groups)
    for name, g in i1.groups.items():
        h = i2.groups[name]
        assert (g.kind, g.value, g.unit) == (h.kind, h.value, h.unit)
        np.testing.assert_array_equal(g.links, h.links)
        np.testing.assert_array_equal(g.coef, h.coef)


def test_compile_table_names_a_bad_link_and_value():
    table = fb.build_table(_ring())
    table.links["capacity"][5] = -1.0
    with pytest.raises(ValueError, match=r"link r0/nvswitch0->r0/gpu2: capacity must be > 0.*got -1\.0"):
        fb.compile_table(table)
    table = fb.build_table(_ring())
    table.links["latency"][0] = float("nan")
    with pytest.raises(ValueError, match=r"link r0/gpu0->r0/nvswitch0: latency must be >= 0.*got nan"):
        fb.compile_table(table)


def test_router_bad_input_names_the_field_and_value():
    net, info = fb.compile_fabric(fb.build(_ring()))
    with pytest.raises(ValueError, match=r"routing\.max_paths.*got 0"):
        rt.Router(info, max_paths=0)
    with pytest.raises(ValueError, match=r"routing\.site_paths.*got 1\.5"):
        rt.Router(info, site_paths=1.5)
    with pytest.raises(ValueError, match=rf"dst.*{info.num_gpus}"):
        rt.Router(info).candidates([0], [info.num_gpus])
    with pytest.raises(ValueError, match="unreachable: must be 'raise' or 'report', got 'skip'"):
        rt.Router(info).candidates([0], [9], unreachable="skip")


def test_model_graph_is_built_on_first_use_and_equals_build():
    job = tr.Training(tr.Model("m", layers=2, hidden=512, ffn_hidden=2048, heads=8, kv_heads=8, vocab=1000,
                               seq_len=512), tr.Parallelism(tp=8, dp=4), global_batch=4)
    fleet = fb.Fleet(sites=(fb.Site("a", scale_out=fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=4), scale_up=SU),))
    model = sc.prepare(sc.Scenario("g", fleet, training=(job,)))
    g = model.graph
    assert model.graph is g and list(g.edges(data=True)) == list(fb.build(fleet).edges(data=True))


def test_program_equals_jit_and_retraces_per_signature():
    big = np.arange(1000.0)
    idx = np.arange(1000) % 7

    def f(x, y=None):
        out = jax.ops.segment_sum(big * x, idx, num_segments=7)
        return {"s": out, "t": out.sum() if y is None else out.sum() + y}

    p = Program(f)
    for args in ((2.0,), (3.0,), (2.0, 1.0), (np.ones(1000),)):
        got, want = p(*args), jax.jit(f)(*args)
        np.testing.assert_array_equal(got["s"], want["s"])
        np.testing.assert_array_equal(got["t"], want["t"])
    assert len(p._compiled) == 3  # scalar, scalar + scalar, vector


def test_stack_joins_segments_of_mixed_lengths_row_by_row():
    from flowmodel.routing._paths import _stack

    up = np.array([[1, -1], [2, 3], [4, -1]])
    down = np.array([[5, 6], [7, -1], [8, 9]])
    pair, links, lengths, eq, first = _stack([(np.array([0, 0, 1]), [(up, np.array([1, 2, 1])),
                                                                     (down, np.array([2, 1, 2]))],
                                               np.ones(3, bool))], 2)
    np.testing.assert_array_equal(links, [[1, 5, 6], [2, 3, 7], [4, 8, 9]])
    np.testing.assert_array_equal(lengths, [3, 3, 3])
    np.testing.assert_array_equal(first, [0, 2])
