"""Failures: remove or degrade cables, switches and sites of a built fabric graph.

Failures act on the graph, before compilation, so compiling and routing the result re-routes
traffic around them (routing reports pairs left without a path). Links keep their ``link`` build
numbers, so the surviving links keep their relative order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import networkx as nx

from ._tags import Kind


def _cable_links(g: nx.DiGraph, cable) -> list[tuple[str, str]]:
    """The directed links of ``cable``: a ``(u, v)`` pair (both directions) or a link group name."""
    if isinstance(cable, str):
        found = [(u, v) for u, v, d in g.edges(data=True) if d.get("group") == cable]
        if not found:
            raise ValueError(f"failures: no link belongs to group {cable!r}")
        return found
    u, v = cable
    found = [(a, b) for a, b in ((u, v), (v, u)) if g.has_edge(a, b)]
    if not found:
        raise ValueError(f"failures: there is no link between {u!r} and {v!r}")
    return found


def fail(g: nx.DiGraph, *, cables: Iterable = (), switches: Iterable[str] = (), sites: Iterable[str] = (),
         degrade: Mapping | None = None) -> nx.DiGraph:
    """A copy of ``g`` with failures applied.

    Args:
      cables: ``(u, v)`` node pairs (both directions fail) or link group names (e.g.
        ``"long_haul/a-b"``: every link of the group fails).
      switches: node names; the node and all its links are removed.
      sites: site names; every node of the site is removed (with its long-haul links).
      degrade: ``{cable: fraction}`` with fraction in (0, 1]: the cable keeps that fraction of its
        capacity (lost optics in a bundle). Cables as in ``cables``.
    """
    out = g.copy()
    for cable in cables:
        out.remove_edges_from(_cable_links(out, cable))
    for node in switches:
        if node not in out:
            raise ValueError(f"failures.switches: unknown node {node!r}")
        if out.nodes[node].get("kind") == Kind.GPU:
            raise ValueError(f"failures.switches: {node!r} is a GPU, not a switch")
        out.remove_node(node)
    known_sites = {d.get("site") for _, d in g.nodes(data=True)}
    for site in sites:
        if site not in known_sites:
            raise ValueError(f"failures.sites: unknown site {site!r}; known: {sorted(s for s in known_sites if s)}")
        out.remove_nodes_from([n for n, d in g.nodes(data=True) if d.get("site") == site])
    for cable, fraction in (degrade or {}).items():
        if not (isinstance(fraction, (int, float)) and 0 < fraction <= 1):
            raise ValueError(f"failures.degrade[{cable}]: fraction must be in (0, 1], got {fraction!r}")
        for u, v in _cable_links(out, cable):
            d = out.edges[u, v]
            d["capacity"] = d["capacity"] * fraction
            if "coef" in d:
                d["coef"] = d["coef"] * fraction
    return out
