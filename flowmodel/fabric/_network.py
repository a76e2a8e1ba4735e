"""Compile a fabric graph to arrays: a differentiable ``Network`` and the metadata beside it.

``Network`` holds what kernels and gradients need (capacity, latency) as leaves. ``FabricInfo`` holds
names, the node map, per-link tags and the link groups, as plain numpy/Python: nothing in it is
differentiated, and routing reads it to number routes consistently with ``Network``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Mapping

import equinox as eqx
import jax.numpy as jnp
import networkx as nx
import numpy as np

from .. import _units
from .._checks import is_traced
from .._types import Array, Float
from ._build import CAPACITY, FabricTable
from ._tags import Kind, Tier


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
    ``efficiency``: the fraction of the physical figure its links carry (``ScaleUp.efficiency``,
    ``Clos.nic_efficiency``; already in ``coef``): what the links cost is ``coef / efficiency x value``,
    the hardware bought, not the share collectives reach.
    """

    name: str
    kind: str
    value: float
    unit: str
    links: np.ndarray
    coef: np.ndarray
    efficiency: float = 1.0

    def capacity(self, value):
        return self.coef * value if self.kind == CAPACITY else self.coef / value


def reverse_links(src, dst) -> np.ndarray:
    """int64[L]: for each link ``src[l] -> dst[l]`` the first link ``dst[l] -> src[l]``, else -1."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    if src.ndim != 1 or src.shape != dst.shape:
        raise ValueError(f"reverse_links: src and dst need one node per link each, got shapes {src.shape} and "
                         f"{dst.shape}")
    if src.size and min(src.min(), dst.min()) < 0:
        raise ValueError(f"reverse_links: node ids must be >= 0, got {min(src.min(), dst.min())}")
    if src.size == 0:
        return np.zeros(0, np.int64)
    n = int(max(src.max(), dst.max())) + 1
    key = src * n + dst
    order = np.argsort(key, kind="stable")  # the first link of equal ends comes first
    at = np.minimum(np.searchsorted(key[order], dst * n + src), key.size - 1)
    found = key[order][at] == dst * n + src
    return np.where(found, order[at], -1).astype(np.int64)


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

    @functools.cached_property
    def reverse(self) -> np.ndarray:
        """int64[L]: the link back from each link's end to its start (its ACKs' way), -1 where none."""
        return reverse_links(self.src, self.dst)

    @functools.cached_property
    def packet_links(self) -> np.ndarray:
        """bool[L]: the links a packet transport (a ``Transport`` profile) runs on: every tier but scale-up
        (an ASTRA-sim import's dimension 0, ``dim0``), whose links move data with credit-based flow control,
        not TCP."""
        return ~np.isin(self.tier, (Tier.SCALE_UP, Tier.ASTRA_SCALE_UP))

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


def compile_fabric(g: nx.DiGraph, *, dtype=None) -> tuple[Network, FabricInfo]:
    """``compile_table(FabricTable.from_graph(g))``: number the graph's nodes and links and gather
    their attributes into arrays.

    Links are numbered by their ``link`` attribute (build order) when every edge has one, otherwise
    in ``g.edges`` order; nodes in ``g.nodes`` order. Deterministic for a given graph.
    Every edge needs ``capacity`` (> 0, bytes/s); ``latency`` (s) defaults to 0.
    """
    return compile_table(FabricTable.from_graph(g), dtype=dtype)


def compile_table(table: FabricTable, *, dtype=None) -> tuple[Network, FabricInfo]:
    """The ``Network`` and ``FabricInfo`` of a fabric table, checked: every capacity > 0 and latency
    >= 0 (finite), GPU ranks distinct and below ``num_gpus``; groups without links are left out."""
    L = table.src.size
    if L == 0:
        raise ValueError("fabric: the graph has no links")
    names, links = table.names, table.links
    capacity, latency = links["capacity"], links["latency"]
    for key, bad, unit in (("capacity", ~(np.isfinite(capacity) & (capacity > 0)), "> 0 and finite bytes/s"),
                           ("latency", ~(np.isfinite(latency) & (latency >= 0)), ">= 0 and finite seconds")):
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"link {names[table.src[i]]}->{names[table.dst[i]]}: {key} must be {unit}, "
                             f"got {float(links[key][i])!r}")
    groups = {}
    order = np.argsort(links["group"], kind="stable")
    names_sorted = links["group"][order]
    for name, spec in table.groups.items():
        lo, hi = np.searchsorted(names_sorted, name), np.searchsorted(names_sorted, name, side="right")
        members = order[lo:hi].astype(np.int64)  # ascending: a stable sort keeps link order
        if members.size == 0:
            continue  # every link of the group failed
        groups[name] = LinkGroup(name=name, kind=spec["kind"], value=spec["value"], unit=spec["unit"],
                                 links=members, coef=links["coef"][members], efficiency=spec.get("efficiency", 1.0))
    is_gpu = (table.kind == Kind.GPU) & (table.rank >= 0)
    nodes, ranks = np.flatnonzero(is_gpu), table.rank[is_gpu]
    num_gpus = table.num_gpus
    first = np.zeros(ranks.size, bool)
    first[np.unique(ranks, return_index=True)[1]] = True
    bad = np.flatnonzero((ranks >= num_gpus) | ~first)
    if bad.size:
        raise ValueError(f"node {names[nodes[bad[0]]]}: rank {ranks[bad[0]]} is out of range 0..{num_gpus - 1} "
                         "or used twice")
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
    g = nx.DiGraph(groups={n: {"kind": gr.kind, "value": gr.value, "unit": gr.unit, "efficiency": gr.efficiency}
                           for n, gr in info.groups.items()}, num_gpus=info.num_gpus)
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

