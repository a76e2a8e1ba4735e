"""ASTRA-sim 2.x's analytical (congestion-unaware) timing rules for a ring all-reduce, written out so that
its figure for an input it has not published can be computed and compared. Its published 1-D figures
come from the congestion-aware backend, which on an uncontended 1-D ring times each message the same;
the 2-D figures here are the congestion-unaware backend's (the congestion-aware one takes 1-D only).

The rules, as its system layer and analytical backend apply them (docs/sources.md):

- a message of m bytes over a dimension takes ``trunc(hops x latency + m / bandwidth)`` ns, with
  bandwidth in GB/s of 2^30 bytes; a Switch step is 2 hops, a Ring step 1;
- a received message that is reduced costs ``3 x trunc(m / local-mem-bw)`` ns more (two reads, a write);
- the endpoint delay is paid as a phase starts and after every message received;
- the collective is cut into ``preferred-dataset-splits`` chunks; with ``localBWAware`` a chunk runs
  reduce-scatter up the dimensions but the last, an all-reduce on the last, all-gather back down; a
  ring phase on n NPUs has n - 1 steps (2(n - 1) for the all-reduce) of the data it sees over n;
- each dimension has one queue that runs one chunk at a time (``active-chunks-per-dimension`` 1),
  first come first served.

Two schedules follow from the code. ``"pipelined"``: every phase on its own dimension's queue, so
chunks overlap across dimensions. ``"as_run"``: with one queue per dimension, the queue allocator of the
phases that go up the dimensions reads past the end of a one-element list for every chunk after the
first; assuming those reads give queue 0, those phases wait on dimension 0's queue. The published 1-D
figures (chunks one after another) say dimension 0's over-reads gave 0 (any other queue would have run
the chunks side by side); that the higher dimensions' do is an assumption, and so is a run's first
collective (the allocator's index is never reset between collectives). A third, ``"serial"``, runs the
chunks one after another through every phase. Dimensions of one NPU are skipped, as ASTRA-sim does.

The rules reproduce ASTRA-sim's six published 1-D figures to the ns (``PUBLISHED``; the tests check);
on one dimension the three schedules agree.
"""

from __future__ import annotations

import heapq
import math

GB = 2 ** 30 / 1e9  # bytes per ns in a GB/s
# ASTRA-sim 2.x analytical, 1 MiB a rank on a 50 GB/s 500 ns Ring, Ring_4chunks.json (docs/sources.md), ns
PUBLISHED = {("all_reduce", 4): 43_000, ("all_reduce", 8): 64_440, ("all_reduce", 16): 99_640,
             ("reduce_scatter", 4): 22_240, ("reduce_scatter", 8): 33_080, ("reduce_scatter", 16): 50_740}


def ring_phase_ns(kind: str, n: int, data: float, bandwidth: float, latency: float, hops: int,
                  endpoint: float = 10.0, local_mem_bw: float = 1600.0) -> int:
    """One chunk's ring phase (``kind``: reduce_scatter, all_gather or all_reduce) on a dimension of ``n``
    NPUs, ``data`` bytes the chunk holds there, ``bandwidth`` GB/s, ``latency`` ns a hop."""
    m = data // n
    wire = math.floor(hops * latency + m / (bandwidth * GB))
    reduce = 3 * math.floor(m / local_mem_bw)
    if kind == "reduce_scatter":
        return int(endpoint + (n - 1) * (wire + endpoint + reduce))
    if kind == "all_gather":
        return int(endpoint + (n - 1) * (wire + endpoint))
    if kind == "all_reduce":
        return int(endpoint + 2 * (n - 1) * (wire + endpoint) + (n - 1) * reduce)
    raise ValueError(f"kind: reduce_scatter, all_gather or all_reduce, got {kind!r}")


def all_reduce_ns(size: float, dims, topologies, bandwidths, latencies, chunks: int = 4, endpoint: float = 10.0,
                  local_mem_bw: float = 1600.0, schedule: str = "as_run") -> int:
    """ASTRA-sim's time (ns) for an all-reduce of ``size`` bytes a rank on a network of ``dims`` NPUs per
    dimension (``topologies``: Ring or Switch), a ring per dimension, under ``schedule`` (see above)."""
    if schedule not in ("as_run", "pipelined", "serial"):
        raise ValueError(f"schedule: as_run, pipelined or serial, got {schedule!r}")
    kept = [d for d, n in enumerate(dims) if n > 1]
    dims, topologies, bandwidths, latencies = ([v[d] for d in kept] for v in (dims, topologies, bandwidths, latencies))
    hops = [2 if t == "Switch" else 1 for t in topologies]
    cost = dict(endpoint=endpoint, local_mem_bw=local_mem_bw)
    chunk = size // chunks
    phases, seen = [], chunk  # (dimension, ns, goes up the dimensions)
    for d, n in enumerate(dims[:-1]):
        phases.append((d, ring_phase_ns("reduce_scatter", n, seen, bandwidths[d], latencies[d], hops[d], **cost), True))
        seen //= n
    last = len(dims) - 1
    phases.append((last, ring_phase_ns("all_reduce", dims[last], seen, bandwidths[last], latencies[last], hops[last],
                                       **cost), True))
    for d in reversed(range(last)):
        seen *= dims[d]
        phases.append((d, ring_phase_ns("all_gather", dims[d], seen, bandwidths[d], latencies[d], hops[d], **cost),
                       False))
    if schedule == "serial":
        return chunks * sum(ns for _, ns, _ in phases)

    def queue(c, i):
        d, _, up = phases[i]
        return 0 if schedule == "as_run" and up and c > 0 else d

    waiting: dict[int, list[int]] = {}
    busy: dict[int, bool] = {}
    step = [0] * chunks
    events, end = [], 0

    def start(q, now):
        if not busy.get(q) and waiting.get(q):
            c = waiting[q].pop(0)
            busy[q] = True
            heapq.heappush(events, (now + phases[step[c]][1], c, q))

    for c in range(chunks):
        waiting.setdefault(queue(c, 0), []).append(c)
    for q in list(waiting):
        start(q, 0)
    while events:
        now, c, q = heapq.heappop(events)
        busy[q] = False
        step[c] += 1
        nq = None
        if step[c] < len(phases):
            nq = queue(c, step[c])
            waiting.setdefault(nq, []).append(c)
        else:
            end = max(end, now)
        start(q, now)
        if nq is not None:
            start(nq, now)
    return end
