"""Chakra traces on a fabric: every rank's DAG runs at once, communication timed by the fluid model.

How a trace runs (``prepare_trace`` fixes the structure once; ``simulate_trace`` times it):

- A compute node takes its duration. A rank has one compute engine: its compute nodes run one at a
  time in a fixed order, by dependency level and then file order (ASTRA-sim runs them as they become
  ready; the two agree when a rank's compute nodes form a chain, as in flowmodel's export, and differ
  when a ready node waits behind an earlier-level one that waits for communication). Metadata and
  memory nodes take their ``duration_micros`` (usually 0) and do not occupy the engine. Communication
  overlaps compute.
- A collective starts when every member has reached it (collectives are matched across ranks by their
  order among the rank's collectives on that group); a send/recv pair, matched on (src, dst, tag) and
  order, starts when both sides are posted. A send or recv that names no peer (Chakra's generator
  writes such samples) has nothing to pair with and is a no-op. A barrier is a zero-time
  synchronisation of its members. REDUCE, GATHER and SCATTER are rejected by the reader.
- Communication is timed by the step-time model's rule, so that an exported training step reads back
  to its step time: nodes of one *contention class* share links, classes do not. A class is the
  nodes' ``flowmodel_phase`` attribute when the producer set one (flowmodel's export does: one per
  collective kind of the step, per pipeline link and direction, and the DP reduction), else (kind,
  bytes, group size). Within a class:
  * if communication follows any of its collectives, the class is timed once with one call on every
    group it runs on, all at once, and every call takes that time (all TP groups run their all-gather
    together, as in ``step_time``);
  * if nothing but compute follows them (a step's gradient reductions, a microbenchmark's one
    collective), each collective starts when its members reach it and their flows share links while
    they overlap in time (one fluid simulation with start times).
  The bandwidth term comes from the exact fluid model; the latency term is ``steps x (route latency +
  per-step latency)``, with the same :class:`Options` as the step time.

The timed DAG is a longest-path problem; it runs in NumPy (levels of the DAG, vectorised) behind a
custom VJP, so the makespan is differentiable in the network's capacity and latency like the step
time, in reverse mode (``jax.grad``, ``jax.vjp``; not ``jax.jvp``): the gradient follows the critical
path (a tie splits it evenly, as ``jnp.maximum`` does).

This is the step-time model's contention rule, not a packet-by-packet co-simulation: a static class
counts all its groups as overlapping even when the schedule staggers them (an upper bound on its
contention), and different classes never share links.
"""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import is_traced
from ..results import write_text
from ..routing import Router
from ..traffic import _collectives as coll
from ..traffic._chakra import COLL, COMM_TYPE_OF, COMP, RECV, SEND, Trace, TraceError, TraceWriter, write_comm_groups
from ._comm import (
    EXACT,
    Options,
    RoutedPhase,
    phase_finish,
    phase_time,
    residual_capacity,
    ring_channels,
    route_phase,
)
from ._schedule import one_f_one_b
from ._training import LAYER_KINDS, TrainingPlan, compute_times

# ASTRA-sim's collective implementations -> the closest flowmodel algorithm (bandwidth term first)
IMPLEMENTATIONS = {"ring": "ring", "direct": "ring", "oneRing": "ring", "doubleBinaryTree": "tree",
                   "halvingDoubling": "ring", "oneHalvingDoubling": "ring", "oneDirect": "ring"}
SYSTEM_KEYS = {"all-reduce-implementation": "all_reduce", "all-gather-implementation": "all_gather",
               "reduce-scatter-implementation": "reduce_scatter", "all-to-all-implementation": "all_to_all"}
_BUILDERS = {"all_reduce": coll.all_reduce, "all_gather": coll.all_gather, "reduce_scatter": coll.reduce_scatter,
             "all_to_all": coll.all_to_all, "broadcast": coll.broadcast}
_DEFAULT = {"all_reduce": "ring", "all_gather": "ring", "reduce_scatter": "ring", "all_to_all": "direct",
            "broadcast": "ring"}


@dataclasses.dataclass(frozen=True)
class TraceSystem:
    """What flowmodel takes from an ASTRA-sim ``system.json``: the algorithm per collective kind
    (``IMPLEMENTATIONS``), the per-step latency (``endpoint-delay``, ns), ``chunks`` (from
    ``preferred-dataset-splits``: a collective runs as that many chunks one after another, each paying
    the latency term, as ASTRA-sim does with one active chunk), the per-dimension implementations of
    the kinds that list several (``dimensions``: an all-reduce, reduce-scatter or all-gather over a
    whole multi-dimensional network runs dimension by dimension, ``traffic.per_dimension``), the ring
    channels (``channels``, from ``nccl-channels``, a key of flowmodel's own that its export writes:
    ``"auto"`` (None) runs NCCL-style channels where a group has several members per scale-up domain,
    as the step time does; an integer caps them; absent, 1: one ring, as ASTRA-sim runs it), the
    memory bandwidth of a reduction (``reduce_bandwidth``, bytes/s, from ``local-mem-bw`` in GB/s:
    ASTRA-sim charges every reduced byte three memory passes, two reads and a write, on the critical
    path of the step that received it), and the keys it does not model (``ignored``)."""

    algorithms: tuple[tuple[str, str], ...] = ()
    dimensions: tuple[tuple[str, tuple[str, ...]], ...] = ()  # kind -> per-dimension implementations
    step_latency: float | None = None
    chunks: int = 1
    ignored: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    channels: int | None = 1
    reduce_bandwidth: float | None = None


