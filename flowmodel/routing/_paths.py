"""Candidate paths between GPUs of a compiled fabric.

Inside a scale-up domain a pair uses the scale-up links (and falls back to the scale-out fabric if
they failed). Inside a site, the candidates are all shortest up-down paths through the lowest common
ancestors of the two NICs' leaves (in a k-ary fat-tree, (k/2)**2 between pods). Between sites they
are up-down paths to the border routers joined by the k shortest site-level paths over the long-haul
links (both ways round a ring for k=2); a candidate is *equal-cost* when its site-level path is a
shortest one (by fibre length, hop count breaking ties), and every intra-site candidate is.

Per pair at most ``max_paths`` candidates are kept, a sample without replacement drawn by a generator
seeded with (seed, the two leaves), so the choice is deterministic; between sites the budget is shared
evenly by the site-level paths so that every one of them is represented.

Candidates are computed for all distinct leaf pairs of a call at once, in arrays: each node's upward
paths (to every ancestor, in link order) are enumerated once per router, leaves with the same
ancestors (and hop counts) share one lowest-common-ancestor computation, and the per-pair samples
come from ``_sample.sample_sorted`` (``random.Random``'s draws, vectorised). The per-pair methods
(``_between``) are the reference the arrays are tested against, and serve the rare pair where one
leaf is an ancestor of the other.
"""

from __future__ import annotations

import bisect
import copy
import dataclasses
import itertools
import random

import networkx as nx
import numpy as np

