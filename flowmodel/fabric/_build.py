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

import dataclasses
import numbers

import networkx as nx
import numpy as np

from ._spec import Clos, Fleet, ScaleUp, Site
from ._tags import Kind, Tier

CAPACITY, OVERSUBSCRIPTION = "capacity", "oversubscription"
_LINK_ATTRS = ("capacity", "coef", "latency", "length_km", "tier", "direction", "site", "group")


@dataclasses.dataclass(frozen=True, eq=False)
class FabricTable:
    """The built fleet as arrays, in build order: what ``build`` turns into a graph, ``from_graph``
    reads back from one, and ``compile_table`` compiles (the one compiler: a graph goes through here).

    Nodes ``names[i]`` with ``kind``, ``site`` (str[N]), ``rank`` and ``domain`` (int64[N], -1 where
    the attribute is absent: rank for non-GPUs, domain for leaves and above); links ``src -> dst``
    (int64[L] node indices) with the attributes of ``_LINK_ATTRS`` (arrays of L); ``groups`` as in
    ``graph["groups"]``; ``num_gpus``.
    """

    names: list[str]
    kind: np.ndarray
    site: np.ndarray
    rank: np.ndarray
    domain: np.ndarray
    has_domain: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    links: dict[str, np.ndarray]
    groups: dict[str, dict]
    num_gpus: int

    @classmethod
    def from_graph(cls, g: nx.DiGraph) -> FabricTable:
        """The table of a graph (``build``'s, a failure scenario's, one a user made): nodes in ``g.nodes``
        order, links by their ``link`` attribute when every edge has one, otherwise in ``g.edges`` order.
        Absent attributes take the defaults a compiled fabric gives them (latency 0, tier ``link``,
        direction ``across``, no group); ``capacity`` is required and every number must be a number."""
        names = list(g.nodes)
        index = dict(zip(names, range(len(names))))
        nodes = [d for _, d in g.nodes(data=True)]
        edges = list(g.edges(data=True))
        order = [d.get("link") for _, _, d in edges]
        if edges and all(o is not None for o in order):
            edges = [edges[i] for i in np.argsort(np.asarray(order), kind="stable")]
        defaults = {"capacity": None, "coef": np.nan, "latency": 0.0, "length_km": 0.0, "tier": "link",
                    "direction": "across", "site": "", "group": ""}
        links = {key: np.array([d.get(key, defaults[key]) for _, _, d in edges]) for key in _LINK_ATTRS}
        for key, unit in (("capacity", "> 0 and finite bytes/s"), ("latency", ">= 0 and finite seconds")):
            if links[key].dtype.kind not in "fiu":  # a value of the wrong type is named here, its range on compiling
                for u, v, d in edges:
                    value = d.get(key, defaults[key])
                    if isinstance(value, bool) or not isinstance(value, numbers.Real):
                        raise ValueError(f"link {u}->{v}: {key} must be {unit}, got {value!r}")
        for key in ("capacity", "coef", "latency", "length_km"):
            links[key] = links[key].astype(np.float64)
        rank = np.array([d.get("rank", -1) for d in nodes], np.int64)
        kind = np.array([d.get("kind", "node") for d in nodes])
        gpu_ranks = rank[(kind == Kind.GPU) & (rank >= 0)]
        return cls(names=names, kind=kind, site=np.array([d.get("site", "") for d in nodes]), rank=rank,
                   domain=np.array([d.get("domain", -1) for d in nodes], np.int64),
                   has_domain=np.array(["domain" in d for d in nodes], bool),
                   src=np.array([index[u] for u, _, _ in edges], np.int64),
                   dst=np.array([index[v] for _, v, _ in edges], np.int64), links=links,
                   groups={k: dict(v) for k, v in g.graph.get("groups", {}).items()},
                   num_gpus=int(g.graph.get("num_gpus", 1 + (gpu_ranks.max() if gpu_ranks.size else -1))))

    def to_graph(self) -> nx.DiGraph:
        g = nx.DiGraph(groups={k: dict(v) for k, v in self.groups.items()}, num_gpus=self.num_gpus)
        kind, site, rank, domain = (x.tolist() for x in (self.kind, self.site, self.rank, self.domain))
        has_domain = self.has_domain.tolist()
        nodes = []
        for i, name in enumerate(self.names):
            attrs = {"kind": kind[i], "site": site[i]}
            if rank[i] >= 0:
                attrs["rank"] = rank[i]
            if has_domain[i]:
                attrs["domain"] = domain[i]
            nodes.append((name, attrs))
        g.add_nodes_from(nodes)
        columns = [self.links[k].tolist() for k in _LINK_ATTRS]
        names = self.names
        g.add_edges_from((names[u], names[v], dict(zip(_LINK_ATTRS, values), link=i))
                         for i, (u, v, *values) in enumerate(zip(self.src.tolist(), self.dst.tolist(), *columns)))
        return g