def read_system(path: str) -> TraceSystem:
    """Read an ASTRA-sim system file (see :class:`TraceSystem`)."""
    try:
        with open(path) as fh:
            spec = json.load(fh)
    except (OSError, json.JSONDecodeError) as e:
        raise TraceError(f"{path}: cannot read the system file ({e})") from None
    if not isinstance(spec, dict):
        raise TraceError(f"{path}: expected a JSON object")
    algorithms, notes, ignored, step_latency, chunks, dimensions, channels = {}, [], [], None, 1, {}, 1
    reduce_bandwidth = None
    for key, value in spec.items():
        if key in SYSTEM_KEYS:
            dims = value if isinstance(value, list) else [value]
            if not dims or any(d not in IMPLEMENTATIONS for d in dims):
                raise TraceError(f"{path}: {key}: unknown implementation in {value!r}; known: "
                                 f"{', '.join(IMPLEMENTATIONS)}")
            kind = SYSTEM_KEYS[key]
            chosen = IMPLEMENTATIONS[dims[0]]
            if kind == "all_to_all":
                chosen = "direct"  # flowmodel's one all-to-all: every pair at once
            elif kind in ("all_gather", "reduce_scatter"):
                chosen = "ring"
            algorithms[kind] = chosen
            if chosen != dims[0]:
                notes.append(f"{key}: {dims[0]!r} runs as flowmodel's {chosen!r}")
            if len(dims) > 1 and kind != "all_to_all":
                per = tuple("direct" if d in ("direct", "oneDirect") else "ring" for d in dims)
                dimensions[kind] = per
                notes.append(f"{key}: dimension by dimension ({', '.join(per)}) on a network of {len(dims)} "
                             f"dimensions, for a group of all its NPUs; else {dims[0]!r} over the whole group")
            elif len(dims) > 1:
                notes.append(f"{key}: one algorithm over the whole group ({dims[0]!r}, the first dimension's)")
        elif key == "preferred-dataset-splits":
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise TraceError(f"{path}: preferred-dataset-splits: must be an integer >= 1, got {value!r}")
            chunks = value
        elif key == "nccl-channels":
            if value != "auto" and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise TraceError(f"{path}: nccl-channels: must be \"auto\" or an integer >= 1, got {value!r}")
            channels = None if value == "auto" else value
        elif key == "endpoint-delay":
            if not (isinstance(value, (int, float)) and value >= 0):
                raise TraceError(f"{path}: endpoint-delay: must be >= 0 (ns), got {value!r}")
            step_latency = float(value) * 1e-9
        elif key == "local-mem-bw":
            if isinstance(value, bool) or not (isinstance(value, (int, float)) and np.isfinite(value) and value > 0):
                raise TraceError(f"{path}: local-mem-bw: must be > 0 (GB/s), got {value!r}")
            reduce_bandwidth = float(value) * 1e9  # ASTRA-sim divides bytes by it as bytes per ns
        else:
            ignored.append(key)
    return TraceSystem(tuple(sorted(algorithms.items())), tuple(sorted(dimensions.items())), step_latency, chunks,
                       tuple(ignored), tuple(notes), channels, reduce_bandwidth)


class _Dag:
    """A DAG of timed nodes in topological levels: ends by longest path, and the path's gradient."""

    def __init__(self, n: int, src: np.ndarray, dst: np.ndarray, const: np.ndarray, slot: np.ndarray, describe):
        self.n, self.const, self.slot = n, const, slot
        level = _levels(n, src, dst, describe)
        order = np.argsort(level, kind="stable")
        bounds = np.searchsorted(level[order], np.arange(level.max(initial=-1) + 2))
        rank_of = np.empty(n, np.int64)
        rank_of[order] = np.arange(n)
        e = np.lexsort((src, rank_of[dst]))  # predecessors grouped by node, nodes in level order
        src, dst = src[e], dst[e]
        ptr = np.searchsorted(rank_of[dst], np.arange(n + 1))  # edges of the node at each order position
        self.levels = []
        for w in range(len(bounds) - 1):
            a, b = bounds[w], bounds[w + 1]
            nodes = order[a:b]
            ea, eb = ptr[a], ptr[b]
            offsets = ptr[a:b] - ea
            self.levels.append((nodes, src[ea:eb], offsets, np.diff(np.append(offsets, eb - ea))))
        self.src, self.dst = src, dst

    def durations(self, d):
        return self.const + np.asarray(d, np.float64)[self.slot]

    def forward(self, d, *, starts: bool = False):
        """float64[n] end times (and, with ``starts``, each level's start times, the max of its
        predecessors' ends: the ties the gradient splits over are exact equalities with them)."""
        dur = self.durations(d)
        end = np.zeros(self.n)
        level_starts = []
        for w, (nodes, preds, offsets, _) in enumerate(self.levels):
            start = np.maximum.reduceat(end[preds], offsets) if w else np.zeros(nodes.size)
            end[nodes] = start + dur[nodes]
            level_starts.append(start)
        return (end, level_starts) if starts else end

    def backward(self, d, g):
        """float64[slots]: the gradient of ``<g, forward(d)>`` along the longest paths (a tie between
        predecessors splits the cotangent evenly), recomputed in float64 whatever ``d``'s dtype."""
        end, level_starts = self.forward(d, starts=True)
        g_end = np.array(g, dtype=np.float64)
        g_node = np.zeros(self.n)
        for w in range(len(self.levels) - 1, 0, -1):
            nodes, preds, offsets, counts = self.levels[w]
            ct = g_end[nodes]
            g_node[nodes] += ct
            tied = end[preds] == np.repeat(level_starts[w], counts)
            share = np.repeat(ct / np.add.reduceat(tied, offsets), counts)  # >= 1 tie: the max is one of them
            np.add.at(g_end, preds[tied], share[tied])
        if self.levels:
            g_node[self.levels[0][0]] += g_end[self.levels[0][0]]
        return np.bincount(self.slot, weights=g_node, minlength=np.asarray(d).shape[0])

    def critical_path(self, d, end) -> list[int]:
        """The chain of nodes that ends last, each after the predecessor that set its start."""
        order = np.argsort(self.dst, kind="stable")
        src, ptr = self.src[order], np.searchsorted(self.dst[order], np.arange(self.n + 1))
        node = int(np.argmax(end))
        path = [node]
        while ptr[node] < ptr[node + 1]:
            preds = src[ptr[node]:ptr[node + 1]]
            node = int(preds[np.argmax(end[preds])])
            path.append(node)
        return path[::-1]


