"""Pipeline schedules as DAGs of compute operations, evaluated to start and end times.

The 1F1B schedule (Megatron's; interleaved with ``v`` model chunks per rank when ``v > 1``) fixes
each pipeline rank's order of forward and backward operations; an operation starts when its rank is
free and its input has arrived (the previous virtual stage's output plus the point-to-point send).
Durations may be floats or JAX scalars: the evaluation is a longest-path recursion of ``max`` and
``+``, so it is differentiable in the durations.
"""

from __future__ import annotations

import jax.numpy as jnp

from .._checks import is_traced


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


def evaluate_schedule(schedule, t_forward, t_backward, send_forward, send_backward):
    """End time of every operation of a pipeline schedule.

    Args:
      schedule: from ``one_f_one_b``; ``V = p * v`` virtual stages.
      t_forward, t_backward: per virtual stage, the duration of its forward / backward of one
        micro-batch (floats or JAX scalars).
      send_forward, send_backward: per rank ``s``, the time to send one micro-batch's activations
        from rank s to rank (s+1) % p, and its gradients back from (s+1) % p to s.

    Returns:
      dict ``(kind, micro-batch, virtual stage) -> end time``, and per rank the end of its last op.
    """
    p = len(schedule)
    V = len(t_forward)
    traced = is_traced(*t_forward, *t_backward, *send_forward, *send_backward)
    biggest = jnp.maximum if traced else max
    end: dict[tuple[str, int, int], object] = {}
    free = [0.0] * p
    cursor = [0] * p
    remaining = sum(len(ops) for ops in schedule)
    while remaining:
        progressed = False
        for s in range(p):
            while cursor[s] < len(schedule[s]):
                kind, mb, k = schedule[s][cursor[s]]
                if kind == "F":
                    dep = ("F", mb, k - 1) if k > 0 else None
                    arrive = 0.0 if dep is None else None
                    if dep is not None and dep in end:
                        arrive = end[dep] + send_forward[(k - 1) % p]
                    duration = t_forward[k]
                else:
                    dep = ("F", mb, k) if k == V - 1 else ("B", mb, k + 1)
                    arrive = None
                    if dep in end:
                        arrive = end[dep] if k == V - 1 else end[dep] + send_backward[k % p]
                    duration = t_backward[k]
                if arrive is None:
                    break  # waits for another rank
                end[(kind, mb, k)] = biggest(free[s], arrive) + duration
                free[s] = end[(kind, mb, k)]
                cursor[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("pipeline schedule deadlocked: an operation waits for one that never runs")
    return end, free
