"""Candidate paths between GPUs of a compiled fabric.

Inside a scale-up domain a pair uses the scale-up links (and falls back to the scale-out fabric if
they failed). Inside a site, the candidates are all shortest up-down paths through the lowest common
ancestors of the two NICs' leaves (in a k-ary fat-tree, (k/2)**2 between pods). Between sites they
are up-down paths to the border routers joined by the k shortest site-level paths over the long-haul
links (both ways round a ring for k=2); a candidate is *equal-cost* when its site-level path is a
shortest one (by fibre length, hop count breaking ties), and every intra-site candidate is.

Per pair at most ``max_paths`` candidates are kept, sampled without replacement by a generator seeded
with (seed, the two leaves), so the choice is deterministic; between sites the budget is shared
evenly by the site-level paths so that every one of them is represented. Candidates are computed
per leaf pair and cached: many GPU pairs share them.
"""

from __future__ import annotations

import dataclasses
import itertools

import networkx as nx
import numpy as np

from ..fabric._network import FabricInfo

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
        scale_up = tier == "scale_up"
        self._up: dict[int, list[tuple[int, int]]] = {}
        for i in np.flatnonzero((direction == "up") & ~scale_up):
            self._up.setdefault(int(src[i]), []).append((int(dst[i]), int(i)))
        self._scale_up = {(int(src[i]), int(dst[i])): int(i) for i in np.flatnonzero(scale_up)}
        self._scale_up_out: dict[int, list[tuple[int, int]]] = {}
        for (u, v), i in self._scale_up.items():
            self._scale_up_out.setdefault(u, []).append((v, i))
        kind = info.node_kind
        self._border = {info.site_of(n): n for n in np.flatnonzero(kind == "border").tolist()}
        self._sites = nx.Graph()
        for i in np.flatnonzero(tier == "long_haul"):
            a, b = info.site_of(int(src[i])), info.site_of(int(dst[i]))
            self._sites.add_edge(a, b, weight=float(info.length_km[i]) + _HOP_KM)
        self._long_haul = {(info.site_of(int(src[i])), info.site_of(int(dst[i]))): int(i)
                           for i in np.flatnonzero(tier == "long_haul")}
        self._up_memo: dict[int, dict[int, list[tuple[int, ...]]]] = {}
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

    def _down(self, up_path: tuple[int, ...]) -> tuple[int, ...] | None:
        """The reverse of an upward path (top first), or None if a reverse link is missing."""
        rev = self._reverse[list(reversed(up_path))] if up_path else np.zeros(0, np.int64)
        return None if (rev < 0).any() else tuple(int(x) for x in rev)

    def _sample(self, total: int, budget: int, key: tuple[int, ...]) -> np.ndarray:
        if total <= budget:
            return np.arange(total)
        rng = np.random.default_rng([self.seed, *key])
        return np.sort(rng.choice(total, size=budget, replace=False))

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
            ua, ub = self._up_paths(a), self._up_paths(b)
            common = [t for t in ua if t in ub]
            if common:
                hops = {t: len(ua[t][0]) + len(ub[t][0]) for t in common}
                best = min(hops.values())
                combos = [(up, ub_path) for t in common if hops[t] == best for up in ua[t] for ub_path in ub[t]]
                paths = []
                for i in self._sample(len(combos), self.max_paths, (a, b)):
                    up, ub_path = combos[i]
                    down = self._down(ub_path)
                    if down is not None:
                        paths.append(up + down)
                result = (paths, [True] * len(paths))
            else:
                result = self._across(a, b, ua, ub)
        self._pair_memo[key] = result
        return result

    def _across(self, a, b, ua, ub):
        info = self.info
        sa, sb = info.site_of(a), info.site_of(b)
        ba, bb = self._border.get(sa), self._border.get(sb)
        ups, downs = ua.get(ba, []), ub.get(bb, [])
        site_paths = self._site_level(sa, sb) if ups and downs else []
        paths, equal = [], []
        if site_paths:
            budget = max(1, self.max_paths // len(site_paths))
            for s, (lh, eq) in enumerate(site_paths):
                for i in self._sample(len(ups) * len(downs), budget, (a, b, s)):
                    down = self._down(downs[i % len(downs)])
                    if down is not None:
                        paths.append(ups[i // len(downs)] + lh + down)
                        equal.append(eq)
        return paths, equal

    # ----- flows --------------------------------------------------------------------------------
    def _endpoint(self, rank: int, up: bool):
        """(NIC link, leaf node) of a GPU, or None if it has no working NIC."""
        node = int(self.info.gpus[rank])
        if up:
            for parent, link in self._up.get(node, []):
                return link, parent
            return None
        for parent, link in self._up.get(node, []):
            rev = int(self._reverse[link])
            if rev >= 0:
                return rev, parent
        return None

    def _scale_up_path(self, s: int, d: int) -> tuple[int, ...] | None:
        info = self.info
        if info.gpu_domain[s] < 0 or info.gpu_domain[s] != info.gpu_domain[d]:
            return None
        a, b = int(info.gpus[s]), int(info.gpus[d])
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
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        if src.ndim != 1 or src.shape != dst.shape:
            raise ValueError(f"src and dst must be 1-D of equal length, got shapes {src.shape} and {dst.shape}")
        if src.size == 0:
            raise ValueError("src: the flow set is empty")
        if unreachable not in ("raise", "report"):
            raise ValueError(f"unreachable: must be 'raise' or 'report', got {unreachable!r}")
        G = info.num_gpus
        for name, ranks in (("src", src), ("dst", dst)):
            bad = np.flatnonzero((ranks < 0) | (ranks >= G))
            if bad.size:
                raise ValueError(f"{name}[{bad[0]}] = {ranks[bad[0]]} is not a GPU rank (0..{G - 1})")
        same = np.flatnonzero(src == dst)
        if same.size:
            raise ValueError(f"src[{same[0]}] == dst[{same[0]}] = {src[same[0]]}: a flow needs two GPUs")

        rows: list[tuple[int, ...]] = []
        flow_of: list[int] = []
        equal: list[bool] = []
        count = np.zeros(src.size, np.int64)
        for f, (s, d) in enumerate(zip(src.tolist(), dst.tolist())):
            paths, eq = self._gpu_paths(s, d)
            rows += paths
            equal += eq
            flow_of += [f] * len(paths)
            count[f] = len(paths)
        lost = np.flatnonzero(count == 0)
        if lost.size and unreachable == "raise":
            names = ", ".join(f"{src[f]} ({self._gpu_name(src[f])}) -> {dst[f]} ({self._gpu_name(dst[f])})"
                              for f in lost[:3])
            raise ValueError(f"routing: {lost.size} of {src.size} flows have no path, e.g. {names}")
        width = max((len(r) for r in rows), default=1)
        links = np.full((len(rows), width), -1, dtype=np.int32)
        for i, r in enumerate(rows):
            links[i, :len(r)] = r
        flow = np.asarray(flow_of, dtype=np.int64)
        eq = np.asarray(equal, dtype=bool)
        order = np.lexsort((~eq, flow))  # per flow, equal-cost first
        first = np.concatenate([[0], np.cumsum(count)[:-1]])
        num_equal = np.bincount(flow[eq], minlength=src.size).astype(np.int64)
        return Candidates(src=src, dst=dst, links=links[order], flow=flow[order], equal_cost=eq[order], first=first,
                          count=count, num_equal=num_equal, unreachable=lost)

    def _gpu_name(self, rank: int) -> str:
        node = int(self.info.gpus[rank])
        return self.info.nodes[node] if node >= 0 else "failed"

    def _gpu_paths(self, s: int, d: int) -> tuple[list[tuple[int, ...]], list[bool]]:
        if self.info.gpus[s] < 0 or self.info.gpus[d] < 0:
            return [], []
        direct = self._scale_up_path(s, d)
        if direct is not None:
            return [direct], [True]
        out, into = self._endpoint(s, up=True), self._endpoint(d, up=False)
        if out is None or into is None:
            return [], []
        middle, eq = self._between(out[1], into[1])
        return [(out[0],) + m + (into[0],) for m in middle], list(eq)