def _levels(n: int, src: np.ndarray, dst: np.ndarray, describe) -> np.ndarray:
    """int[n]: longest-path level of every node (Kahn's algorithm, a frontier at a time)."""
    indeg = np.bincount(dst, minlength=n)
    order = np.argsort(src, kind="stable")
    succ, ptr = dst[order], np.searchsorted(src[order], np.arange(n + 1))
    level = np.full(n, -1, np.int64)
    frontier, w = np.flatnonzero(indeg == 0), 0
    while frontier.size:
        level[frontier] = w
        starts, lens = ptr[frontier], ptr[frontier + 1] - ptr[frontier]
        total = int(lens.sum())
        if total:
            idx = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(total)
            targets, counts = np.unique(succ[idx], return_counts=True)
            indeg[targets] -= counts
            frontier = targets[indeg[targets] == 0]
        else:
            frontier = frontier[:0]
        w += 1
    stuck = np.flatnonzero(level < 0)
    if stuck.size:
        raise TraceError(f"the trace deadlocks: {describe(int(stuck[0]))} waits for a node that waits for it "
                         f"({stuck.size} nodes never run)")
    return level


@dataclasses.dataclass(frozen=True, eq=False)
class _Class:
    """Communication timed together: static (one duration for every call) or dynamic (start times)."""

    name: str
    phases: tuple[RoutedPhase, ...]
    dynamic: bool
    instance_of_flow: np.ndarray | None = None  # dynamic: flow -> instance (0..I-1)
    nodes: np.ndarray | None = None  # dynamic: DAG node of each instance
    size_of_flow: np.ndarray | None = None  # dynamic: flow -> its group size's index (own latency term)
    size_steps: np.ndarray | None = None  # dynamic: the step count of each group size
    reduce_s: float | np.ndarray = 0.0  # memory time of its reductions (static: per call; dynamic: per instance)


@dataclasses.dataclass(frozen=True, eq=False)
class PreparedTrace:
    """A trace matched, built into one DAG and routed on a fabric; evaluate with ``simulate_trace``.

    Attributes:
      trace: what was read.  gpus: int[R] the GPU each trace rank runs on.
      classes: the contention classes (static ones first: slot c is static class c; dynamic instances
        follow, then one zero slot).
      dag_of: int[total trace nodes] the DAG node of every trace node (ranks one after another);
        node_rank: int[total] its rank.  descriptions: DAG node -> what it is (for the critical path).
    """

    trace: Trace
    gpus: np.ndarray
    classes: tuple[_Class, ...]
    num_static: int
    num_dynamic: int
    dag: _Dag
    dag_of: np.ndarray
    node_rank: np.ndarray
    node_kind: np.ndarray  # per DAG node: 0 compute, 1 collective, 2 send/recv, 3 other
    describe: object
    ends: object  # the DAG's longest-path end times as a differentiable JAX function of the slot durations


@dataclasses.dataclass(frozen=True)
class TraceResult:
    """``makespan`` (s), ``finish`` float[R] each rank's last end, ``start`` / ``end`` float[total]
    every trace node's (ranks one after another, file order), ``critical_path``: the chain of nodes
    that sets the makespan (dicts: rank, node id, name, kind, start_s, end_s; a collective is shown on
    the member whose rank the path runs through), ``class_times``: one call of each static class."""

    makespan: object
    finish: object
    start: object
    end: object
    critical_path: list
    class_times: object = None  # float[C] one call of each static contention class (trace_class_times)


