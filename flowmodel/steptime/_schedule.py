"""Pipeline schedules as DAGs of compute operations, evaluated to start and end times.

The 1F1B schedule (Megatron's; interleaved with ``v`` model chunks per rank when ``v > 1``) fixes
each pipeline rank's order of forward and backward operations; an operation starts when its rank is
free and its input has arrived (the previous virtual stage's output plus the point-to-point send):

    end[i] = max(end[prev(i)], end[dep(i)] + send(i)) + duration(i)

The DAG is static: :class:`Schedule` holds it as int arrays, grouped into *waves* (an op's wave is one
more than the later of its two predecessors' waves), each padded to the pipeline depth with a sentinel
op whose end time stays 0. The evaluation is one ``lax.fori_loop`` over the waves with vectorised
gathers and scatters, so its program does not grow with the micro-batch count; its gradient is a
custom VJP that sweeps the waves backwards and routes each op's cotangent to its duration and to the
predecessor that set its start (split in half on a tie, as ``jnp.maximum`` does), in O(ops) memory.
The float64 event simulation it replaces is ``flowmodel.reference.pipeline_schedule``. The step
time is differentiable in reverse mode (``jax.grad``, ``jax.vjp``, and ``vmap`` of them); forward mode
(``jax.jvp``, ``jax.jacfwd``) is not defined through the custom VJP.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


def one_f_one_b(p: int, m: int, v: int = 1) -> list[list[tuple[str, int, int]]]:
    """Per pipeline rank, its operations in order: ``("F" | "B", micro-batch, virtual stage)``.

    Virtual stage ``c * p + s`` is chunk ``c`` of rank ``s``; with ``v > 1``, ``m`` must be a
    multiple of ``p`` (as in Megatron).
    """
    if v > 1 and m % p:
        raise ValueError(f"interleaved 1F1B needs the micro-batch count ({m}) to be a multiple of pp ({p})")
    total = m * v
    schedule = []
    for s in range(p):

        def op(kind, i, s=s):
            if v == 1:
                return kind, i, s
            group, within = divmod(i, p * v)
            chunk, mb = divmod(within, p)
            if kind == "B":
                chunk = v - 1 - chunk
            return kind, group * p + mb, chunk * p + s

        warmup = min(p - s - 1 if v == 1 else (p - s - 1) * 2 + (v - 1) * p, total)
        ops = [op("F", i) for i in range(warmup)]
        for i in range(total - warmup):
            ops += [op("F", warmup + i), op("B", i)]
        ops += [op("B", i) for i in range(total - warmup, total)]
        schedule.append(ops)
    return schedule


@dataclasses.dataclass(frozen=True, eq=False)
class Schedule:
    """A pipeline schedule's DAG, prepared once (``Schedule.build``) and evaluated many times.

    Ops are numbered rank by rank in each rank's order (``ops[i]`` is ``(kind, micro-batch, stage)``);
    ``N = len(ops)`` is also the sentinel op (end time 0). Durations are indexed in one vector
    ``[t_forward (V), t_backward (V), send_forward (p), send_backward (p), 0]``.

    Attributes:
      ops: the ops in id order.
      p, V: pipeline ranks and virtual stages.
      waves: int32[W, p] op ids per wave, padded with N; prev, dep, duration, send: int32[W, p] each
        slot's rank predecessor and input dependency (op ids) and the indices of its duration and of
        its send time; valid: bool[W, p] not padding.
      last: int[p] each rank's last op; last_backward: int[V] each virtual stage's last backward op
        (its rank's last, as a rank's ops end in order).
    """

    ops: tuple
    p: int
    V: int
    waves: np.ndarray
    prev: np.ndarray
    dep: np.ndarray
    duration: np.ndarray
    send: np.ndarray
    valid: np.ndarray
    last: np.ndarray
    last_backward: np.ndarray

    @property
    def num_ops(self) -> int:
        return len(self.ops)

    @classmethod
    def build(cls, schedule) -> Schedule:
        """Prepare a schedule from ``one_f_one_b``'s per-rank op lists."""
        if isinstance(schedule, Schedule):
            return schedule
        p = len(schedule)
        ops = tuple(op for rank in schedule for op in rank)
        N = len(ops)
        V = 1 + max((k for _, _, k in ops), default=-1)
        ids = {op: i for i, op in enumerate(ops)}
        if len(ids) != N:
            raise ValueError("pipeline schedule: an operation is listed twice")
        zero = 2 * V + 2 * p
        prev = np.full(N, N, np.int64)
        dep = np.full(N, N, np.int64)
        dur = np.empty(N, np.int64)
        send = np.full(N, zero, np.int64)
        rank = np.empty(N, np.int64)
        start = 0
        for s, rank_ops in enumerate(schedule):
            n = len(rank_ops)
            prev[start + 1:start + n] = np.arange(start, start + n - 1)
            rank[start:start + n] = s
            start += n
        for i, (kind, mb, k) in enumerate(ops):
            if kind == "F":
                dur[i] = k
                if k > 0:
                    dep[i] = _lookup(ids, ("F", mb, k - 1), ops[i])
                    send[i] = 2 * V + (k - 1) % p
            else:
                dur[i] = V + k
                if k == V - 1:
                    dep[i] = _lookup(ids, ("F", mb, k), ops[i])
                else:
                    dep[i] = _lookup(ids, ("B", mb, k + 1), ops[i])
                    send[i] = 2 * V + p + k % p
        level = _levels(prev, dep, N)
        W = int(level.max(initial=0))
        # slot of each op in its wave: ops of one rank never share a wave (the rank chain orders them)
        waves = np.full((W, max(p, 1)), N, np.int64)
        if N:
            waves[level - 1, rank] = np.arange(N)
        valid = waves < N
        sentinel = lambda a, pad: np.where(valid, np.append(a, pad)[waves], pad).astype(np.int32)  # noqa: E731
        last = np.cumsum([len(rank_ops) for rank_ops in schedule]) - 1
        last_backward = np.full(V, N, np.int64)
        for i, (kind, _, k) in enumerate(ops):
            if kind == "B":  # stage k runs on one rank: its later backward ends later (durations are >= 0)
                if last_backward[k] < N and rank[last_backward[k]] != rank[i]:
                    raise ValueError(f"pipeline schedule: virtual stage {k} runs its backward on ranks "
                                     f"{rank[last_backward[k]]} and {rank[i]}; a stage lives on one rank")
                last_backward[k] = i
        return cls(ops, p, V, waves.astype(np.int32), sentinel(prev, N), sentinel(dep, N), sentinel(dur, zero),
                   sentinel(send, zero), valid, last, last_backward)

    def evaluate(self, durations):
        """float[N + 1]: every op's end time (the last entry, the sentinel, is 0), from the duration
        vector ``[t_forward (V), t_backward (V), send_forward (p), send_backward (p), 0]``."""
        return _end_times(self, durations)


