"""Benchmark fixture: a k-ary fat-tree (three-tier folded Clos) with closed-form link numbering, and
random distinct host pairs; the instances the kernels are checked and timed on against the peers.

Links are directed and numbered in six blocks of ``H = k**3 / 4`` links each, so a route can be
computed with integer arithmetic for 100K flows at once instead of a graph search per flow:

    0 host->edge   1 edge->host   2 edge->agg   3 agg->edge   4 agg->core   5 core->agg
"""

from __future__ import annotations

import dataclasses

import networkx as nx
import numpy as np

from .._checks import check_endpoints

TIERS = ("host_up", "host_down", "edge_up", "agg_down", "agg_up", "core_down")


@dataclasses.dataclass(frozen=True)
class FatTree:
    """A k-ary fat-tree: ``k**3/4`` hosts, ``6 * k**3/4`` directed links.

    Attributes:
      k: switch radix (even, >= 2).
      capacity: float64[L] bytes/s per directed link, in block order (see module docstring).
      latency: float64[L] seconds per directed link.
    """

    k: int
    capacity: np.ndarray
    latency: np.ndarray

    @property
    def num_hosts(self) -> int:
        return self.k**3 // 4

    @property
    def num_links(self) -> int:
        return 6 * self.num_hosts

    def tier_of_link(self) -> np.ndarray:
        """int[L]: index into ``TIERS`` for every link."""
        return np.repeat(np.arange(6), self.num_hosts)

    def route(self, src, dst, rng: np.random.Generator) -> np.ndarray:
        """One up-down shortest path per (src, dst) host pair, chosen uniformly (random ECMP).

        Returns int32[F, 6] link indices, padded with -1 (2, 4 or 6 hops).
        """
        k, H = self.k, self.num_hosts
        half = k // 2
        src, dst = check_endpoints(src, dst, H, "host")

        es, ed = src // half, dst // half  # edge switch of each host
        ps, pd = src // (half * half), dst // (half * half)  # pod of each host
        j = rng.integers(0, half, size=src.shape)  # aggregation switch within the pod
        m = rng.integers(0, half, size=src.shape)  # core switch within the aggregation plane
        a_s, a_d = ps * half + j, pd * half + j
        up, down = src, H + dst
        e2a = 2 * H + es * half + j
        a2e = 3 * H + a_d * half + ed % half
        a2c = 4 * H + a_s * half + m
        c2a = 5 * H + (j * half + m) * k + pd

        routes = np.full((src.size, 6), -1, dtype=np.int64)
        local = es == ed
        pod = (ps == pd) & ~local
        far = ps != pd
        routes[local, :2] = np.stack([up, down], 1)[local]
        routes[pod, :4] = np.stack([up, e2a, a2e, down], 1)[pod]
        routes[far] = np.stack([up, e2a, a2c, c2a, a2e, down], 1)[far]
        return routes.astype(np.int32)

    def to_networkx(self) -> nx.DiGraph:
        """The fabric as a DiGraph; each edge carries ``link`` (index), ``capacity``, ``latency``, ``tier``."""
        k, H = self.k, self.num_hosts
        half = k // 2
        g = nx.DiGraph()
        tier = self.tier_of_link()
        for link in range(self.num_links):
            u, v = _link_endpoints(link, k, H, half)
            g.add_edge(u, v, link=link, capacity=float(self.capacity[link]),
                       latency=float(self.latency[link]), tier=TIERS[tier[link]])
        return g


def _link_endpoints(link: int, k: int, H: int, half: int) -> tuple[str, str]:
    block, i = divmod(link, H)
    if block == 0:
        return f"host{i}", f"edge{i // half}"
    if block == 1:
        return f"edge{i // half}", f"host{i}"
    sw, j = divmod(i, half)  # blocks 2-4: switch index and its port
    if block == 2:
        return f"edge{sw}", f"agg{(sw // half) * half + j}"
    if block == 3:
        return f"agg{sw}", f"edge{(sw // half) * half + j}"
    if block == 4:
        return f"agg{sw}", f"core{(sw % half) * half + j}"
    core, pod = divmod(i, k)
    return f"core{core}", f"agg{pod * half + core // half}"


def fat_tree(k: int, *, capacity: float | tuple[float, ...] = 50e9, latency: float = 0.0,
             heterogeneity: float = 0.0, seed: int = 0) -> FatTree:
    """Build a k-ary fat-tree.

    Args:
      k: even switch radix >= 2.
      capacity: bytes/s for every link, or six values, one per tier in ``TIERS`` order.
      latency: seconds per link.
      heterogeneity: each link's capacity is scaled by a factor drawn uniformly from
        ``[1 - heterogeneity, 1 + heterogeneity]`` (0 = homogeneous); must be in [0, 1).
      seed: seed for the heterogeneity draw.
    """
    if not isinstance(k, (int, np.integer)) or k < 2 or k % 2:
        raise ValueError(f"k must be an even integer >= 2, got {k!r}")
    if not 0.0 <= heterogeneity < 1.0:
        raise ValueError(f"heterogeneity must be in [0, 1), got {heterogeneity}")
    per_tier = np.broadcast_to(np.asarray(capacity, dtype=np.float64), (6,))
    bad = np.flatnonzero(~(per_tier > 0))
    if bad.size:
        raise ValueError(f"capacity[{TIERS[bad[0]]}] must be > 0 bytes/s, got {per_tier[bad[0]]}")
    if not latency >= 0:
        raise ValueError(f"latency must be >= 0 s, got {latency}")
    H = k**3 // 4
    cap = np.repeat(per_tier, H)
    if heterogeneity:
        cap = cap * np.random.default_rng(seed).uniform(1 - heterogeneity, 1 + heterogeneity, cap.size)
    return FatTree(k=int(k), capacity=cap, latency=np.full(6 * H, float(latency)))


def random_pairs(num_hosts: int, num_flows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``num_flows`` distinct ordered host pairs (src != dst), uniformly at random."""
    total = num_hosts * (num_hosts - 1)
    if not 0 < num_flows <= total:
        raise ValueError(f"num_flows must be in 1..{total} for {num_hosts} hosts, got {num_flows}")
    code = rng.choice(total, size=num_flows, replace=False)
    src, off = np.divmod(code, num_hosts - 1)
    dst = off + (off >= src)
    return src, dst