def prepare_trace(trace: Trace, router: Router, *, gpus=None, policy: str = "ecmp", seed: int = 0, qps: int = 4,
                  algorithms: dict | None = None, chunks: int = 1, dims=None,
                  dimensions: dict | None = None, channels: int | None = 1,
                  reduce_bandwidth: float | None = None) -> PreparedTrace:
    """Match a trace's communication, build its DAG and route every contention class on ``router``'s
    fabric. ``gpus``: the GPU of each trace rank (default: rank r on GPU r); ``algorithms``: collective
    kind -> algorithm (default ring; all-to-all direct); ``chunks``: collectives run as that many
    chunks one after another (the bandwidth term is unchanged, the latency term is paid per chunk).
    ``dims`` (an ASTRA-sim network's NPUs per dimension) and ``dimensions`` (kind -> one implementation
    per dimension, ``TraceSystem.dimensions``): a collective of those kinds over a group of all
    prod(dims) GPUs runs dimension by dimension (``traffic.per_dimension``). ``channels``: ring
    collectives run as one ring (1, ASTRA-sim's), or NCCL-style channels where a group has several
    members per scale-up domain (None: one per member, ``ring_channels``; an integer caps them).
    ``reduce_bandwidth`` (bytes/s; None: free): an all-reduce or reduce-scatter of S bytes over n ranks
    reduces (1 - 1/n) S bytes on every rank, whatever the algorithm or dimensions, at three memory
    passes a byte (``TraceSystem.reduce_bandwidth``), added to its time."""
    R = trace.num_ranks
    recorded = gpus is None and trace.gpus is not None
    if gpus is None:  # the GPUs the producer recorded (flowmodel's export does), else rank r on GPU r
        gpus = trace.gpus if recorded else np.arange(R)
    gpus = np.asarray(gpus, np.int64)
    if gpus.shape != (R,) or len(set(gpus.tolist())) != R:
        raise TraceError(f"gpus: needs {R} distinct GPUs (one per trace rank), got {gpus.shape[0]}")
    G = router.info.num_gpus
    if recorded and gpus.max(initial=0) >= G:
        raise TraceError(f"{trace.prefix}: the trace records its ranks' GPUs (flowmodel_gpu) up to GPU "
                         f"{int(gpus.max())}, but the fabric has {G} GPUs; pass the GPUs to run it on")
    if gpus.max(initial=0) >= G or gpus.min(initial=0) < 0:
        raise TraceError(f"{trace.prefix}: the trace has {R} ranks, but the fabric has {G} GPUs")
    if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)) or chunks < 1:
        raise TraceError(f"chunks: must be an integer >= 1, got {chunks!r}")
    if reduce_bandwidth is not None and not (isinstance(reduce_bandwidth, (int, float)) and not isinstance(
            reduce_bandwidth, bool) and np.isfinite(reduce_bandwidth) and reduce_bandwidth > 0):
        raise TraceError(f"reduce_bandwidth: must be > 0 bytes/s (or None), got {reduce_bandwidth!r}")

    def reduce_s(kind, nbytes, n):
        if reduce_bandwidth is None or kind not in ("all_reduce", "reduce_scatter"):
            return 0.0
        return 3.0 * (1.0 - 1.0 / n) * float(nbytes) / reduce_bandwidth
    algs = dict(_DEFAULT, **(algorithms or {}))
    for kind, alg in algs.items():
        if kind not in coll.ALGORITHMS or alg not in coll.ALGORITHMS[kind]:
            raise TraceError(f"algorithms.{kind}: unknown algorithm {alg!r}")
    if channels is not None and (isinstance(channels, bool) or not isinstance(channels, (int, np.integer))
                                 or channels < 1):
        raise TraceError(f"channels: must be None (auto) or an integer >= 1, got {channels!r}")
    rings = None if channels == 1 else (lambda g: ring_channels(router.info, g, channels))
    if dims is not None and dimensions:  # per kind: (dims, implementations) where the system names each dimension
        algs["per_dimension"] = {kind: (tuple(dims), tuple(impls)) for kind, impls in dict(dimensions).items()
                                 if len(impls) == len(dims)}

    ranks = trace.ranks
    offsets = np.concatenate([[0], np.cumsum([r.num_nodes for r in ranks])])
    T = int(offsets[-1])
    if T == 0:
        raise TraceError(f"{trace.prefix}: the trace has no nodes")
    rank_of = np.repeat(np.arange(R), np.diff(offsets))
    cat = lambda name: np.concatenate([getattr(r, name) for r in ranks])  # noqa: E731
    types, size, group, peer, tag = cat("types"), cat("size"), cat("group"), cat("peer"), cat("tag")
    duration = cat("duration")
    comm = [c for r in ranks for c in r.comm]
    label = [c for r in ranks for c in r.label]
    pos = np.arange(T) - offsets[rank_of]

    def where(g: int) -> str:
        r = int(rank_of[g])
        return f"{ranks[r].path}: rank {r}, node {int(ranks[r].ids[pos[g]])}"

    group_members = [np.array(m, np.int64) for m in trace.groups] + [np.arange(R)]  # last: every rank
    dag_of = np.full(T, -1, np.int64)
    n_dag = 0
    inst_members: list[np.ndarray] = []  # per comm instance: its trace nodes
    inst_key: list[tuple] = []  # (label, kind, size, members tuple)
    inst_seq: list[int] = []  # the instance's call number on its group (or send/recv pair)

    # collectives: the k-th collective of a rank on a group is that group's k-th
    c = np.flatnonzero(types == COLL)
    gid = np.where(group[c] < 0, len(trace.groups), group[c])
    o = np.lexsort((pos[c], rank_of[c], gid))
    c, gid = c[o], gid[o]
    run = np.concatenate([[True], (gid[1:] != gid[:-1]) | (rank_of[c][1:] != rank_of[c][:-1])])
    first = np.maximum.accumulate(np.where(run, np.arange(c.size), 0))
    k = np.arange(c.size) - first
    for g in np.unique(gid):
        sel = gid == g
        members = group_members[g]
        counts = np.bincount(rank_of[c[sel]], minlength=R)[members]
        if (counts != counts[0]).any():
            lo, hi = int(members[np.argmin(counts)]), int(members[np.argmax(counts)])
            extra = c[sel][(rank_of[c[sel]] == hi) & (k[sel] == counts.min())][0]
            raise TraceError(f"{where(extra)}: collective {int(counts.min())} on group {_short(members)} is never "
                             f"reached by rank {lo} ({int(counts.min())} collectives on that group there, "
                             f"{int(counts.max())} on rank {hi}): it would hang")
    inst = np.unique(np.stack([gid, k], 1), axis=0, return_inverse=True)[1].reshape(-1)
    o = np.argsort(inst, kind="stable")
    bounds = np.searchsorted(inst[o], np.arange(inst.max(initial=-1) + 2))
    for i in range(len(bounds) - 1):
        nodes = c[o[bounds[i]:bounds[i + 1]]]
        ref = nodes[0]
        for other in nodes[1:]:
            if comm[other] != comm[ref] or size[other] != size[ref]:
                raise TraceError(f"{where(other)}: this collective is {comm[other]} of {size[other]:.0f} bytes, but "
                                 f"{where(ref)} (the same collective) is {comm[ref]} of {size[ref]:.0f} bytes")
        members = group_members[gid[o[bounds[i]]]]
        inst_members.append(nodes)
        inst_key.append((label[ref], comm[ref], float(size[ref]), tuple(members.tolist())))
        inst_seq.append(int(k[o[bounds[i]]]))

    # send / recv pairs: (src, dst, tag) and order
    sends: dict[tuple, list[int]] = {}
    recvs: dict[tuple, list[int]] = {}
    for g in np.flatnonzero((types == SEND) | (types == RECV)).tolist():
        if peer[g] < 0:  # no peer named: a zero-time node of its own
            continue
        r = int(rank_of[g])
        if types[g] == SEND:
            sends.setdefault((r, int(peer[g]), int(tag[g])), []).append(g)
        else:
            recvs.setdefault((int(peer[g]), r, int(tag[g])), []).append(g)
    for key in sends.keys() | recvs.keys():
        s, v = sends.get(key, []), recvs.get(key, [])
        if len(s) != len(v):
            lonely = (s if len(s) > len(v) else v)[min(len(s), len(v))]
            side = "recv" if len(s) > len(v) else "send"
            raise TraceError(f"{where(lonely)}: no matching {side} for (src {key[0]}, dst {key[1]}, tag {key[2]}): "
                             f"{len(s)} sends, {len(v)} recvs; it would hang")
        for j, (a, b) in enumerate(zip(s, v)):
            if size[a] != size[b]:
                raise TraceError(f"{where(b)}: receives {size[b]:.0f} bytes, but {where(a)} sends {size[a]:.0f}")
            inst_members.append(np.array([a, b]))
            inst_key.append((label[a] or label[b], "send_recv", float(size[a]), (key[0], key[1])))
            inst_seq.append(j)

    # DAG nodes: one per comm instance, one per other trace node
    kind_of_dag = []
    for nodes, key in zip(inst_members, inst_key):
        dag_of[nodes] = n_dag
        kind_of_dag.append(2 if key[1] == "send_recv" else 1)
        n_dag += 1
    rest = np.flatnonzero(dag_of < 0)
    dag_of[rest] = n_dag + np.arange(rest.size)
    kind_of_dag = np.concatenate([np.array(kind_of_dag, np.int8), np.where(types[rest] == COMP, 0, 3).astype(np.int8)])
    n_dag += rest.size
    const = np.zeros(n_dag)
    const[dag_of[rest]] = duration[rest]

    # edges: dependencies, mapped to DAG nodes
    src, dst = [], []
    for r, rt in enumerate(ranks):
        counts = np.diff(rt.dep_ptr)
        src.append(dag_of[offsets[r] + rt.deps])
        dst.append(dag_of[offsets[r] + np.repeat(np.arange(rt.num_nodes), counts)])
    src, dst = np.concatenate(src), np.concatenate(dst)
    describe = _describer(trace, dag_of, rank_of, pos, n_dag)
    if (src == dst).any():
        raise TraceError(f"the trace deadlocks: {describe(int(src[src == dst][0]))} depends on itself")
    edges = np.unique(np.stack([src, dst], 1), axis=0)
    src, dst = edges[:, 0], edges[:, 1]
    # one compute engine per rank: its compute nodes in dependency order (ties: file order)
    level = _levels(n_dag, src, dst, describe)
    comp = np.flatnonzero(types == COMP)
    o = np.lexsort((pos[comp], level[dag_of[comp]], rank_of[comp]))
    comp = comp[o]
    same = rank_of[comp][1:] == rank_of[comp][:-1]
    src = np.concatenate([src, dag_of[comp][:-1][same]])
    dst = np.concatenate([dst, dag_of[comp][1:][same]])
    edges = np.unique(np.stack([src, dst], 1), axis=0)  # a dependency that is also the engine's order counts once
    src, dst = edges[:, 0], edges[:, 1]

    # contention classes
    static: dict[tuple, list[int]] = {}
    for i, key in enumerate(inst_key):
        static.setdefault((key[0], key[1], key[2], len(key[3])), []).append(i)
    slot = np.empty(n_dag, np.int64)
    is_comm = (kind_of_dag == 1) | (kind_of_dag == 2)
    followed = _followed_by_comm(n_dag, src, dst, is_comm, describe)
    classes, dynamic_groups = [], {}
    for (lab, kind, nbytes, n), members in static.items():
        name = _class_name(lab, kind, nbytes, n)
        timed = kind != "barrier" and n > 1
        single = timed and (kind == "send_recv" or len(_build(kind, algs, np.arange(n)[None], nbytes).phases) == 1)
        if timed and single and not followed[members].any():  # a labelled class may mix group sizes
            dynamic_groups.setdefault((lab, kind, None if lab else n), []).extend(members)
            continue
        if not timed:
            slot[members] = -1
            continue
        if kind == "send_recv":
            pairs = np.unique(np.array([inst_key[i][3] for i in members]), axis=0)
            collective = coll.send_recv(gpus[pairs[:, 0]], gpus[pairs[:, 1]], nbytes)
        else:
            groups = np.unique(np.array([inst_key[i][3] for i in members]), axis=0)
            collective = _build(kind, algs, gpus[groups], nbytes, rings)
        phases = tuple(route_phase(_chunked(ph, chunks), router, policy, seed=seed, qps=qps)
                       for ph in collective.phases)
        slot[members] = len(classes)
        classes.append(_Class(name, phases, False, reduce_s=reduce_s(kind, nbytes, n)))
    num_static = len(classes)
    num_dynamic = 0
    for (lab, kind, n), members in dynamic_groups.items():
        members = sorted(members, key=lambda i: (inst_seq[i], i))  # calls in order, then groups
        srcs, dsts, sizes, flow_inst, flow_size, steps, reduce = [], [], [], [], [], {}, []
        for j, i in enumerate(members):
            _, _, nbytes, who = inst_key[i]
            who = np.array(who, np.int64)
            if kind == "send_recv":
                ph = coll.send_recv(gpus[who[:1]], gpus[who[1:]], nbytes).phases[0]
            else:
                ph = _build(kind, algs, gpus[who][None], nbytes, rings).phases[0]
            srcs.append(ph.src)
            dsts.append(ph.dst)
            sizes.append(ph.bytes)
            flow_inst.append(np.full(ph.num_flows, j))
            reduce.append(reduce_s(kind, nbytes, who.size))
            flow_size.append(np.full(ph.num_flows, steps.setdefault(who.size, (len(steps), ph.steps))[0]))
        size_steps = np.array([st for _, st in steps.values()], np.int64) * chunks
        merged = coll.Phase(np.concatenate(srcs), np.concatenate(dsts), np.concatenate(sizes), int(size_steps.max()))
        rp = route_phase(merged, router, policy, seed=seed, qps=qps)
        nodes = np.array(members, np.int64)  # instance i is DAG node i
        slot[nodes] = num_static + num_dynamic + np.arange(len(members))
        num_dynamic += len(members)
        name = _class_name(lab, kind, None, n)
        classes.append(_Class(name, (rp,), True, np.concatenate(flow_inst), nodes, np.concatenate(flow_size),
                              size_steps, np.array(reduce)))
    zero = num_static + num_dynamic
    slot[slot < 0] = zero
    slot[len(inst_key):] = zero
    dag = _Dag(n_dag, src, dst, const, slot, describe)
    return PreparedTrace(trace, gpus, tuple(classes), num_static, num_dynamic, dag, dag_of, rank_of, kind_of_dag,
                         describe, _dag_function(dag))


