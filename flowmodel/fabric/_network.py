"""Compile a fabric graph to arrays: a differentiable ``Network`` and the metadata beside it.

``Network`` holds what kernels and gradients need (capacity, latency) as leaves. ``FabricInfo`` holds
names, the node map, per-link tags and the link groups, as plain numpy/Python: nothing in it is
differentiated, and routing reads it to number routes consistently with ``Network``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping

import equinox as eqx
import jax.numpy as jnp
import networkx as nx
import numpy as np

from .. import _units
from .._checks import is_traced
from .._types import Array, Float
from ._build import CAPACITY, FabricTable
from ._tags import Kind


class Network(eqx.Module):
    """Link arrays of a compiled fabric (SI units); both are differentiable leaves."""

    capacity: Float[Array, "L"]
    latency: Float[Array, "L"]

    @property
    def num_links(self) -> int:
        return self.capacity.shape[0]


@dataclasses.dataclass(frozen=True, eq=False)
class LinkGroup:
    """Links whose capacities follow one tunable parameter.

    ``capacity[links] = coef * value`` for a capacity group (unit bytes/s) and ``coef / value`` for an
    oversubscription group (unit ratio, downlink : uplink). ``value`` is the value the fabric was
    built with; each group's coefficients hold every other parameter at its build value.
    """

    name: str
    kind: str
    value: float
    unit: str
    links: np.ndarray
    coef: np.ndarray

    def capacity(self, value):
        return self.coef * value if self.kind == CAPACITY else self.coef / value


@dataclasses.dataclass(frozen=True, eq=False)
class FabricInfo:
    """Names and tags of a compiled fabric; link ``i`` runs from ``nodes[src[i]]`` to ``nodes[dst[i]]``."""

    nodes: tuple[str, ...]
    node_index: dict[str, int]
    node_kind: np.ndarray  # str[N]
    node_site: np.ndarray  # str[N]
    src: np.ndarray  # int32[L]
    dst: np.ndarray  # int32[L]
    tier: np.ndarray  # str[L]
    direction: np.ndarray  # str[L]: up, down, across
    site: np.ndarray  # str[L]
    length_km: np.ndarray  # float64[L]
    groups: dict[str, LinkGroup]
    gpus: np.ndarray  # int64[G]: node index of each rank, -1 where the GPU failed
    gpu_domain: np.ndarray  # int64[G]: scale-up domain of each rank, -1 without one

    @property
    def num_links(self) -> int:
        return self.src.shape[0]

    @property
    def num_gpus(self) -> int:
        return self.gpus.shape[0]

    def site_of(self, node: int) -> str:
        return str(self.node_site[node])

    def link_name(self, link: int) -> str:
        return f"{self.nodes[self.src[link]]}->{self.nodes[self.dst[link]]}"

    def links_where(self, *, tier: str | None = None, direction: str | None = None,
                    site: str | None = None) -> np.ndarray:
        """int64 indices of the links with every given tag."""
        mask = np.ones(self.num_links, bool)
        for name, want in (("tier", tier), ("direction", direction), ("site", site)):
            if want is not None:
                have = getattr(self, name)
                if want not in set(have.tolist()):
                    raise ValueError(f"{name}: no link is tagged {want!r}; known: {sorted(set(have.tolist()))}")
                mask &= have == want
        return np.flatnonzero(mask)

    def group_values(self) -> dict[str, float]:
        """Each group's build value."""
        return {name: g.value for name, g in self.groups.items()}


def _edge_number(g: nx.DiGraph):
    order = [d.get("link") for _, _, d in g.edges(data=True)]
    if all(o is not None for o in order):
        return np.argsort(np.asarray(order), kind="stable")
    return np.arange(len(order))