def _lookup(ids, op, by):
    if op not in ids:
        raise ValueError(f"pipeline schedule: {by} waits for {op}, which the schedule never runs")
    return ids[op]


def _levels(prev: np.ndarray, dep: np.ndarray, N: int) -> np.ndarray:
    """int[N]: 1 + the later of each op's predecessors' levels (the sentinel's is 0), in a topological
    order found by running each rank as far as its dependencies allow."""
    heads = [i for i in range(N) if prev[i] == N]  # each rank's first op
    cursor = dict(zip(heads, heads))
    tails = dict(zip(heads, [*[h - 1 for h in heads[1:]], N - 1]))  # ranks are numbered one after another
    prev_l, dep_l = prev.tolist(), dep.tolist()
    lev = [0] * (N + 1)
    fin = [False] * N + [True]
    remaining = N
    while remaining:
        progressed = False
        for h in heads:
            i, end = cursor[h], tails[h]
            while i <= end and fin[dep_l[i]]:
                lev[i] = 1 + max(lev[prev_l[i]], lev[dep_l[i]])
                fin[i] = True
                i += 1
                remaining -= 1
                progressed = True
            cursor[h] = i
        if not progressed:
            raise RuntimeError("pipeline schedule deadlocked: an operation waits for one that never runs")
    return np.array(lev[:N], np.int64)