def _chunked(ph: coll.Phase, chunks: int) -> coll.Phase:
    return ph if chunks == 1 else dataclasses.replace(ph, steps=ph.steps * chunks)


def _build(kind: str, algs: dict, groups: np.ndarray, nbytes: float, rings=None):
    """The collective of ``kind`` over ``groups``: dimension by dimension where ``algs["per_dimension"]``
    names the kind and a group holds every NPU of the network, else ``algs[kind]`` over the group, a
    ring with the channels ``rings(groups)`` gives (``(local_size, channels)``; None: one ring)."""
    dims, impls = algs.get("per_dimension", {}).get(kind, ((), ()))
    if dims and groups.shape[1] == int(np.prod(dims)):
        return coll.per_dimension(kind, groups, nbytes, dims, impls)
    if rings is not None and kind in ("all_reduce", "all_gather", "reduce_scatter") and algs[kind] == "ring":
        local_size, channels = rings(groups)
        return _BUILDERS[kind](groups, nbytes, "ring", local_size=local_size, channels=channels)
    return _BUILDERS[kind](groups, nbytes, algs[kind])


def _class_name(label, kind, nbytes, n) -> str:
    if label:
        return label
    return f"{kind} x{n}" + ("" if nbytes is None else f" {nbytes:.0f}B")