def compile_fabric(g: nx.DiGraph, *, dtype=None) -> tuple[Network, FabricInfo]:
    """Number the graph's nodes and links and gather their attributes into arrays.

    Links are numbered by their ``link`` attribute (build order) when every edge has one, otherwise
    in ``g.edges`` order; nodes in ``g.nodes`` order. Deterministic for a given graph.
    Every edge needs ``capacity`` (> 0, bytes/s); ``latency`` (s) defaults to 0.
    """
    if g.number_of_edges() == 0:
        raise ValueError("fabric: the graph has no links")
    nodes = tuple(g.nodes)
    node_index = {n: i for i, n in enumerate(nodes)}
    edges = list(g.edges(data=True))
    edges = [edges[i] for i in _edge_number(g)]
    L = len(edges)
    capacity = np.empty(L)
    latency = np.empty(L)
    for i, (u, v, d) in enumerate(edges):
        c, lat = d.get("capacity"), d.get("latency", 0.0)
        if not (isinstance(c, (int, float)) and math.isfinite(c) and c > 0):
            raise ValueError(f"link {u}->{v}: capacity must be > 0 and finite bytes/s, got {c!r}")
        if not (isinstance(lat, (int, float)) and math.isfinite(lat) and lat >= 0):
            raise ValueError(f"link {u}->{v}: latency must be >= 0 and finite seconds, got {lat!r}")
        capacity[i], latency[i] = c, lat

    def tag(key, default):
        return np.array([d.get(key, default) for _, _, d in edges])

    groups = {}
    members: dict[str, list[int]] = {}
    for i, (_, _, d) in enumerate(edges):
        if "group" in d:
            members.setdefault(d["group"], []).append(i)
    for name, spec in g.graph.get("groups", {}).items():
        links = np.asarray(members.get(name, []), dtype=np.int64)
        if links.size == 0:
            continue  # every link of the group failed
        coef = np.array([edges[i][2]["coef"] for i in links])
        groups[name] = LinkGroup(name=name, kind=spec["kind"], value=spec["value"], unit=spec["unit"],
                                 links=links, coef=coef)

    gpu_nodes = [(d["rank"], n, d.get("domain", -1)) for n, d in g.nodes(data=True) if d.get("kind") == Kind.GPU]
    num_gpus = g.graph.get("num_gpus", 1 + max((r for r, _, _ in gpu_nodes), default=-1))
    gpus = np.full(num_gpus, -1, dtype=np.int64)  # -1: the GPU failed with its site
    gpu_domain = np.full(num_gpus, -1, dtype=np.int64)
    for r, n, dom in gpu_nodes:
        if not 0 <= r < num_gpus or gpus[r] >= 0:
            raise ValueError(f"node {n}: rank {r} is out of range 0..{num_gpus - 1} or used twice")
        gpus[r], gpu_domain[r] = node_index[n], dom
    info = FabricInfo(
        nodes=nodes, node_index=node_index,
        node_kind=np.array([d.get("kind", "node") for _, d in g.nodes(data=True)]),
        node_site=np.array([d.get("site", "") for _, d in g.nodes(data=True)]),
        src=np.array([node_index[u] for u, _, _ in edges], dtype=np.int32),
        dst=np.array([node_index[v] for _, v, _ in edges], dtype=np.int32),
        tier=tag("tier", "link"), direction=tag("direction", "across"), site=tag("site", ""),
        length_km=tag("length_km", 0.0).astype(np.float64), groups=groups,
        gpus=gpus, gpu_domain=gpu_domain,
    )
    dtype = dtype or jnp.result_type(float)
    return Network(capacity=jnp.asarray(capacity, dtype), latency=jnp.asarray(latency, dtype)), info


def compile_table(table: FabricTable, *, dtype=None) -> tuple[Network, FabricInfo]:
    """``compile_fabric(table.to_graph())`` without the graph: the same arrays, read from the table."""
    L = table.src.size
    if L == 0:
        raise ValueError("fabric: the graph has no links")
    names, links = table.names, table.links
    capacity, latency = links["capacity"], links["latency"]
    for bad, what in ((~(np.isfinite(capacity) & (capacity > 0)), "capacity must be > 0 and finite bytes/s"),
                      (~(np.isfinite(latency) & (latency >= 0)), "latency must be >= 0 and finite seconds")):
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            value = float((capacity if what.startswith("capacity") else latency)[i])
            raise ValueError(f"link {names[table.src[i]]}->{names[table.dst[i]]}: {what}, got {value!r}")
    groups = {}
    order = np.argsort(links["group"], kind="stable")
    names_sorted = links["group"][order]
    for name, spec in table.groups.items():
        lo, hi = np.searchsorted(names_sorted, name), np.searchsorted(names_sorted, name, side="right")
        members = order[lo:hi].astype(np.int64)  # ascending: a stable sort keeps link order
        if members.size == 0:
            continue  # the group has no links
        groups[name] = LinkGroup(name=name, kind=spec["kind"], value=spec["value"], unit=spec["unit"],
                                 links=members, coef=links["coef"][members])
    is_gpu = (table.kind == Kind.GPU) & (table.rank >= 0)
    nodes, ranks = np.flatnonzero(is_gpu), table.rank[is_gpu]
    num_gpus = table.num_gpus
    if ranks.size and (ranks.max() >= num_gpus or np.unique(ranks).size != ranks.size):
        raise ValueError(f"fabric: GPU ranks must be distinct and in 0..{num_gpus - 1}")
    gpus = np.full(num_gpus, -1, dtype=np.int64)
    gpu_domain = np.full(num_gpus, -1, dtype=np.int64)
    gpus[ranks], gpu_domain[ranks] = nodes, table.domain[is_gpu]
    info = FabricInfo(
        nodes=tuple(names), node_index=dict(zip(names, range(len(names)))), node_kind=table.kind,
        node_site=table.site, src=table.src.astype(np.int32), dst=table.dst.astype(np.int32),
        tier=links["tier"], direction=links["direction"], site=links["site"], length_km=links["length_km"],
        groups=groups, gpus=gpus, gpu_domain=gpu_domain,
    )
    dtype = dtype or jnp.result_type(float)
    return Network(capacity=jnp.asarray(capacity, dtype), latency=jnp.asarray(latency, dtype)), info


