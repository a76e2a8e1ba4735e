"""Candidate paths between GPUs of a compiled fabric.

Inside a scale-up domain a pair uses the scale-up links (and falls back to the scale-out fabric if
they failed). Inside a site, the candidates are all shortest up-down paths through the lowest common
ancestors of the two NICs' leaves (in a k-ary fat-tree, (k/2)**2 between pods). Between sites they
are up-down paths to the border routers joined by the k shortest site-level paths over the long-haul
links (both ways round a ring for k=2); a candidate is *equal-cost* when its site-level path is a
shortest one (by fibre length, hop count breaking ties), and every intra-site candidate is.

Per pair at most ``max_paths`` candidates are kept, a sample without replacement drawn by a generator
seeded with (seed, the two leaves), so the choice is deterministic; between sites the budget is shared
evenly by the site-level paths so that every one of them is represented. Candidates are computed
per leaf pair and cached: many GPU pairs share them.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import random

import networkx as nx
import numpy as np

from .._checks import check_endpoints
from ..fabric import FabricInfo, Kind, Tier

_HOP_KM = 1e-3  # site-level metric: fibre km, plus a metre per hop so that zero-length links tie-break by hops


@dataclasses.dataclass(frozen=True, eq=False)
class Candidates:
    """Candidate paths of F flows, grouped by flow.

    Attributes:
      src, dst: int64[F] GPU ranks of each flow.
      links: int32[P, H] link indices, -1 padded.
      flow: int64[P] the flow each path serves (non-decreasing); equal-cost paths come first per flow.
      equal_cost: bool[P].
      first, count: int64[F] flow f's paths are rows ``first[f] : first[f] + count[f]``.
      num_equal: int64[F] how many of them are equal-cost.
      unreachable: int64[U] flows with no path (count 0).
    """

    src: np.ndarray
    dst: np.ndarray
    links: np.ndarray
    flow: np.ndarray
    equal_cost: np.ndarray
    first: np.ndarray
    count: np.ndarray
    num_equal: np.ndarray
    unreachable: np.ndarray

    @property
    def num_flows(self) -> int:
        return self.first.shape[0]


class Unreachable(ValueError):
    """Some flows have no path on the fabric (a failure cut them off); ``flows`` lists them."""

    def __init__(self, message: str, flows=()):
        super().__init__(message)
        self.flows = np.asarray(flows, np.int64)


class Router:
    """Computes candidate paths on a compiled fabric; caches them per leaf pair.

    Args:
      info: the fabric's metadata (from ``compile_fabric``).
      max_paths: at most this many candidates per pair.
      site_paths: site-level paths considered between two sites (k shortest).
      seed: seeds the sampling when a pair has more than ``max_paths`` paths.
    """

    def __init__(self, info: FabricInfo, *, max_paths: int = 16, site_paths: int = 2, seed: int = 0):
        for name, value in (("max_paths", max_paths), ("site_paths", site_paths)):
            if not (isinstance(value, (int, np.integer)) and value >= 1):
                raise ValueError(f"routing.{name}: must be an integer >= 1, got {value!r}")
        self.info, self.max_paths, self.site_paths, self.seed = info, int(max_paths), int(site_paths), seed
        src, dst, tier, direction = info.src, info.dst, info.tier, info.direction
        index = {(int(u), int(v)): i for i, (u, v) in enumerate(zip(src, dst))}
        self._reverse = np.array([index.get((int(v), int(u)), -1) for u, v in zip(src, dst)], dtype=np.int64)
        self._reverse_list = self._reverse.tolist()
        scale_up = tier == Tier.SCALE_UP
        self._up: dict[int, list[tuple[int, int]]] = {}
        for i in np.flatnonzero((direction == "up") & ~scale_up):
            self._up.setdefault(int(src[i]), []).append((int(dst[i]), int(i)))
        self._scale_up = {(int(src[i]), int(dst[i])): int(i) for i in np.flatnonzero(scale_up)}
        self._scale_up_out: dict[int, list[tuple[int, int]]] = {}
        for (u, v), i in self._scale_up.items():
            self._scale_up_out.setdefault(u, []).append((v, i))
        kind = info.node_kind
        self._border = {info.site_of(n): n for n in np.flatnonzero(kind == Kind.BORDER).tolist()}
        self._sites = nx.Graph()
        for i in np.flatnonzero(tier == Tier.LONG_HAUL):
            a, b = info.site_of(int(src[i])), info.site_of(int(dst[i]))
            self._sites.add_edge(a, b, weight=float(info.length_km[i]) + _HOP_KM)
        self._long_haul = {(info.site_of(int(src[i])), info.site_of(int(dst[i]))): int(i)
                           for i in np.flatnonzero(tier == Tier.LONG_HAUL)}
        self._up_memo: dict[int, dict[int, list[tuple[int, ...]]]] = {}
        self._down_memo: dict[int, tuple[dict, dict]] = {}
        self._level_memo: dict[int, list[tuple[int, frozenset[int]]]] = {}
        self._pair_memo: dict[tuple[int, int], tuple[list[tuple[int, ...]], list[bool]]] = {}
        self._site_memo: dict[tuple[str, str], list[tuple[tuple[int, ...], bool]]] = {}

    # ----- per-node structure -------------------------------------------------------------------
    def _up_paths(self, node: int) -> dict[int, list[tuple[int, ...]]]:
        """Every upward path from ``node``, by the ancestor it ends at (``node`` itself: one empty path)."""
        memo = self._up_memo.get(node)
        if memo is None:
            memo = {node: [()]}
            for parent, link in self._up.get(node, []):
                for anc, paths in self._up_paths(parent).items():
                    memo.setdefault(anc, []).extend((link,) + p for p in paths)
            self._up_memo[node] = memo
        return memo

    def _down_paths(self, node: int) -> tuple[dict[int, list[tuple[int, ...]]], dict[int, int]]:
        """Every downward path into ``node`` by the ancestor it starts at (paths with a missing reverse
        link dropped), and the hop count to each ancestor."""
        memo = self._down_memo.get(node)
        if memo is None:
            rev = self._reverse_list
            down, hops = {}, {}
            for anc, paths in self._up_paths(node).items():
                hops[anc] = len(paths[0])
                down[anc] = [d for d in (tuple(rev[x] for x in reversed(p)) for p in paths) if -1 not in d]
            memo = self._down_memo[node] = (down, hops)
        return memo

    def _levels(self, node: int) -> list[tuple[int, frozenset[int]]]:
        """Ancestors of ``node`` grouped by hop count (0: the node itself)."""
        memo = self._level_memo.get(node)
        if memo is None:
            by_hops: dict[int, set[int]] = {}
            for anc, h in self._down_paths(node)[1].items():
                by_hops.setdefault(h, set()).add(anc)
            memo = self._level_memo[node] = [(h, frozenset(by_hops[h])) for h in sorted(by_hops)]
        return memo

    def _sample(self, total: int, budget: int, key: tuple) -> list[int]:
        """``budget`` indices of ``range(total)``, always the same for the same (seed, key)."""
        if total <= budget:
            return list(range(total))
        rng = random.Random("/".join(map(str, (self.seed, *key))))  # str seeds hash with sha512: stable
        return sorted(rng.sample(range(total), budget))

    def _site_level(self, a: str, b: str) -> list[tuple[tuple[int, ...], bool]]:
        """k shortest site-level paths a -> b as long-haul link tuples, with their equal-cost flag."""
        key = (a, b)
        if key not in self._site_memo:
            out = []
            if a in self._sites and b in self._sites and nx.has_path(self._sites, a, b):
                paths = itertools.islice(nx.shortest_simple_paths(self._sites, a, b, weight="weight"),
                                         self.site_paths)
                costs = []
                for p in paths:
                    out.append(tuple(self._long_haul[(u, v)] for u, v in zip(p, p[1:])))
                    costs.append(nx.path_weight(self._sites, p, weight="weight"))
                best = min(costs, default=0.0)
                out = [(links, c <= best * (1 + 1e-9)) for links, c in zip(out, costs)]
            self._site_memo[key] = out
        return self._site_memo[key]

    def _between(self, a: int, b: int) -> tuple[list[tuple[int, ...]], list[bool]]:
        """Candidate link sequences from switch ``a`` to switch ``b`` (NIC links excluded)."""
        key = (a, b)
        if key in self._pair_memo:
            return self._pair_memo[key]
        if a == b:
            result = ([()], [True])
        else:
            ua, db = self._up_paths(a), self._down_paths(b)[0]
            best, common = None, []
            for h1, above_a in self._levels(a):
                for h2, above_b in self._levels(b):
                    if (best is None or h1 + h2 < best) and h1 + h2 > 0:
                        shared = above_a & above_b
                        if shared:
                            best, common = h1 + h2, sorted(shared)
            if common:
                sizes = [len(ua[t]) * len(db[t]) for t in common]
                ends = list(itertools.accumulate(sizes))
                paths = []
                for i in self._sample(ends[-1], self.max_paths, key):
                    j = bisect.bisect_right(ends, i)
                    t, i = common[j], i - (ends[j] - sizes[j])
                    down = db[t]
                    paths.append(ua[t][i // len(down)] + down[i % len(down)])
                result = (paths, [True] * len(paths))
            else:
                result = self._across(a, b)
        self._pair_memo[key] = result
        return result

    def _across(self, a: int, b: int) -> tuple[list[tuple[int, ...]], list[bool]]:
        info = self.info
        sa, sb = info.site_of(a), info.site_of(b)
        ups = self._up_paths(a).get(self._border.get(sa), [])
        downs = self._down_paths(b)[0].get(self._border.get(sb), [])
        site_paths = self._site_level(sa, sb) if ups and downs else []
        paths, equal = [], []
        if site_paths:
            budget = max(1, self.max_paths // len(site_paths))
            for s, (lh, eq) in enumerate(site_paths):
                for i in self._sample(len(ups) * len(downs), budget, (a, b, s)):
                    paths.append(ups[i // len(downs)] + lh + downs[i % len(downs)])
                    equal.append(eq)
        return paths, equal

    # ----- flows --------------------------------------------------------------------------------
    def _endpoints(self):
        """Per rank: NIC up link and its leaf, NIC down link into it (-1 where missing)."""
        if not hasattr(self, "_ends"):
            G = self.info.num_gpus
            up_link, leaf, down_link = (np.full(G, -1, np.int64) for _ in range(3))
            for rank, node in enumerate(self.info.gpus.tolist()):
                for parent, link in self._up.get(node, [])[:1]:  # one NIC per GPU
                    up_link[rank], leaf[rank], down_link[rank] = link, parent, self._reverse[link]
            self._ends = up_link, leaf, down_link
        return self._ends

    def _between_array(self, a: int, b: int):
        paths, eq = self._between(a, b)
        width = max((len(p) for p in paths), default=0)
        block = np.full((len(paths), width), -1, np.int64)
        for i, p in enumerate(paths):
            block[i, :len(p)] = p
        return block, np.array([len(p) for p in paths], np.int64), np.array(eq, bool)

    def _scale_up_path(self, s: int, d: int) -> tuple[int, ...] | None:
        a, b = int(self.info.gpus[s]), int(self.info.gpus[d])
        direct = self._scale_up.get((a, b))
        if direct is not None:
            return (direct,)
        for switch, up in self._scale_up_out.get(a, []):
            down = self._scale_up.get((switch, b))
            if down is not None:
                return (up, down)
        return None

    def candidates(self, src, dst, *, unreachable: str = "raise") -> Candidates:
        """Candidate paths for flows ``src[f] -> dst[f]`` (GPU ranks).

        Args:
          unreachable: ``"raise"`` (a ValueError naming the first pairs without a path) or
            ``"report"`` (such flows get no candidates and are listed in ``Candidates.unreachable``).
        """
        info = self.info
        src, dst = check_endpoints(src, dst, info.num_gpus, "GPU rank")
        if src.size == 0:
            raise ValueError("src: the flow set is empty")
        if unreachable not in ("raise", "report"):
            raise ValueError(f"unreachable: must be 'raise' or 'report', got {unreachable!r}")
        F = src.size
        alive = (info.gpus[src] >= 0) & (info.gpus[dst] >= 0)

        # scale-up pairs: one path inside the domain, else they fall through to the scale-out fabric
        parts = []  # (flow, links [n, w], equal-cost)
        inside = np.flatnonzero(alive & (info.gpu_domain[src] >= 0) & (info.gpu_domain[src] == info.gpu_domain[dst]))
        direct = [(f, self._scale_up_path(src[f], dst[f])) for f in inside.tolist()]
        done = np.zeros(F, bool)
        direct = [(f, p) for f, p in direct if p is not None]
        if direct:
            flows = np.array([f for f, _ in direct], np.int64)
            block = np.full((flows.size, 2), -1, np.int64)
            for i, (_, p) in enumerate(direct):
                block[i, :len(p)] = p
            parts.append((flows, block, np.ones(flows.size, bool)))
            done[flows] = True

        up_link, leaf, down_link = self._endpoints()
        rest = np.flatnonzero(alive & ~done & (up_link[src] >= 0) & (down_link[dst] >= 0))
        if rest.size:
            N = len(info.nodes)
            uniq, inv = np.unique(leaf[src[rest]] * N + leaf[dst[rest]], return_inverse=True)
            blocks = [self._between_array(int(u // N), int(u % N)) for u in uniq.tolist()]
            n_u = np.array([b[0].shape[0] for b in blocks], np.int64)
            width = max(b[0].shape[1] for b in blocks)
            middle = np.full((n_u.sum(), width), -1, np.int64)
            offs = np.concatenate([[0], np.cumsum(n_u)[:-1]])
            for o, (block, _, _) in zip(offs, blocks):
                middle[o:o + block.shape[0], :block.shape[1]] = block
            lens = np.concatenate([b[1] for b in blocks])
            eqs = np.concatenate([b[2] for b in blocks])
            per_flow = n_u[inv]
            owner = np.repeat(np.arange(rest.size), per_flow)
            within = np.arange(owner.size) - np.repeat(np.cumsum(per_flow) - per_flow, per_flow)
            m = offs[inv][owner] + within
            flows = rest[owner]
            block = np.full((owner.size, width + 2), -1, np.int64)
            block[:, 0] = up_link[src[flows]]
            block[:, 1:width + 1] = middle[m]
            block[np.arange(owner.size), 1 + lens[m]] = down_link[dst[flows]]
            parts.append((flows, block, eqs[m]))

        width = max((p[1].shape[1] for p in parts), default=1)
        links = np.full((sum(p[0].size for p in parts), width), -1, np.int32)
        row = 0
        for _, block, _ in parts:
            links[row:row + block.shape[0], :block.shape[1]] = block
            row += block.shape[0]
        flow = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
        eq = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, bool)
        count = np.bincount(flow, minlength=F).astype(np.int64)
        lost = np.flatnonzero(count == 0)
        if lost.size and unreachable == "raise":
            names = ", ".join(f"{src[f]} ({self._gpu_name(src[f])}) -> {dst[f]} ({self._gpu_name(dst[f])})"
                              for f in lost[:3])
            raise Unreachable(f"routing: {lost.size} of {F} flows have no path, e.g. {names}", lost)
        order = np.lexsort((~eq, flow))  # grouped by flow, equal-cost first (stable otherwise)
        first = np.concatenate([[0], np.cumsum(count)[:-1]])
        num_equal = np.bincount(flow[eq], minlength=F).astype(np.int64)
        return Candidates(src=src, dst=dst, links=links[order], flow=flow[order], equal_cost=eq[order],
                          first=first, count=count, num_equal=num_equal, unreachable=lost)

    def _gpu_name(self, rank: int) -> str:
        node = int(self.info.gpus[rank])
        return self.info.nodes[node] if node >= 0 else "failed"