from .._checks import check_endpoints
from ..fabric import FabricInfo, Kind, Tier
from ._sample import sample_sorted

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
      sampled: some pair had more paths than ``max_paths`` and the router's seed picked which
        (False: the candidates are the same under every seed).
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
    sampled: bool = False

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
        N = len(info.nodes)
        src, dst, tier, direction = info.src.astype(np.int64), info.dst.astype(np.int64), info.tier, info.direction
        keys = src * N + dst  # a DiGraph has at most one link u -> v
        order = np.argsort(keys)
        at = np.minimum(np.searchsorted(keys, dst * N + src, sorter=order), keys.size - 1)
        self._reverse = np.where(keys[order[at]] == dst * N + src, order[at], -1)
        self._reverse_list = self._reverse.tolist()
        scale_up = tier == Tier.SCALE_UP
        self._up_ids = np.flatnonzero((direction == "up") & ~scale_up)  # scale-out up links, in link order
        self._scale_up_ids = np.flatnonzero(scale_up)
        self._scale_up_keys = keys[self._scale_up_ids]  # sorted when links are numbered in build order
        if np.any(np.diff(self._scale_up_keys) < 0):
            order = np.argsort(self._scale_up_keys, kind="stable")
            self._scale_up_keys, self._scale_up_sorted = self._scale_up_keys[order], self._scale_up_ids[order]
        else:
            self._scale_up_sorted = self._scale_up_ids
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
        self._paths_table: _PathTable | None = None  # every node's upward paths, made on first use
        self._common_memo: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}  # by ancestor class pair
        self._drawn_pairs: set[tuple[int, int]] = set()  # _pair_memo entries the seed sampled
        self._drew = False  # whether the seed picked candidates since candidates() began

    def reseeded(self, seed: int) -> Router:
        """This router under another ``seed``: it shares every table that does not depend on the seed
        (upward paths, path tables, lowest common ancestors, site-level paths, NIC links), built once
        for both; only the per-pair samples (pairs with more than ``max_paths`` paths) are drawn anew."""
        self._table()  # built here, so that both routers hold the same tables
        self._endpoints()
        _ = self._up
        other = copy.copy(self)  # the memo dicts are shared: each depends only on the fabric
        other.seed, other._pair_memo, other._drawn_pairs, other._drew = seed, {}, set(), False
        return other

    @property
    def _up(self) -> dict[int, list[tuple[int, int]]]:
        """node -> [(parent, link)] over the scale-out up links, in link order (the per-pair methods')."""
        if not hasattr(self, "_up_lists"):
            self._up_lists: dict[int, list[tuple[int, int]]] = {}
            for i, u, v in zip(self._up_ids.tolist(), self.info.src[self._up_ids].tolist(),
                               self.info.dst[self._up_ids].tolist()):
                self._up_lists.setdefault(u, []).append((v, i))
        return self._up_lists

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
        self._drew = True
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
            self._drew |= key in self._drawn_pairs
            return self._pair_memo[key]
        drew, self._drew = self._drew, False
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
        if self._drew:
            self._drawn_pairs.add(key)
        self._drew |= drew
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

    # ----- the same, for many leaf pairs at once ---------------------------------------------
    def _table(self) -> _PathTable:
        if self._paths_table is None:
            self._paths_table = _PathTable.build(self)
        return self._paths_table

    def _common(self, t: _PathTable, ca: int, cb: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions (in the ancestor lists of classes ``ca`` and ``cb``) of the lowest common
        ancestors, as ``_between`` picks them: least hops in all, then least from ``a``."""
        key = (ca, cb)
        if key not in self._common_memo:
            ea, eb = t.class_entries(ca), t.class_entries(cb)
            _, pa, pb = np.intersect1d(t.anc[ea], t.anc[eb], assume_unique=True, return_indices=True)
            if pa.size:
                h1, h2 = t.hops[ea][pa], t.hops[eb][pb]
                best = np.lexsort((h1, h1 + h2))[0]
                keep = (h1 + h2 == h1[best] + h2[best]) & (h1 == h1[best])
                pa, pb = pa[keep], pb[keep]
            self._common_memo[key] = (pa, pb)
        return self._common_memo[key]

    def _pick(self, totals: np.ndarray, budget: int, *key) -> tuple[np.ndarray, np.ndarray]:
        """(owner, index) of the sampled candidate indices of each total, ascending per owner: the
        same as ``_sample(totals[k], budget, (key[0][k], key[1][k], ...))`` for every k. ``key``:
        int arrays, or ints shared by every k."""
        totals = np.asarray(totals, np.int64)
        small = totals <= budget
        count = np.minimum(totals, budget)
        owner = np.repeat(np.arange(totals.size), count)
        index = np.arange(owner.size) - np.repeat(np.cumsum(count) - count, count)  # all of a small total
        big = np.flatnonzero(~small)
        if big.size:
            self._drew = True
            columns = [np.broadcast_to(k, totals.shape)[big].tolist() for k in key]
            names = [f"{self.seed}/" + "/".join(map(str, k)) for k in zip(*columns)] if len(key) != 2 else \
                [f"{self.seed}/{x}/{y}" for x, y in zip(*columns)]  # str(seed) like _sample's seeds
            index[~small[owner]] = sample_sorted(names, totals[big], budget).reshape(-1)
        return owner, index

    def _middles(self, a: np.ndarray, b: np.ndarray):
        """Candidates between switches ``a[q]`` and ``b[q]`` (NIC links excluded) for every pair q, as
        ``_between`` gives them: (pair int64[n], links int64[n, W], lengths int64[n], equal-cost bool[n]),
        W the longest path, and int64[len(a)] each pair's first row: a pair's paths are consecutive."""
        t = self._table()
        out = []  # (pair, [(links, lengths) segments], equal-cost)
        same = a == b
        if same.any():
            q = np.flatnonzero(same)
            out.append((q, [], np.ones(q.size, bool)))
        related = ~same & (t.has_entry(a, b) | t.has_entry(b, a))  # one leaf above the other: rare
        for q in np.flatnonzero(related).tolist():
            block, lens, eq = self._between_array(int(a[q]), int(b[q]))
            out.append((np.full(lens.size, q), [(block, lens)], eq))
        rest = np.flatnonzero(~same & ~related)
        ca, cb = t.node_class[a[rest]], t.node_class[b[rest]]
        within, across = [], []  # (pairs, ancestor positions in a's list, in b's list, classes); pairs
        for (x, y), members in _groups(ca * (t.num_classes + 1) + cb, rest, t.num_classes + 1):
            pa, pb = self._common(t, x, y)
            if pa.size:
                within.append((members, pa, pb, (x, y)))
            else:
                across.append(members)

        if within:  # within a site: every up path to a common ancestor times every down path from it
            pairs = np.concatenate([m for m, _, _, _ in within])
            # paths through each common ancestor: the same for every pair of a class pair
            sizes = [t.up_count[t.class_entries(x)[pa]] * t.down_count[t.class_entries(y)[pb]]
                     for _, pa, pb, (x, y) in within]
            totals = np.concatenate([np.full(m.size, n.sum()) for (m, _, _, _), n in zip(within, sizes)])
            owner, index = self._pick(totals, self.max_paths, a[pairs], b[pairs])
            bounds = np.searchsorted(owner, np.cumsum([0] + [m.size for m, _, _, _ in within]))
            lo_pair = 0
            for (members, pa, pb, _), size, lo, hi in zip(within, sizes, bounds[:-1], bounds[1:]):
                o, i = owner[lo:hi] - lo_pair, index[lo:hi]
                lo_pair += members.size
                end = np.cumsum(size)
                c = np.searchsorted(end, i, side="right")  # the common ancestor of each sampled path
                k = end[c] - size[c]  # paths before it
                e_up, e_down = t.first[a[members[o]]] + pa[c], t.first[b[members[o]]] + pb[c]
                d = t.down_count[e_down]
                up, down = t.up_first[e_up] + (i - k) // d, t.down_first[e_down] + (i - k) % d
                out.append((members[o], [(t.up_links[up], t.up_len[up]), (t.down_links[down], t.down_len[down])],
                            np.ones(o.size, bool)))
        if across:
            pair, links, lens, eq = _stack(self._across_many(t, a, b, np.concatenate(across)), a.size)[:4]
            order = np.argsort(pair, kind="stable")  # site path by site path, so: group by pair
            out.append((pair[order], [(links[order], lens[order])], eq[order]))
        return _stack(out, a.size)

    def _across_many(self, t: _PathTable, a, b, pairs):
        """``_across`` for the pairs ``pairs`` (without a common ancestor): segments as ``_middles``'."""
        N, info = t.num_nodes, self.info
        site = info.node_site
        border = np.full(N + 1, N, np.int64)  # node -> its site's border (N: none)
        for name, node in self._border.items():
            border[:N][site == name] = node
        ea, eb = t.entry(a[pairs], border[a[pairs]]), t.entry(b[pairs], border[b[pairs]])
        ok = (ea >= 0) & (eb >= 0)
        ok[ok] &= t.down_count[eb[ok]] > 0
        pairs, ea, eb = pairs[ok], ea[ok], eb[ok]
        out = []
        site_pair = [(str(site[x]), str(site[y])) for x, y in zip(a[pairs].tolist(), b[pairs].tolist())]
        groups: dict[tuple[str, str], list[int]] = {}
        for i, key in enumerate(site_pair):
            groups.setdefault(key, []).append(i)
        for (sa, sb), members in groups.items():
            members = np.array(members, np.int64)
            paths = self._site_level(sa, sb)
            if not paths:
                continue
            budget = max(1, self.max_paths // len(paths))
            u, d = t.up_count[ea[members]], t.down_count[eb[members]]
            for s, (lh, eq) in enumerate(paths):
                q = pairs[members]
                owner, index = self._pick(u * d, budget, a[q], b[q], s)
                m = members[owner]
                dd = t.down_count[eb[m]]
                up, down = t.up_first[ea[m]] + index // dd, t.down_first[eb[m]] + index % dd
                lh_block = np.broadcast_to(np.array(lh, np.int64).reshape(1, -1), (m.size, len(lh)))
                out.append((pairs[m], [(t.up_links[up], t.up_len[up]), (lh_block, np.full(m.size, len(lh))),
                                       (t.down_links[down], t.down_len[down])], np.full(m.size, eq)))
        return out

    # ----- flows --------------------------------------------------------------------------------
    def _endpoints(self):
        """Per rank: NIC up link and its leaf, NIC down link into it (-1 where missing)."""
        if not hasattr(self, "_ends"):
            info = self.info
            first_up = np.full(len(info.nodes) + 1, -1, np.int64)  # node -> its first up link (one NIC per GPU)
            nodes, at = np.unique(info.src[self._up_ids], return_index=True)
            first_up[nodes] = self._up_ids[at]
            up_link = first_up[info.gpus]  # a failed GPU (-1) reads the sentinel
            found = up_link >= 0
            leaf = np.where(found, info.dst[np.maximum(up_link, 0)], -1).astype(np.int64)
            down_link = np.where(found, self._reverse[np.maximum(up_link, 0)], -1)
            self._ends = up_link, leaf, down_link
        return self._ends

    def _between_array(self, a: int, b: int):
        paths, eq = self._between(a, b)
        width = max((len(p) for p in paths), default=0)
        block = np.full((len(paths), width), -1, np.int64)
        for i, p in enumerate(paths):
            block[i, :len(p)] = p
        return block, np.array([len(p) for p in paths], np.int64), np.array(eq, bool)

    def _scale_up_link(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """int64: the scale-up link u -> v for each pair, -1 where there is none."""
        keys = self._scale_up_keys
        if keys.size == 0:
            return np.full(np.shape(u), -1, np.int64)
        want = u.astype(np.int64) * len(self.info.nodes) + v
        at = np.minimum(np.searchsorted(keys, want), keys.size - 1)
        return np.where(keys[at] == want, self._scale_up_sorted[at], -1)

    def _scale_up_paths(self, s: np.ndarray, d: np.ndarray) -> np.ndarray:
        """int64[n, 2] the scale-up path of each rank pair: the direct link, else the first (in link
        order) two-hop path through a switch (or a GPU, in a mesh); -1 padded, row -1 where none."""
        info = self.info
        a, b = info.gpus[s], info.gpus[d]
        block = np.full((s.size, 2), -1, np.int64)
        block[:, 0] = self._scale_up_link(a, b)
        need = np.flatnonzero(block[:, 0] < 0)
        ids = self._scale_up_ids
        out_src = info.src[ids]
        order = np.argsort(out_src, kind="stable")  # each node's scale-up links, in link order
        out_src, out_ids = out_src[order], ids[order]
        first = np.searchsorted(out_src, a[need])
        count = np.searchsorted(out_src, a[need], side="right") - first
        for j in range(int(count.max(initial=0))):
            todo = np.flatnonzero((j < count) & (block[need, 0] < 0))
            up = out_ids[first[todo] + j]
            down = self._scale_up_link(info.dst[up], b[need[todo]])
            hit = down >= 0
            block[need[todo[hit]], 0], block[need[todo[hit]], 1] = up[hit], down[hit]
        return block

    def _scale_up_path(self, s: int, d: int) -> tuple[int, ...] | None:
        block = self._scale_up_paths(np.array([s]), np.array([d]))[0]
        return None if block[0] < 0 else tuple(int(x) for x in block if x >= 0)

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
        self._drew = False

        # scale-up pairs: one path inside the domain, else they fall through to the scale-out fabric
        parts = []  # (flow, links [n, w], equal-cost)
        inside = np.flatnonzero(alive & (info.gpu_domain[src] >= 0) & (info.gpu_domain[src] == info.gpu_domain[dst]))
        done = np.zeros(F, bool)
        if inside.size:
            block = self._scale_up_paths(src[inside], dst[inside])
            has = block[:, 0] >= 0
            if has.any():
                parts.append((inside[has], block[has], np.ones(int(has.sum()), bool)))
                done[inside[has]] = True

        up_link, leaf, down_link = self._endpoints()
        rest = np.flatnonzero(alive & ~done & (up_link[src] >= 0) & (down_link[dst] >= 0))
        if rest.size:
            N = len(info.nodes)
            uniq, inv = np.unique(leaf[src[rest]] * N + leaf[dst[rest]], return_inverse=True)
            pair, middle, lens, eqs, offs = self._middles(uniq // N, uniq % N)
            width = middle.shape[1]
            n_u = np.bincount(pair, minlength=uniq.size).astype(np.int64)
            per_flow = n_u[inv]
            owner = np.repeat(np.arange(rest.size), per_flow)
            within = np.arange(owner.size) - np.repeat(np.cumsum(per_flow) - per_flow, per_flow)
            m = offs[inv][owner] + within
            flows = rest[owner]
            block = np.full((owner.size, width + 2), -1, np.int32)
            block[:, 0] = up_link[src[flows]]
            block[:, 1:width + 1] = middle[m]
            block[np.arange(owner.size), 1 + lens[m]] = down_link[dst[flows]]
            parts.append((flows, block, eqs[m]))

        width = max((p[1].shape[1] for p in parts), default=1)
        if len(parts) == 1:
            links = parts[0][1].astype(np.int32, copy=False)
        else:
            links = np.full((sum(p[0].size for p in parts), width), -1, np.int32)
            row = 0
            for _, block, _ in parts:
                links[row:row + block.shape[0], :block.shape[1]] = block
                row += block.shape[0]
        flow = np.concatenate([p[0] for p in parts] or [np.zeros(0, np.int64)]) if len(parts) != 1 else parts[0][0]
        eq = np.concatenate([p[2] for p in parts] or [np.zeros(0, bool)]) if len(parts) != 1 else parts[0][2]
        count = np.bincount(flow, minlength=F).astype(np.int64)
        lost = np.flatnonzero(count == 0)
        if lost.size and unreachable == "raise":
            names = ", ".join(f"{src[f]} ({self._gpu_name(src[f])}) -> {dst[f]} ({self._gpu_name(dst[f])})"
                              for f in lost[:3])
            raise Unreachable(f"routing: {lost.size} of {F} flows have no path, e.g. {names}", lost)
        if not eq.all():
            order = np.lexsort((~eq, flow))  # grouped by flow, equal-cost first (stable otherwise)
        else:  # the same order, cheaper
            order = np.argsort(flow, kind="stable") if np.any(flow[1:] < flow[:-1]) else slice(None)
        first = np.concatenate([[0], np.cumsum(count)[:-1]])
        num_equal = count if eq.all() else np.bincount(flow[eq], minlength=F).astype(np.int64)
        return Candidates(src=src, dst=dst, links=links[order], flow=flow[order], equal_cost=eq[order],
                          first=first, count=count, num_equal=num_equal, unreachable=lost, sampled=self._drew)

    def _gpu_name(self, rank: int) -> str:
        node = int(self.info.gpus[rank])
        return self.info.nodes[node] if node >= 0 else "failed"


def _groups(keys: np.ndarray, members: np.ndarray, base: int):
    """((x, y), members with key x * base + y) for each distinct key, in key order."""
    order = np.argsort(keys, kind="stable")
    keys, members = keys[order], members[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.size else np.zeros(0, np.int64)
    for lo, hi in zip(starts.tolist(), starts[1:].tolist() + [keys.size]):
        yield divmod(int(keys[lo]), base), members[lo:hi]


def _stack(parts, num_pairs: int):
    """Concatenate (pair, segments, equal-cost) parts, each path its segments end to end: (pair,
    links, lengths, equal-cost, int64[num_pairs] each pair's first row). A pair's paths must be
    consecutive rows of one part; their order is kept."""
    if not parts:
        z = np.zeros(0, np.int64)
        return z, np.zeros((0, 0), np.int64), z, np.zeros(0, bool), np.zeros(num_pairs, np.int64)
    lengths = [sum((seg[1] for seg in segs), np.zeros(q.size, np.int64)) for q, segs, _ in parts]
    width = max((int(n.max(initial=0)) for n in lengths), default=0)
    blocks = []
    for q, segs, _ in parts:
        block = np.full((q.size, width), -1, np.int32)
        offset = np.zeros(q.size, np.int64)
        for links, lens in segs if q.size else ():  # -1 padding past a segment's end: the next one's
            same = (offset == offset[0]).all()
            for o in [int(offset[0])] if same else np.flatnonzero(np.bincount(offset)).tolist():
                w = min(links.shape[1], width - o)
                if w <= 0:
                    continue
                if same:  # the usual case: every row at the same offset
                    block[:, o:o + w] = links[:, :w]
                else:
                    rows = offset == o
                    block[rows, o:o + w] = links[rows, :w]
            offset = offset + lens
        blocks.append(block)
    pair = np.concatenate([q for q, _, _ in parts])
    first = np.zeros(num_pairs, np.int64)
    starts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]]) if pair.size else np.zeros(0, np.int64)
    first[pair[starts]] = starts  # no path for any pair (sites cut apart): nothing to index
    return pair, np.concatenate(blocks), np.concatenate(lengths), np.concatenate([eq for _, _, eq in parts]), first


@dataclasses.dataclass(frozen=True, eq=False)
class _PathTable:
    """Every upward path of the scale-out fabric from the GPUs' leaves and the switches above them.

    Entries are (node, ancestor) pairs, self excluded, grouped by node and sorted by ancestor: node n's
    are ``first[n] : first[n] + count[n]``. An entry's up paths are rows ``up_first : up_first +
    up_count`` of ``up_links`` in the order ``_up_paths`` lists them (lexicographic in link indices);
    its down paths (ancestor -> node, over the reverse links; those missing a reverse link dropped)
    rows ``down_first : down_first + down_count`` of ``down_links``. ``hops``: the first up path's
    length. Nodes with the same (ancestor, hops, up and down path counts) list share a class
    (``node_class``), and so share their lowest common ancestors, and the number of paths through
    each, with any other class.
    """

    num_nodes: int
    first: np.ndarray
    count: np.ndarray
    node: np.ndarray
    anc: np.ndarray
    hops: np.ndarray
    up_first: np.ndarray
    up_count: np.ndarray
    down_first: np.ndarray
    down_count: np.ndarray
    up_links: np.ndarray
    up_len: np.ndarray
    down_links: np.ndarray
    down_len: np.ndarray
    node_class: np.ndarray
    class_node: np.ndarray

    @property
    def num_classes(self) -> int:
        return self.class_node.size

    def class_entries(self, c: int) -> np.ndarray:
        n = self.class_node[c]
        return np.arange(self.first[n], self.first[n] + self.count[n])

    def entry(self, node: np.ndarray, anc: np.ndarray) -> np.ndarray:
        """The entry (node, anc) of each pair, -1 where anc is not above node."""
        keys = self.node * (self.num_nodes + 1) + self.anc
        want = node.astype(np.int64) * (self.num_nodes + 1) + anc
        if keys.size == 0:
            return np.full(want.shape, -1, np.int64)
        at = np.minimum(np.searchsorted(keys, want), keys.size - 1)
        return np.where(keys[at] == want, at, -1)

    def has_entry(self, node: np.ndarray, anc: np.ndarray) -> np.ndarray:
        return self.entry(node, anc) >= 0

    @classmethod
    def build(cls, router: Router) -> _PathTable:
        info = router.info
        N = len(info.nodes)
        up = router._up_ids
        usrc, udst = info.src[up].astype(np.int64), info.dst[up].astype(np.int64)
        leaves = router._endpoints()[1]
        need = np.zeros(N, bool)
        frontier = np.unique(leaves[leaves >= 0])
        while frontier.size:  # the leaves and everything above them
            need[frontier] = True
            frontier = np.unique(udst[need[usrc]])
            frontier = frontier[~need[frontier]]
        keep = need[usrc]
        up, usrc, udst = up[keep], usrc[keep], udst[keep]

        # paths of length h + 1: a link u -> v, then a path of length h from v (links in link order)
        starts = [np.flatnonzero(need)]
        ends, links = [starts[0]], [np.zeros((starts[0].size, 0), np.int64)]
        while starts[-1].size:
            if len(starts) > N:
                raise ValueError("fabric: the up links form a cycle; routing needs them to go up a hierarchy")
            order = np.argsort(starts[-1], kind="stable")
            s = starts[-1][order]
            lo, hi = np.searchsorted(s, udst), np.searchsorted(s, udst, side="right")
            n = hi - lo
            link = np.repeat(np.arange(up.size), n)
            row = order[np.repeat(lo, n) + np.arange(link.size) - np.repeat(np.cumsum(n) - n, n)]
            starts.append(usrc[link])
            ends.append(ends[-1][row])
            links.append(np.concatenate([up[link][:, None], links[-1][row]], axis=1))
        starts, ends, links = starts[1:-1], ends[1:-1], links[1:-1]  # self (length 0) and the empty end dropped
        H = len(links)
        lengths = np.concatenate([np.full(x.shape[0], x.shape[1]) for x in links] or [np.zeros(0, np.int64)])
        padded = np.concatenate([np.pad(x, ((0, 0), (0, H - x.shape[1])), constant_values=-1) for x in links]
                                or [np.zeros((0, 0), np.int64)])
        start, end = (np.concatenate(x or [np.zeros(0, np.int64)]) for x in (starts, ends))
        order = np.lexsort((*padded.T[::-1], end, start))  # by node, ancestor, then links
        start, end, padded, lengths = start[order], end[order], padded[order], lengths[order]

        rev = np.where(padded >= 0, router._reverse[np.maximum(padded, 0)], -1)
        k = np.arange(H)[None, :]
        down = np.take_along_axis(rev, np.maximum(lengths[:, None] - 1 - k, 0), axis=1)
        down = np.where(k < lengths[:, None], down, -1)
        whole = ~((k < lengths[:, None]) & (down < 0)).any(axis=1)

        group = np.flatnonzero(np.r_[True, (start[1:] != start[:-1]) | (end[1:] != end[:-1])]) \
            if start.size else np.zeros(0, np.int64)
        up_count = np.diff(np.r_[group, start.size])
        down_count = np.add.reduceat(whole.astype(np.int64), group) if group.size else group
        node, anc = start[group], end[group]
        first = np.zeros(N, np.int64)
        count = np.bincount(node, minlength=N).astype(np.int64)
        first[:] = np.cumsum(count) - count
        hops = lengths[group]

        classes: dict[bytes, int] = {}
        node_class = np.full(N, -1, np.int64)
        class_node = []
        for n in np.flatnonzero(need).tolist():
            lo, hi = first[n], first[n] + count[n]
            key = b"|".join(x[lo:hi].tobytes() for x in (anc, hops, up_count, down_count))
            if key not in classes:
                classes[key] = len(class_node)
                class_node.append(n)
            node_class[n] = classes[key]
        return cls(num_nodes=N, first=first, count=count, node=node, anc=anc, hops=hops,
                   up_first=group, up_count=up_count, down_first=np.cumsum(down_count) - down_count,
                   down_count=down_count, up_links=padded, up_len=lengths, down_links=down[whole],
                   down_len=lengths[whole], node_class=node_class, class_node=np.array(class_node, np.int64))