def _short(members: np.ndarray) -> str:
    m = members.tolist()
    return str(m) if len(m) <= 8 else f"[{m[0]}, {m[1]}, ..., {m[-1]}] ({len(m)} ranks)"


def _describer(trace: Trace, dag_of, rank_of, pos, n_dag):
    first = np.full(n_dag, -1, np.int64)
    first[dag_of[::-1]] = np.arange(dag_of.size)[::-1]

    def describe(node: int) -> str:
        g = int(first[node])
        r = int(rank_of[g])
        rt = trace.ranks[r]
        return f"{rt.path}: rank {r}, node {int(rt.ids[pos[g]])} ({rt.names[pos[g]] or 'unnamed'})"

    describe.first = first
    return describe


def _followed_by_comm(n, src, dst, is_comm, describe) -> np.ndarray:
    """bool[n]: whether any communication node is reachable from each node."""
    level = _levels(n, src, dst, describe)
    flag = np.zeros(n, bool)
    order = np.argsort(-level[dst], kind="stable")  # edges into later levels first
    s, d = src[order], dst[order]
    lv = level[d]
    cuts = np.flatnonzero(np.diff(lv)) + 1
    for a, b in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [lv.size]])):
        reach = is_comm[d[a:b]] | flag[d[a:b]]
        flag[s[a:b][reach]] = True
    return flag


def _dag_function(dag: _Dag):
    @jax.custom_vjp
    def ends(d):
        return jax.pure_callback(lambda x: dag.forward(x).astype(x.dtype), jax.ShapeDtypeStruct((dag.n,), d.dtype),
                                 d, vmap_method="sequential")

    def fwd(d):
        return ends(d), d

    def bwd(d, g):
        grad = jax.pure_callback(lambda x, y: dag.backward(x, y).astype(x.dtype),
                                 jax.ShapeDtypeStruct(d.shape, d.dtype), d, g, vmap_method="sequential")
        return (grad,)

    ends.defvjp(fwd, bwd)
    return ends


def trace_class_times(prepared: PreparedTrace, capacity, latency, options: Options = EXACT, *, background=None):
    """float[C]: the time of one call of each static contention class (``prepared.classes[:C]``), all its
    groups at once: bandwidth term plus latency term, summed over the collective's phases, plus its
    reductions' memory time (``prepare_trace``'s ``reduce_bandwidth``)."""
    options = options.exact()
    capacity = jnp.asarray(residual_capacity(capacity, background))
    latency = jnp.asarray(latency)
    times = [sum((phase_time(rp, capacity, latency, options) for rp in c.phases), jnp.zeros((), capacity.dtype))
             + c.reduce_s for c in prepared.classes[:prepared.num_static]]
    return jnp.stack(times).astype(capacity.dtype) if times else jnp.zeros(0, capacity.dtype)


def simulate_trace(prepared: PreparedTrace, capacity, latency, options: Options = EXACT, *, background=None,
                   critical_path: bool = True) -> TraceResult:
    """Run a prepared trace on a fabric's ``capacity`` / ``latency`` (float[L]; differentiable: the
    makespan and every time is a JAX value). ``background``: float[L] bytes/s taken first by constant
    classes (a scenario's inference and background load)."""
    options = options.exact()
    capacity = jnp.asarray(residual_capacity(capacity, background))
    latency = jnp.asarray(latency)
    dtype = capacity.dtype
    static = trace_class_times(prepared, capacity, latency, options)
    d = jnp.concatenate([static, jnp.zeros(prepared.num_dynamic + 1, dtype)])
    end = prepared.ends(d)
    if prepared.num_dynamic:
        durations = []
        for c in prepared.classes[prepared.num_static:]:
            starts = end[c.nodes]  # a dynamic instance has duration 0 in the first pass
            finish = phase_finish(c.phases[0], capacity, latency, starts[c.instance_of_flow], options,
                                  collective_of_flow=c.size_of_flow, collective_steps=c.size_steps)
            last = jax.ops.segment_max(finish, jnp.asarray(c.instance_of_flow), num_segments=c.nodes.size)
            durations.append(last - starts + jnp.asarray(c.reduce_s, dtype))
        d = d.at[prepared.num_static:prepared.num_static + prepared.num_dynamic].set(jnp.concatenate(durations))
        end = prepared.ends(d)
    node_end = end[prepared.dag_of]
    node_dur = jnp.asarray(prepared.dag.const)[prepared.dag_of] + d[prepared.dag.slot[prepared.dag_of]]
    ranks = jnp.asarray(prepared.node_rank)
    finish = jax.ops.segment_max(node_end, ranks, num_segments=prepared.trace.num_ranks)
    has_nodes = np.bincount(prepared.node_rank, minlength=prepared.trace.num_ranks) > 0
    finish = jnp.where(has_nodes, finish, 0.0)  # a rank with no nodes is done at 0
    path = []
    if critical_path and not is_traced(end):
        path = _critical(prepared, np.asarray(d), np.asarray(end))
    return TraceResult(jnp.max(end), finish, node_end - node_dur, node_end, path, static)