class GraphBuilder:
    """Adds nodes and links to a graph one at a time (the ASTRA-sim importer's builder)."""

    def __init__(self):
        self.g = nx.DiGraph(groups={})
        self.count = 0

    def group(self, name: str, kind: str, value: float, efficiency: float = 1.0) -> str:
        self.g.graph["groups"][name] = {"kind": kind, "value": float(value), "efficiency": float(efficiency),
                                        "unit": "bytes/s" if kind == CAPACITY else "ratio"}
        return name

    def link(self, u, v, *, direction, **attrs):
        self.g.add_edge(u, v, link=self.count, direction=direction, **attrs)
        self.count += 1

    def cable(self, lower, upper, *, capacity, coef, **attrs):
        """Two directed links, lower -> upper first."""
        self.link(lower, upper, direction="up", capacity=capacity, coef=coef, **attrs)
        self.link(upper, lower, direction="down", capacity=capacity, coef=coef, **attrs)


class Builder:
    """Collects nodes and links block by block (a block: many links with the same attributes)."""

    def __init__(self):
        self.names: list[str] = []
        self.node_cols: dict[str, list] = {"kind": [], "site": [], "rank": [], "domain": [], "has_domain": []}
        self.index: dict[str, int] = {}
        self.blocks: list[tuple[np.ndarray, np.ndarray, dict]] = []
        self.groups: dict[str, dict] = {}

    def group(self, name: str, kind: str, value: float, efficiency: float = 1.0) -> str:
        self.groups[name] = {"kind": kind, "value": float(value), "efficiency": float(efficiency),
                             "unit": "bytes/s" if kind == CAPACITY else "ratio"}
        return name

    def nodes(self, names: list[str], kind: str, site: str, *, rank=None, domain=None) -> np.ndarray:
        """Adds the nodes; returns their indices."""
        first = len(self.names)
        self.names.extend(names)
        n = len(names)
        self.index.update(zip(names, range(first, first + n)))
        cols = self.node_cols
        cols["kind"].extend([kind] * n)
        cols["site"].extend([site] * n)
        cols["rank"].extend([-1] * n if rank is None else list(rank))
        cols["domain"].extend([-1] * n if domain is None else list(domain))
        cols["has_domain"].extend([domain is not None] * n)
        return np.arange(first, first + n)

    def links(self, u, v, *, direction, **attrs):
        """Links u[i] -> v[i] (node indices), in order."""
        u, v = np.asarray(u, np.int64).reshape(-1), np.asarray(v, np.int64).reshape(-1)
        self.blocks.append((u, v, dict(attrs, direction=direction)))

    def cables(self, lower, upper, *, capacity, coef, **attrs):
        """Two directed links per cable, lower -> upper first (cable by cable)."""
        lower, upper = np.asarray(lower, np.int64).reshape(-1), np.asarray(upper, np.int64).reshape(-1)
        self.links(np.stack([lower, upper], 1), np.stack([upper, lower], 1),
                   direction=np.tile(np.array(["up", "down"]), lower.size), capacity=capacity, coef=coef, **attrs)

    def table(self, num_gpus: int) -> FabricTable:
        src = np.concatenate([b[0] for b in self.blocks]) if self.blocks else np.zeros(0, np.int64)
        dst = np.concatenate([b[1] for b in self.blocks]) if self.blocks else np.zeros(0, np.int64)
        links = {}
        for key in _LINK_ATTRS:
            parts = [np.broadcast_to(np.asarray(b[2][key]), b[0].shape) for b in self.blocks]
            links[key] = np.concatenate(parts) if parts else np.zeros(0)
        links["capacity"], links["coef"] = links["capacity"].astype(np.float64), links["coef"].astype(np.float64)
        links["latency"] = links["latency"].astype(np.float64)
        links["length_km"] = links["length_km"].astype(np.float64)
        c = self.node_cols
        return FabricTable(names=self.names, kind=np.array(c["kind"]), site=np.array(c["site"]),
                           rank=np.array(c["rank"], np.int64), domain=np.array(c["domain"], np.int64),
                           has_domain=np.array(c["has_domain"], bool), src=src, dst=dst, links=links,
                           groups=self.groups, num_gpus=num_gpus)


