"""Collectives as phases of flows.

A collective over ``G`` groups of ``n`` ranks (all groups at once: the 128 DP groups of a job run
their all-reduce together) becomes a short sequence of :class:`Phase` s. A phase is a set of flows
that run at the same time; an algorithm's ``steps`` synchronous steps are identical in a ring or a
pipelined tree, so the phase carries each flow's bytes summed over its steps (fluid time is linear in
bytes, so the bandwidth term is exact) and the step count for the latency term
``steps x (route latency + per-step software latency)``.

Sizes follow nccl-tests: ``size`` is the buffer each rank contributes to an all-reduce or a
broadcast, the full output of an all-gather, the full input of a reduce-scatter, and each rank's
send buffer of an all-to-all. With per-rank bandwidth B on a non-blocking fabric the bandwidth terms
are the NCCL cost model: all-reduce (S/B) 2(n-1)/n, reduce-scatter and all-gather (S/B)(n-1)/n,
all-to-all (S/B)(n-1)/n, broadcast S/B.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "send_recv")
ALGORITHMS = {"all_reduce": ("ring", "tree", "hierarchical"), "reduce_scatter": ("ring",), "all_gather": ("ring",),
              "all_to_all": ("direct",), "broadcast": ("ring",), "send_recv": ("direct",)}


def bus_factor(kind: str, n: int) -> float:
    """nccl-tests' busbw / algbw factor for ``n`` ranks."""
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    if kind in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    if kind in ("broadcast", "send_recv"):
        return 1.0
    raise ValueError(f"kind: unknown collective {kind!r}; known: {', '.join(KINDS)}")


@dataclasses.dataclass(frozen=True, eq=False)
class Phase:
    """Flows that run at the same time.

    Attributes:
      src, dst: int64[F] GPU ranks.
      bytes: float64[F] bytes each flow carries over all the phase's steps.
      steps: synchronous steps (the latency term is paid once per step).
    """

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray
    steps: int

    @property
    def num_flows(self) -> int:
        return self.src.shape[0]


@dataclasses.dataclass(frozen=True, eq=False)
class Collective:
    """A collective over ``groups`` (int64[G, n] ranks), as phases run one after another."""

    kind: str
    algorithm: str
    groups: np.ndarray
    size: float
    phases: tuple[Phase, ...]

    @property
    def group_size(self) -> int:
        return self.groups.shape[1]

    def bus_bandwidth(self, seconds):
        """(algbw, busbw) in bytes/s for a run that took ``seconds``: algbw = size / time."""
        algbw = self.size / seconds
        return algbw, algbw * bus_factor(self.kind, self.group_size)


def _groups(groups) -> np.ndarray:
    g = np.asarray(groups, dtype=np.int64)
    if g.ndim == 1:
        g = g[None, :]
    if g.ndim != 2 or g.shape[1] < 1 or g.shape[0] < 1:
        raise ValueError(f"groups: expected int[G, n] ranks (G >= 1 groups of n >= 1), got shape {g.shape}")
    if (g < 0).any():
        raise ValueError(f"groups: ranks must be >= 0, got {int(g.min())}")
    flat = np.sort(g, axis=1)
    dup = np.flatnonzero((flat[:, 1:] == flat[:, :-1]).any(axis=1))
    if dup.size:
        raise ValueError(f"groups[{dup[0]}]: a rank appears twice in {g[dup[0]].tolist()}")
    return g


def _size(size) -> float:
    if not (isinstance(size, (int, float, np.floating, np.integer)) and math.isfinite(size) and size > 0):
        raise ValueError(f"size: must be > 0 and finite bytes, got {size!r}")
    return float(size)


