"""Build a fleet description into a networkx ``DiGraph`` with typed node and link attributes.

Nodes: ``kind`` (gpu, scale_up_switch, leaf, spine, aggregation, border), ``site``; GPUs also carry
``rank`` (global, sites in order) and ``domain`` (global scale-up domain index).

Links (every cable is two directed links with the same capacity): ``capacity`` bytes/s, ``latency`` s,
``length_km``, ``tier`` (scale_up, nic, leaf_spine, spine_aggregation, border, long_haul),
``direction`` (up: towards the top of a site, down, across: long-haul), ``site`` (the site, or
``"a-b"`` for long-haul), ``group`` (the tunable parameter the link's capacity follows), ``coef``
(capacity = coef * value for capacity groups, coef / value for oversubscription groups) and ``link``
(build order; compilation numbers links by it, so removing links keeps the others' relative order).
The graph's ``graph["groups"]`` maps each group name to its kind, build value and unit.
"""

from __future__ import annotations

import networkx as nx

from ._spec import Clos, Fleet, ScaleUp, Site
from ._tags import Kind, Tier

CAPACITY, OVERSUBSCRIPTION = "capacity", "oversubscription"


class Builder:
    def __init__(self):
        self.g = nx.DiGraph(groups={})
        self.count = 0

    def group(self, name: str, kind: str, value: float) -> str:
        self.g.graph["groups"][name] = {"kind": kind, "value": float(value),
                                        "unit": "bytes/s" if kind == CAPACITY else "ratio"}
        return name

    def link(self, u, v, *, direction, **attrs):
        self.g.add_edge(u, v, link=self.count, direction=direction, **attrs)
        self.count += 1

    def cable(self, lower, upper, *, capacity, coef, **attrs):
        """Two directed links, lower -> upper first."""
        self.link(lower, upper, direction="up", capacity=capacity, coef=coef, **attrs)
        self.link(upper, lower, direction="down", capacity=capacity, coef=coef, **attrs)