def _add_scale_up(b: Builder, site: Site, su: ScaleUp, first_domain: int, gpus: np.ndarray) -> None:
    name = site.name
    group = b.group(f"{name}/scale_up", CAPACITY, su.bandwidth, su.efficiency)
    common = dict(tier=Tier.SCALE_UP, site=name, group=group, length_km=0.0)
    domains = site.num_gpus // su.size
    if su.topology == "switch":
        switches = b.nodes([f"{name}/nvswitch{d}" for d in range(domains)], Kind.SCALE_UP_SWITCH, name,
                           domain=range(first_domain, first_domain + domains))
        members = np.arange(domains * su.size)
        b.cables(gpus[members], switches[members // su.size], capacity=su.bandwidth * su.efficiency,
                 coef=su.efficiency, latency=su.latency / 2, **common)
    elif su.size > 1:
        share = su.efficiency / (su.size - 1)
        a, c = np.nonzero(~np.eye(su.size, dtype=bool))  # every ordered pair of a domain, a-major
        base = (np.arange(domains) * su.size)[:, None]
        b.links(gpus[base + a], gpus[base + c], direction="across", capacity=su.bandwidth * share, coef=share,
                latency=su.latency, **common)


def _leaf_of_gpu(i, clos: Clos, domain_size: int):
    if not clos.rail_optimized:
        return i // clos.gpus_per_leaf
    server, rail = np.divmod(i, domain_size)
    return (server // clos.gpus_per_leaf) * domain_size + rail


def _add_scale_out(b: Builder, site: Site, clos: Clos, gpus: np.ndarray) -> np.ndarray:
    """Adds the Clos of ``site``; returns its top-tier switches (where the border attaches)."""
    name, nic = site.name, clos.nic_bandwidth
    S, A, P, Lp = clos.spines_per_pod, clos.aggs_per_plane, clos.pods, clos.leaves_per_pod
    common = dict(site=name, latency=clos.latency, length_km=0.0)
    domain_size = site.scale_up.size if site.scale_up is not None else 1

    leaf = b.nodes([f"{name}/leaf{i}" for i in range(Lp * P)], Kind.LEAF, name)
    spine = b.nodes([f"{name}/spine{i}" for i in range(S * P)], Kind.SPINE, name)  # spine j of pod p is p * S + j

    g_nic = b.group(f"{name}/nic", CAPACITY, nic, clos.nic_efficiency)
    i = np.arange(clos.num_gpus)
    b.cables(gpus[i], leaf[_leaf_of_gpu(i, clos, domain_size)], capacity=nic * clos.nic_efficiency,
             coef=clos.nic_efficiency, tier=Tier.NIC, group=g_nic, **common)

    r0 = clos.oversubscription[0]
    leaf_spine_coef = clos.gpus_per_leaf * nic / S
    g_leaf = b.group(f"{name}/leaf_up", OVERSUBSCRIPTION, r0)
    i, j = np.divmod(np.arange(Lp * P * S), S)  # leaf i, spine j of its pod
    b.cables(leaf[i], spine[(i // Lp) * S + j], capacity=leaf_spine_coef / r0, coef=leaf_spine_coef,
             tier=Tier.LEAF_SPINE, group=g_leaf, **common)
    spine_down = Lp * leaf_spine_coef / r0
    if clos.tiers == 2:
        return spine

    r1 = clos.oversubscription[1]
    # aggregation a of plane j is node j * A + a
    agg = b.nodes([f"{name}/aggregation{i}" for i in range(S * A)], Kind.AGGREGATION, name)
    g_spine = b.group(f"{name}/spine_up", OVERSUBSCRIPTION, r1)
    spine_agg_coef = spine_down / A
    pod, j, a = np.unravel_index(np.arange(P * S * A), (P, S, A))
    b.cables(spine[pod * S + j], agg[j * A + a], capacity=spine_agg_coef / r1, coef=spine_agg_coef,
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
    return build_table(fleet).to_graph()


def build_table(fleet: Fleet) -> FabricTable:
    """The fleet as arrays, in the order and with the attributes ``build`` gives its graph."""
    b = Builder()
    rank = domain = 0
    multi_site = len(fleet.sites) > 1
    border = {}
    for site in fleet.sites:
        if multi_site and site.scale_out is None:
            raise ValueError(f"sites[{site.name}].scale_out: a site joined by long-haul links needs a "
                             "scale-out fabric to reach its border")
        su = site.scale_up
        i = np.arange(site.num_gpus)
        gpus = b.nodes([f"{site.name}/gpu{k}" for k in range(site.num_gpus)], Kind.GPU, site.name,
                       rank=(rank + i).tolist(),
                       domain=(domain + i // su.size if su is not None else i * 0 - 1).tolist())
        if su is not None:
            _add_scale_up(b, site, su, domain, gpus)
            domain += site.num_gpus // su.size
        rank += site.num_gpus
        if site.scale_out is None:
            continue
        top = _add_scale_out(b, site, site.scale_out, gpus)
        if multi_site:
            border[site.name] = b.nodes([f"{site.name}/border"], Kind.BORDER, site.name)[0]
            ratio = site.border_oversubscription
            coef = _top_down_capacity(site.scale_out)
            group = b.group(f"{site.name}/border_up", OVERSUBSCRIPTION, ratio)
            b.cables(top, np.full(top.size, border[site.name]), capacity=coef / ratio, coef=coef, tier=Tier.BORDER,
                     group=group, site=site.name, latency=site.scale_out.latency, length_km=0.0)
    for lh in fleet.long_haul:
        group = b.group(f"long_haul/{lh.name}", CAPACITY, lh.capacity)
        b.links([border[lh.a], border[lh.b]], [border[lh.b], border[lh.a]], direction="across", capacity=lh.capacity,
                coef=1.0, latency=lh.latency, length_km=lh.length_km, tier=Tier.LONG_HAUL, site=lh.name, group=group)
    return b.table(fleet.num_gpus)