def channel_orders(n: int, local_size: int, channels: int) -> np.ndarray:
    """int64[C, n] the ring order of each of ``channels`` NCCL-style channels over a group of ``n``
    members in blocks of ``local_size`` consecutive members (one scale-up domain each).

    Channel c enters block 0 at local member k_c = c x local_size // channels and visits the block from
    there, rotated; odd blocks are visited backwards, so every hop between blocks joins the same local
    index (the same rail: what NCCL's graph search and PXN achieve), one NIC of each block per channel;
    with an odd number of blocks the hop that closes the ring crosses rails (k - 1 to k). With
    ``channels == local_size`` every member's NIC sends and receives one channel between blocks.

    >>> channel_orders(4, 2, 2).tolist()   # two blocks of two: rails 1 and 0
    [[0, 1, 3, 2], [1, 0, 2, 3]]
    """
    d = int(local_size)
    if not (d >= 1 and n % d == 0):
        raise ValueError(f"local_size: must be a positive divisor of the group size {n}, got {local_size!r}")
    if not (isinstance(channels, (int, np.integer)) and 1 <= channels <= d):
        raise ValueError(f"channels: must be an integer in [1, local_size = {d}], got {channels!r}")
    orders = np.empty((channels, n), np.int64)
    for c in range(channels):
        k = c * d // channels
        up = (np.arange(d) + k) % d          # k, k+1, ..., k-1: exits at k-1
        down = (k - 1 - np.arange(d)) % d   # k-1, k-2, ..., k: enters at k-1, exits at k
        orders[c] = np.concatenate([b * d + (up if b % 2 == 0 else down) for b in range(n // d)])
    return orders


def _ring(g: np.ndarray, per_flow: float, steps: int, local_size: int = 1, channels: int = 1) -> Phase:
    """Each rank sends to the next in its group (wrapping round); with ``channels`` > 1, that many
    parallel rings (:func:`channel_orders`), each carrying 1 / channels of the bytes."""
    if g.shape[1] % local_size:
        raise ValueError(f"local_size: must be a positive divisor of the group size {g.shape[1]}, got {local_size!r}")
    if g.shape[1] < 2:
        return _empty()
    if channels == 1:
        return Phase(src=g.reshape(-1), dst=np.roll(g, -1, axis=1).reshape(-1),
                     bytes=np.full(g.size, per_flow), steps=steps)
    rings = np.concatenate([g[:, order] for order in channel_orders(g.shape[1], local_size, channels)])
    return Phase(src=rings.reshape(-1), dst=np.roll(rings, -1, axis=1).reshape(-1),
                 bytes=np.full(rings.size, per_flow / channels), steps=steps)


def _empty() -> Phase:
    z = np.zeros(0, np.int64)
    return Phase(src=z, dst=z, bytes=np.zeros(0), steps=0)


def _btree_parent(rank: int, n: int) -> int:
    """Parent of ``rank`` in NCCL's bit-based binary tree over 0..n-1 (root 0; odd ranks are leaves)."""
    bit = 1
    while bit < n and not bit & rank:
        bit <<= 1
    up = (rank ^ bit) | (bit << 1)
    return up if up < n else rank ^ bit


def double_binary_tree(n: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]], int]:
    """NCCL's two complementary binary trees over positions 0..n-1: (edges of tree 1, of tree 2, depth).

    Edges are (parent, child). Tree 1 is NCCL's bit-based tree, whose leaves are the odd positions;
    tree 2 is its mirror (n even) or its shift by one (n odd), so a position is interior in at most
    one tree (n even) and each tree carries half the data.
    """
    edges = [(_btree_parent(r, n), r) for r in range(1, n)]
    other = (lambda q: n - 1 - q) if n % 2 == 0 else (lambda q: (q + 1) % n)
    parent = dict((c, p) for p, c in edges)

    def level(r):
        return 0 if r == 0 else 1 + level(parent[r])

    depth = max((level(r) for r in range(n)), default=0)
    return edges, [(other(a), other(b)) for a, b in edges], max(depth, 1)


def all_reduce(groups, size: float, algorithm: str = "ring", *, local_size: int | None = None,
               channels: int = 1) -> Collective:
    """All-reduce of ``size`` bytes per rank in every group.

    Algorithms: ``ring`` (2(n-1) steps of size/n; with ``channels`` > 1, that many parallel rings over
    blocks of ``local_size`` members, :func:`channel_orders`), ``tree`` (NCCL double binary tree: half the data
    on each tree, reduce and broadcast pipelined, 2 x depth steps), ``hierarchical`` (ring
    reduce-scatter inside each block of ``local_size`` consecutive ranks, ring all-reduce of size /
    local_size across blocks over the rails, ring all-gather inside: three phases).
    """
    _channels_of(algorithm, channels)
    g, S = _groups(groups), _size(size)
    n = g.shape[1]
    if algorithm == "ring":
        phases = (_ring(g, 2 * (n - 1) / n * S, 2 * (n - 1), local_size or 1, channels),)
    elif algorithm == "tree":
        if n < 2:
            phases = (_empty(),)
        else:
            t1, t2, depth = double_binary_tree(n)
            pairs = np.array([(a, b) for a, b in t1 + t2] + [(b, a) for a, b in t1 + t2], dtype=np.int64)
            src, dst = g[:, pairs[:, 0]].reshape(-1), g[:, pairs[:, 1]].reshape(-1)
            phases = (Phase(src=src, dst=dst, bytes=np.full(src.size, S / 2), steps=2 * depth),)
    elif algorithm == "hierarchical":
        d = local_size
        if not (isinstance(d, (int, np.integer)) and d >= 1 and n % d == 0):
            raise ValueError(f"local_size: must be a positive divisor of the group size {n}, got {d!r}")
        m = n // d
        local = g.reshape(-1, d)  # blocks of consecutive ranks (one scale-up domain each)
        rails = g.reshape(g.shape[0], m, d).transpose(0, 2, 1).reshape(-1, m)  # same local index
        phases = (_ring(local, (d - 1) / d * S, d - 1), _ring(rails, 2 * (m - 1) / m * S / d, 2 * (m - 1)),
                  _ring(local, (d - 1) / d * S, d - 1))
    else:
        raise ValueError(f"algorithm: unknown all-reduce algorithm {algorithm!r}; known: "
                         f"{', '.join(ALGORITHMS['all_reduce'])}")
    return Collective("all_reduce", algorithm, g, S, phases)


def _channels_of(algorithm: str, channels: int) -> None:
    if channels != 1 and algorithm != "ring":
        raise ValueError(f"channels: parallel rings are for the ring algorithm, not {algorithm!r} (got {channels!r})")


def _single_phase(kind: str, algorithm: str, groups, size, phase_of) -> Collective:
    """A one-phase collective; ``phase_of(groups, size, n)`` builds its phase for n >= 2 ranks."""
    if algorithm not in ALGORITHMS[kind]:
        raise ValueError(f"algorithm: unknown {kind} algorithm {algorithm!r}; known: {', '.join(ALGORITHMS[kind])}")
    g, S = _groups(groups), _size(size)
    n = g.shape[1]
    return Collective(kind, algorithm, g, S, (phase_of(g, S, n) if n > 1 else _empty(),))


def _flows(src: np.ndarray, dst: np.ndarray, per_flow: float, steps: int) -> Phase:
    src, dst = src.reshape(-1), dst.reshape(-1)
    return Phase(src=src, dst=dst, bytes=np.full(src.size, per_flow), steps=steps)


def reduce_scatter(groups, size: float, algorithm: str = "ring", *, local_size: int = 1,
                   channels: int = 1) -> Collective:
    """Reduce-scatter of a ``size``-byte input per rank (each rank keeps size/n): n-1 ring steps
    (``channels`` parallel rings over blocks of ``local_size`` members, as :func:`all_reduce`)."""
    _channels_of(algorithm, channels)
    return _single_phase("reduce_scatter", algorithm, groups, size,
                         lambda g, S, n: _ring(g, (n - 1) / n * S, n - 1, local_size, channels))


def all_gather(groups, size: float, algorithm: str = "ring", *, local_size: int = 1, channels: int = 1) -> Collective:
    """All-gather into a ``size``-byte output per rank (each contributes size/n): n-1 ring steps
    (``channels`` parallel rings over blocks of ``local_size`` members, as :func:`all_reduce`)."""
    _channels_of(algorithm, channels)
    return _single_phase("all_gather", algorithm, groups, size,
                         lambda g, S, n: _ring(g, (n - 1) / n * S, n - 1, local_size, channels))


def _all_pairs(g: np.ndarray, S: float, n: int) -> Phase:
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    return _flows(g[:, i], g[:, j], S / n, 1)


def all_to_all(groups, size: float, algorithm: str = "direct") -> Collective:
    """All-to-all: each rank sends size/n to every other rank of its group, all at once (one step)."""
    return _single_phase("all_to_all", algorithm, groups, size, _all_pairs)


def broadcast(groups, size: float, algorithm: str = "ring") -> Collective:
    """Broadcast of ``size`` bytes from each group's first rank down a pipelined chain: n-1 steps."""
    return _single_phase("broadcast", algorithm, groups, size, lambda g, S, n: _flows(g[:, :-1], g[:, 1:], S, n - 1))


DIMENSION_ALGORITHMS = ("ring", "direct")


def per_dimension(kind: str, groups, size: float, dims, implementations=None) -> Collective:
    """A collective run dimension by dimension, as ASTRA-sim's system layer runs one on a multi-dimensional
    network: each group's n = prod(dims) ranks are laid out with dimension 0 fastest (rank index
    sum_d c_d x prod(dims[:d])); a reduce-scatter goes up the dimensions (dimension d on sub-groups of
    dims[d] ranks that differ only in c_d, each rank's data 1 / prod(dims[:d]) of the input), an
    all-gather comes down them, an all-reduce is the one then the other. ``implementations`` per
    dimension: ``ring`` (d - 1 steps to the next rank) or ``direct`` (one step, every pair at once);
    default ring. One phase per dimension and direction (a dimension of one rank has none).
    """
    if kind not in ("all_reduce", "reduce_scatter", "all_gather"):
        raise ValueError(f"kind: a per-dimension collective is all_reduce, reduce_scatter or all_gather, got {kind!r}")
    dims = tuple(int(d) for d in dims)
    impls = tuple(implementations or ("ring",) * len(dims))
    if not dims or min(dims) < 1 or len(impls) != len(dims):
        raise ValueError(f"dims: needs one positive size per dimension and one implementation each, got {dims} and "
                         f"{impls}")
    bad = [i for i in impls if i not in DIMENSION_ALGORITHMS]
    if bad:
        raise ValueError(f"implementations: unknown {bad[0]!r}; known: {', '.join(DIMENSION_ALGORITHMS)}")
    g, S = _groups(groups), _size(size)
    if g.shape[1] != int(np.prod(dims)):
        raise ValueError(f"dims: {' x '.join(map(str, dims))} = {int(np.prod(dims))} ranks, but the groups have "
                         f"{g.shape[1]}")
    grid = g.reshape((g.shape[0], *reversed(dims)))  # [G, d_{D-1}, ..., d_0]: dimension 0 varies fastest

    def phase(d: int) -> Phase:
        n = dims[d]
        sub = np.moveaxis(grid, grid.ndim - 1 - d, -1).reshape(-1, n)
        data = S / float(np.prod(dims[:d]))  # each rank's data when dimension d runs
        if impls[d] == "direct":
            return _all_pairs(sub, data, n)  # data / n to each other rank
        return _ring(sub, (n - 1) / n * data, n - 1)

    up = [phase(d) for d in range(len(dims)) if dims[d] > 1]
    phases = {"reduce_scatter": up, "all_gather": up[::-1], "all_reduce": up + up[::-1]}[kind]
    return Collective(kind, "per_dimension", g, S, tuple(phases) or (_empty(),))


def send_recv(src, dst, size: float) -> Collective:
    """Point-to-point sends ``src[i] -> dst[i]`` of ``size`` bytes each (pipeline stage boundaries)."""
    pairs = np.stack([np.asarray(src, np.int64), np.asarray(dst, np.int64)], axis=1)
    return _single_phase("send_recv", "direct", pairs, size, lambda g, S, n: _flows(g[:, 0], g[:, 1], S, 1))