class ScheduleTimes(NamedTuple):
    """``end``: float[N] every op's end time (in ``Schedule.ops`` order); ``free``: float[p] each rank's
    last end; ``last_backward``: float[V] the end of each virtual stage's last backward."""

    end: object
    free: object
    last_backward: object


def evaluate_schedule(schedule, t_forward, t_backward, send_forward, send_backward) -> ScheduleTimes:
    """End times of a pipeline schedule's operations (differentiable in the durations; jit/vmap safe).

    Args:
      schedule: a :class:`Schedule`, or ``one_f_one_b``'s op lists (prepared here; hold a
        ``Schedule`` to prepare it once); ``V = p * v`` virtual stages.
      t_forward, t_backward: float[V] per virtual stage, the duration of its forward / backward of one
        micro-batch (floats or JAX scalars).
      send_forward, send_backward: float[p] per rank ``s``, the time to send one micro-batch's
        activations from rank s to rank (s+1) % p, and its gradients back from (s+1) % p to s.

    Four ranks, eight micro-batches, no sends: the step is (m + p - 1)(t_f + t_b).

    >>> from flowmodel import steptime as st
    >>> schedule = st.Schedule.build(st.one_f_one_b(4, 8))
    >>> times = st.evaluate_schedule(schedule, [1.0] * 4, [2.0] * 4, [0.0] * 4, [0.0] * 4)
    >>> float(times.free.max()), float(times.last_backward[0])
    (33.0, 33.0)
    """
    sched = Schedule.build(schedule)
    parts = [jnp.stack([jnp.asarray(x) for x in xs]) if len(xs) else jnp.zeros(0)
             for xs in (t_forward, t_backward, send_forward, send_backward)]
    dtype = jnp.result_type(*parts, jnp.zeros(0).dtype)
    durations = jnp.concatenate([x.astype(dtype) for x in parts] + [jnp.zeros(1, dtype)])
    end = sched.evaluate(durations)
    return ScheduleTimes(end[:-1], end[sched.last], end[sched.last_backward])


def _forward(sched: Schedule, durations):
    waves, prev, dep = jnp.asarray(sched.waves), jnp.asarray(sched.prev), jnp.asarray(sched.dep)
    dur, send = jnp.asarray(sched.duration), jnp.asarray(sched.send)

    def wave(w, end):
        start = jnp.maximum(end[prev[w]], end[dep[w]] + durations[send[w]])
        return end.at[waves[w]].set(start + durations[dur[w]])  # padding writes 0 into the sentinel

    return jax.lax.fori_loop(0, sched.waves.shape[0], wave, jnp.zeros(sched.num_ops + 1, durations.dtype))


def _fwd(sched, durations):
    end = _forward(sched, durations)
    return end, (durations, end)


def _bwd(sched, res, g):
    durations, end = res
    waves, prev, dep = jnp.asarray(sched.waves), jnp.asarray(sched.prev), jnp.asarray(sched.dep)
    dur, send, valid = jnp.asarray(sched.duration), jnp.asarray(sched.send), jnp.asarray(sched.valid)
    W = sched.waves.shape[0]

    def wave(j, carry):
        g_end, g_dur = carry
        w = W - 1 - j
        ct = jnp.where(valid[w], g_end[waves[w]], 0.0)
        rank_free, arrive = end[prev[w]], end[dep[w]] + durations[send[w]]
        to_prev = jnp.where(rank_free > arrive, 1.0, jnp.where(rank_free == arrive, 0.5, 0.0)).astype(ct.dtype)
        g_dur = g_dur.at[dur[w]].add(ct).at[send[w]].add(ct * (1 - to_prev))
        g_end = g_end.at[prev[w]].add(ct * to_prev).at[dep[w]].add(ct * (1 - to_prev))
        return g_end, g_dur

    _, g_dur = jax.lax.fori_loop(0, W, wave, (g, jnp.zeros_like(durations)))
    return (g_dur,)


_end_times_vjp = jax.custom_vjp(_forward, nondiff_argnums=(0,))
_end_times_vjp.defvjp(_fwd, _bwd)
# one compiled loop per schedule (hashed by identity) also for eager calls; inlined under an outer jit
_end_times = jax.jit(_end_times_vjp, static_argnums=0)