def _add_scale_up(b: Builder, site: Site, su: ScaleUp, first_domain: int) -> None:
    name = site.name
    group = b.group(f"{name}/scale_up", CAPACITY, su.bandwidth)
    common = dict(tier=Tier.SCALE_UP, site=name, group=group, length_km=0.0)
    for d in range(site.num_gpus // su.size):
        gpus = [f"{name}/gpu{d * su.size + i}" for i in range(su.size)]
        if su.topology == "switch":
            switch = f"{name}/nvswitch{d}"
            b.g.add_node(switch, kind=Kind.SCALE_UP_SWITCH, site=name, domain=first_domain + d)
            for gpu in gpus:
                b.cable(gpu, switch, capacity=su.bandwidth, coef=1.0, latency=su.latency / 2, **common)
        elif su.size > 1:
            share = 1.0 / (su.size - 1)
            for a in gpus:
                for c in gpus:
                    if a != c:
                        b.link(a, c, direction="across", capacity=su.bandwidth * share, coef=share,
                               latency=su.latency, **common)


def _leaf_of_gpu(i: int, clos: Clos, domain_size: int) -> int:
    if not clos.rail_optimized:
        return i // clos.gpus_per_leaf
    server, rail = divmod(i, domain_size)
    return (server // clos.gpus_per_leaf) * domain_size + rail


def _add_scale_out(b: Builder, site: Site, clos: Clos) -> list[str]:
    """Adds the Clos of ``site``; returns its top-tier switches (where the border attaches)."""
    name, nic = site.name, clos.nic_bandwidth
    S, A, P, Lp = clos.spines_per_pod, clos.aggs_per_plane, clos.pods, clos.leaves_per_pod
    common = dict(site=name, latency=clos.latency, length_km=0.0)
    domain_size = site.scale_up.size if site.scale_up is not None else 1

    leaf = [f"{name}/leaf{i}" for i in range(Lp * P)]
    spine = [f"{name}/spine{i}" for i in range(S * P)]  # spine j of pod p is p * S + j
    for n in leaf:
        b.g.add_node(n, kind=Kind.LEAF, site=name)
    for n in spine:
        b.g.add_node(n, kind=Kind.SPINE, site=name)

    g_nic = b.group(f"{name}/nic", CAPACITY, nic)
    for i in range(clos.num_gpus):
        b.cable(f"{name}/gpu{i}", leaf[_leaf_of_gpu(i, clos, domain_size)], capacity=nic, coef=1.0,
                tier=Tier.NIC, group=g_nic, **common)

    r0 = clos.oversubscription[0]
    leaf_spine_coef = clos.gpus_per_leaf * nic / S
    g_leaf = b.group(f"{name}/leaf_up", OVERSUBSCRIPTION, r0)
    for i in range(Lp * P):
        pod = i // Lp
        for j in range(S):
            b.cable(leaf[i], spine[pod * S + j], capacity=leaf_spine_coef / r0, coef=leaf_spine_coef,
                    tier=Tier.LEAF_SPINE, group=g_leaf, **common)
    spine_down = Lp * leaf_spine_coef / r0
    if clos.tiers == 2:
        return spine

    r1 = clos.oversubscription[1]
    agg = [f"{name}/aggregation{i}" for i in range(S * A)]  # aggregation a of plane j is j * A + a
    for n in agg:
        b.g.add_node(n, kind=Kind.AGGREGATION, site=name)
    g_spine = b.group(f"{name}/spine_up", OVERSUBSCRIPTION, r1)
    spine_agg_coef = spine_down / A
    for pod in range(P):
        for j in range(S):
            for a in range(A):
                b.cable(spine[pod * S + j], agg[j * A + a], capacity=spine_agg_coef / r1, coef=spine_agg_coef,
                        tier=Tier.SPINE_AGGREGATION, group=g_spine, **common)
    return agg


def _top_down_capacity(clos: Clos) -> float:
    """Capacity from below into one top-tier switch of ``clos``."""
    leaf_spine = clos.gpus_per_leaf * clos.nic_bandwidth / clos.spines_per_pod / clos.oversubscription[0]
    spine_down = clos.leaves_per_pod * leaf_spine
    if clos.tiers == 2:
        return spine_down
    return clos.pods * spine_down / clos.aggs_per_plane / clos.oversubscription[1]


def build(fleet: Fleet) -> nx.DiGraph:
    """The fleet as a directed graph (see the module docstring for the attributes).

    Link order is the build order: sites in order (scale-up, NIC, leaf-spine, spine-aggregation,
    border links), then long-haul links in order; each cable's up (or a -> b) link comes first.
    """
    b = Builder()
    b.g.graph["num_gpus"] = fleet.num_gpus
    rank = domain = 0
    multi_site = len(fleet.sites) > 1
    for site in fleet.sites:
        if multi_site and site.scale_out is None:
            raise ValueError(f"sites[{site.name}].scale_out: a site joined by long-haul links needs a "
                             "scale-out fabric to reach its border")
        su = site.scale_up
        for i in range(site.num_gpus):
            b.g.add_node(f"{site.name}/gpu{i}", kind=Kind.GPU, site=site.name, rank=rank + i,
                         domain=domain + i // su.size if su is not None else -1)
        if su is not None:
            _add_scale_up(b, site, su, domain)
            domain += site.num_gpus // su.size
        rank += site.num_gpus
        if site.scale_out is None:
            continue
        top = _add_scale_out(b, site, site.scale_out)
        if multi_site:
            border = f"{site.name}/border"
            b.g.add_node(border, kind=Kind.BORDER, site=site.name)
            ratio = site.border_oversubscription
            coef = _top_down_capacity(site.scale_out)
            group = b.group(f"{site.name}/border_up", OVERSUBSCRIPTION, ratio)
            for t in top:
                b.cable(t, border, capacity=coef / ratio, coef=coef, tier=Tier.BORDER, group=group,
                        site=site.name, latency=site.scale_out.latency, length_km=0.0)
    for lh in fleet.long_haul:
        group = b.group(f"long_haul/{lh.name}", CAPACITY, lh.capacity)
        for u, v in ((lh.a, lh.b), (lh.b, lh.a)):
            b.link(f"{u}/border", f"{v}/border", direction="across", capacity=lh.capacity, coef=1.0,
                   latency=lh.latency, length_km=lh.length_km, tier=Tier.LONG_HAUL, site=lh.name, group=group)
    return b.g