TRACE_NODE_KINDS = ("compute", "collective", "send_recv", "other")  # PreparedTrace.node_kind codes


def _critical(prepared: PreparedTrace, d, end) -> list:
    dag = prepared.dag
    dur = dag.durations(d)
    members = np.argsort(prepared.dag_of, kind="stable")  # trace nodes grouped by DAG node
    bounds = np.searchsorted(prepared.dag_of[members], np.arange(dag.n + 1))
    offsets = np.concatenate([[0], np.cumsum([rt.num_nodes for rt in prepared.trace.ranks])])
    path = dag.critical_path(d, end)
    out, rank = [], None
    for i, node in enumerate(path):
        who = members[bounds[node]:bounds[node + 1]]
        ranks = prepared.node_rank[who]
        if rank is None or rank not in ranks:  # keep to the rank the path runs on, else the next node's rank
            after = path[i + 1] if i + 1 < len(path) else None
            later = prepared.node_rank[members[bounds[after]:bounds[after + 1]]] if after is not None else ranks
            common = np.intersect1d(ranks, later)
            rank = int(common[0]) if common.size else int(ranks[0])
        g = int(who[np.flatnonzero(ranks == rank)[0]])
        rt = prepared.trace.ranks[rank]
        p = g - int(offsets[rank])
        out.append({"rank": rank, "node": int(rt.ids[p]), "name": rt.names[p],
                    "kind": TRACE_NODE_KINDS[prepared.node_kind[node]], "start_s": float(end[node] - dur[node]),
                    "end_s": float(end[node])})
    return out


def trace_makespan(prepared: PreparedTrace, capacity, latency, options: Options = EXACT, *, background=None):
    """The trace's makespan (s), differentiable in ``capacity`` and ``latency`` (jit/vmap/grad safe)."""
    return simulate_trace(prepared, capacity, latency, options, background=background, critical_path=False).makespan


def _remove_stale(prefix: str, ranks: int) -> None:
    """Rank files of an earlier, larger trace under the same prefix would be read as part of this one."""
    r = ranks
    while os.path.exists(f"{prefix}.{r}.et"):
        os.remove(f"{prefix}.{r}.et")
        r += 1