def to_networkx(network: Network, info: FabricInfo) -> nx.DiGraph:
    """The compiled fabric back as a graph (links carry ``link``, ``capacity``, ``latency`` and tags);
    ``compile_fabric`` of it gives the same arrays."""
    g = nx.DiGraph(groups={n: {"kind": gr.kind, "value": gr.value, "unit": gr.unit} for n, gr in info.groups.items()},
                   num_gpus=info.num_gpus)
    rank = {int(node): r for r, node in enumerate(info.gpus) if node >= 0}
    for i, name in enumerate(info.nodes):
        attrs = {"kind": str(info.node_kind[i]), "site": str(info.node_site[i])}
        if i in rank:
            attrs.update(rank=rank[i], domain=int(info.gpu_domain[rank[i]]))
        g.add_node(name, **attrs)
    group_of, coef_of = {}, {}
    for gr in info.groups.values():
        for link, c in zip(gr.links.tolist(), gr.coef.tolist()):
            group_of[link], coef_of[link] = gr.name, c
    capacity, latency = np.asarray(network.capacity), np.asarray(network.latency)
    for i in range(info.num_links):
        attrs = dict(link=i, capacity=float(capacity[i]), latency=float(latency[i]), tier=str(info.tier[i]),
                     direction=str(info.direction[i]), site=str(info.site[i]), length_km=float(info.length_km[i]))
        if i in group_of:
            attrs.update(group=group_of[i], coef=coef_of[i])
        g.add_edge(info.nodes[info.src[i]], info.nodes[info.dst[i]], **attrs)
    return g


def group_values(network: Network, info: FabricInfo, names=None) -> dict:
    """The current value of each named group (default: all), read back from ``network``'s capacities
    (differentiably): the inverse of ``apply_groups``."""
    out = {}
    for name in info.groups if names is None else names:
        g = info.groups[name]
        c = network.capacity[g.links[0]]
        out[name] = c / g.coef[0] if g.kind == CAPACITY else g.coef[0] / c
    return out


def apply_groups(network: Network, info: FabricInfo, params: Mapping[str, float | Array]) -> Network:
    """``network`` with the capacities of the named groups set from ``params`` (name -> value).

    Differentiable in the values. Groups not named keep their current capacities. A value may be a
    string in the group's unit, as in a config: ``"1.6Tbps"`` for a capacity group, ``"4"`` for a ratio.
    """
    capacity = network.capacity
    for name, value in params.items():
        if name not in info.groups:
            close = difflib.get_close_matches(name, info.groups, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {sorted(info.groups)[:8]}"
            raise ValueError(f"groups: unknown link group {name!r}{hint}")
        value = _units.coerce(value, "bandwidth" if info.groups[name].kind == CAPACITY else "ratio", f"groups[{name}]")
        if not is_traced(value):
            v = np.asarray(value)
            if v.shape != () or not (np.isfinite(v) and v > 0):
                raise ValueError(f"groups[{name}]: must be a scalar > 0 ({info.groups[name].unit}), got {value!r}")
        group = info.groups[name]
        capacity = capacity.at[group.links].set(group.capacity(jnp.asarray(value, capacity.dtype)))
    return eqx.tree_at(lambda n: n.capacity, network, capacity)