def export_training(plan: TrainingPlan, prefix: str) -> dict:
    """Write a planned training step as a Chakra trace, one file per rank of the job (trace rank i is the
    job's i-th GPU), with ``<prefix>.comm_group.json`` and ``<prefix>.system.json`` (its DP algorithm).

    Per micro-batch and virtual stage, every layer is a compute node followed by the layer's blocking
    collectives (``Training.layer_calls``: TP all-gathers and reduce-scatters; CP; a MoE layer's
    all-to-alls and expert-TP gather and scatter; under full recomputation the backward repeats the
    forward's); the output head is a compute node on the last stage; activations and gradients cross
    stages as send/recv pairs; each stage's gradient all-reduces (dense over DP x CP, routed experts
    over their expert-data-parallel group) follow its last backward. Communication carries
    ``flowmodel_phase`` (its contention class in ``step_time``), so reading the trace back on the same
    fabric gives the step time. Returns a summary (ranks, nodes, files).
    """
    job, par, model = plan.job, plan.job.parallelism, plan.job.model
    grid = plan.grid  # [dp, pp, cp, tp] GPU ranks
    gpus = np.sort(grid.reshape(-1))
    index = {int(g): i for i, g in enumerate(gpus.tolist())}
    rank_of = np.vectorize(index.__getitem__)(grid) if grid.size else grid
    p, v, m = par.pp, par.virtual_stages, job.micro_batches
    dense_f, moe_f, head_f = compute_times(job)  # per pipeline rank, at its own accelerator
    folder = os.path.dirname(prefix)
    if folder:
        os.makedirs(folder, exist_ok=True)

    groups: dict[str, list[int]] = {}

    def group(name, members):
        groups.setdefault(name, [int(x) for x in members])
        return name

    def epg(d, s, c, t):
        base = d - d % par.ep
        return group(f"ep.{base}.{s}.{c}.{t}", rank_of[base:base + par.ep, s, c, t])

    group_of = {"tp": lambda d, s, c, t: group(f"tp.{d}.{s}.{c}", rank_of[d, s, c]),
                "cp": lambda d, s, c, t: group(f"cp.{d}.{s}.{t}", rank_of[d, s, :, t]), "ep": epg}
    sizes = job.layer_traffic()

    def ops(moe: bool, backward: bool) -> list:  # (kind, label, bytes, group of a (d, s, c, t)), one layer
        calls = job.layer_calls(moe, backward=backward)
        return [(label.split("_", 1)[1], label, sizes[label], group_of[LAYER_KINDS[label]])
                for label, n in calls.items() for _ in range(n)]

    layer_comm = {}
    for moe in (False, True):  # a backward first repeats the forward's collectives under full recomputation
        layer_comm[(moe, "F")] = ops(moe, False)
        layer_comm[(moe, "B")] = (ops(moe, False) if job.recomputes else []) + ops(moe, True)
    first = np.concatenate([[0], np.cumsum(plan.layers)[:-1]])
    is_moe = [model.is_moe(np.arange(a, a + n)).tolist() for a, n in zip(first, plan.layers)]
    layer_time = {(False, "F"): dense_f, (True, "F"): moe_f,
                  (False, "B"): (2 + job.recomputes) * dense_f, (True, "B"): (2 + job.recomputes) * moe_f}
    shard = job.micro_batch * (model.seq_len // par.cp) * model.hidden * model.dtype_bytes / par.tp
    dense_dp, expert_dp = job.dp_gradients()
    dp_sizes = {kind: (dense_dp, expert_dp)[kind == "dp_expert_all_reduce"] for kind in plan.dp_kinds}

    implementation = {"tree": "doubleBinaryTree"}.get(job.algorithm, "ring")  # ASTRA-sim's name for it
    schedule = one_f_one_b(p, m, v)
    nodes = 0
    coords = sorted((int(rank_of[d, s, c, t]), (d, s, c, t)) for d in range(par.dp) for s in range(p)
                    for c in range(par.cp) for t in range(par.tp))
    written, w = [], None
    try:
        for r, (d, s, c, t) in coords:
            w = TraceWriter(f"{prefix}.{r}.et", {"producer": "flowmodel", "job": job.name,
                                                 "flowmodel_gpu": int(gpus[r])})
            nodes += _write_rank(w, r, d, s, c, t, schedule[s], rank_of, plan, groups, group, layer_comm, is_moe,
                                 {key: f[s] for key, f in layer_time.items()}, shard, dp_sizes, head_f[s])
            w.close()
            written.append(w.path)
    except BaseException:  # a partial trace would read as a smaller one: leave none
        if w is not None:
            w.discard()
        for path in written:
            os.remove(path)
        raise
    write_comm_groups(prefix, groups)
    _remove_stale(prefix, len(coords))
    write_text(f"{prefix}.system.json", json.dumps({
        "all-reduce-implementation": [implementation], "all-gather-implementation": ["ring"],
        "reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["direct"],
        "nccl-channels": plan.job.channels or "auto"}, indent=2))
    return {"ranks": len(coords), "nodes": nodes, "gpus": gpus.tolist(), "prefix": prefix}


def _write_rank(w, r, d, s, c, t, ops, rank_of, plan, groups, group, layer_comm, is_moe, layer_time, shard,
                dp_sizes, head_f) -> int:
    """One rank's nodes of an exported training step (see ``export_training``); returns their count."""
    par = plan.job.parallelism
    p, v = par.pp, par.virtual_stages
    V = p * v
    last_of = {}  # (kind, mb, stage) -> the op's last node
    last_backward = {}  # stage -> its last backward's last node
    last = None
    for kind, mb, k in ops:
        deps = [] if last is None else [last]
        incoming = k > 0 if kind == "F" else k < V - 1
        if incoming:
            prev_s = (k - 1) % p if kind == "F" else (k + 1) % p
            peer = int(rank_of[d, prev_s, c, t])
            link = (k - 1) % p if kind == "F" else k % p
            lab = f"pp_forward[{link}]" if kind == "F" else f"pp_backward[{link}]"
            tag = 2 * (mb * V + k) + (kind == "B")
            deps.append(w.add(RECV, f"{kind} mb{mb} stage{k} recv", attrs={
                "comm_src": peer, "comm_dst": r, "comm_tag": tag, "comm_size": int(round(shard)),
                "size_bytes": float(shard), "flowmodel_phase": lab}))
        if kind == "B" and k == V - 1:
            deps.append(last_of[("F", mb, k)])
        node = None
        if k == V - 1 and kind == "B":
            node = w.add(COMP, f"B mb{mb} stage{k} head", deps=deps, duration=2.0 * head_f)
            deps = [node]
        for layer in range(int(plan.layers[k])):
            moe = is_moe[k][layer]
            node = w.add(COMP, f"{kind} mb{mb} stage{k} layer{layer}", deps=deps,
                         duration=layer_time[(moe, kind)])
            for ckind, lab, nbytes, grp in layer_comm[(moe, kind)]:
                name = grp(d, s, c, t)
                node = w.add(COLL, f"{kind} mb{mb} stage{k} layer{layer} {lab}", deps=[node], attrs={
                    "comm_type": COMM_TYPE_OF[ckind], "comm_size": int(round(nbytes)),
                    "size_bytes": float(nbytes), "pg_name": name, "comm_group": groups[name],
                    "flowmodel_phase": lab})
            deps = [node]
        if k == V - 1 and kind == "F":
            node = w.add(COMP, f"F mb{mb} stage{k} head", deps=deps, duration=head_f)
        if node is None:  # a stage without layers: a zero-time compute node keeps the chain
            node = w.add(COMP, f"{kind} mb{mb} stage{k}", deps=deps, duration=0.0)
        last_of[(kind, mb, k)] = last = node
        if kind == "B":
            last_backward[k] = node  # the rank runs a stage's backwards in order: the last one written is last
        outgoing = k < V - 1 if kind == "F" else k > 0
        if outgoing:
            next_s = (k + 1) % p if kind == "F" else (k - 1) % p
            peer = int(rank_of[d, next_s, c, t])
            link = k % p if kind == "F" else (k - 1) % p
            lab = f"pp_forward[{link}]" if kind == "F" else f"pp_backward[{link}]"
            tag = 2 * (mb * V + (k + 1 if kind == "F" else k - 1)) + (kind == "B")
            w.add(SEND, f"{kind} mb{mb} stage{k} send", deps=[node], attrs={
                "comm_src": r, "comm_dst": peer, "comm_tag": tag, "comm_size": int(round(shard)),
                "size_bytes": float(shard), "flowmodel_phase": lab})
    ep = par.ep
    for kind, per_stage in dp_sizes.items():  # dense over DP x CP, experts over their expert-DP group
        for chunk in range(v):
            k = chunk * p + s
            if per_stage[k] <= 0:
                continue
            if kind == "dp_expert_all_reduce":
                name = group(f"edp.{d % ep}.{s}.{t}", rank_of[d % ep::ep, s, :, t].reshape(-1))
            else:
                name = group(f"dp.{s}.{t}", rank_of[:, s, :, t].reshape(-1))
            w.add(COLL, f"stage{k} {kind}", deps=[last_backward[k]], attrs={
                "comm_type": COMM_TYPE_OF["all_reduce"], "comm_size": int(round(per_stage[k])),
                "size_bytes": float(per_stage[k]), "pg_name": name, "comm_group": groups[name],
                "flowmodel_phase": "dp"})
    return w.count
