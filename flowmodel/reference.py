"""Slow float64 NumPy oracles and independent certificates for the JAX kernels.

The max-min oracle solves it the textbook way (raise one common level, freeze at each saturation, one
event per step) and shares no code with the kernels. The certificate checks the *definition* of a
weighted max-min allocation, whatever produced it. ``pipeline_schedule`` runs a pipeline schedule as
a plain event simulation, the oracle of ``steptime.evaluate_schedule``.
"""

from __future__ import annotations

import numpy as np


def _links_of(routes: np.ndarray):
    """(flow index, link index) pairs of the incidence, padding dropped."""
    r = np.asarray(routes)
    flow, hop = np.nonzero(r >= 0)
    return flow, r[flow, hop]


def maxmin_rates(routes, capacity, weights=None, rate_limit=None, *, rtol: float = 1e-12) -> np.ndarray:
    """Weighted max-min rates by classic progressive filling in float64.

    All unfrozen flows share one normalised level t (rate = weight * t). Each step raises t to the
    next saturation (a link's residual capacity, or a flow's cap) and freezes what saturated. A link
    counts as saturated when its residual is within ``rtol`` of its capacity.
    """
    routes = np.asarray(routes)
    cap = np.asarray(capacity, dtype=np.float64)
    F, L = routes.shape[0], cap.shape[0]
    w = np.ones(F) if weights is None else np.asarray(weights, dtype=np.float64)
    limit = np.full(F, np.inf) if rate_limit is None else np.asarray(rate_limit, dtype=np.float64)
    flow, link = _links_of(routes)
    cap_level = limit / w

    rates = np.zeros(F)
    active = np.ones(F, bool)
    resid = cap.copy()
    t = 0.0
    while active.any():
        on = active[flow]
        wsum = np.bincount(link[on], weights=w[flow[on]], minlength=L)
        loaded = wsum > 0
        step_link = np.min(resid[loaded] / wsum[loaded], initial=np.inf)
        step_cap = np.min(cap_level[active]) - t
        step = max(min(step_link, step_cap), 0.0)
        if not np.isfinite(step):
            rates[active] = np.inf
            break
        t += step
        resid[loaded] -= step * wsum[loaded]
        saturated = loaded & np.isfinite(cap) & (resid <= rtol * cap)  # an infinite link never saturates
        freeze = active & (cap_level <= t * (1 + rtol))
        freeze[flow[saturated[link] & active[flow]]] = True
        rates[freeze] = np.minimum(w[freeze] * t, limit[freeze])
        active &= ~freeze
    return rates


def maxmin_violations(routes, capacity, rates, weights=None, rate_limit=None, *,
                      rtol: float = 1e-9) -> list[str]:
    """Why ``rates`` is not the weighted max-min allocation; an empty list when it is.

    Certificate (to relative tolerance ``rtol``):
      1. feasibility: 0 <= rate <= rate_limit, and every link's load <= its capacity;
      2. optimality: every flow is at its rate_limit, or crosses a saturated link on which no flow has
         a larger normalised rate (rate / weight).
    """
    routes = np.asarray(routes)
    cap = np.asarray(capacity, dtype=np.float64)
    x = np.asarray(rates, dtype=np.float64)
    F, L = routes.shape[0], cap.shape[0]
    w = np.ones(F) if weights is None else np.asarray(weights, dtype=np.float64)
    limit = np.full(F, np.inf) if rate_limit is None else np.asarray(rate_limit, dtype=np.float64)
    flow, link = _links_of(routes)
    out = []

    bad = np.flatnonzero(~np.isfinite(x) | (x < 0) | (x > limit * (1 + rtol)))
    out += [f"flow {f}: rate {x[f]} outside [0, rate_limit={limit[f]}]" for f in bad[:10]]
    load = np.bincount(link, weights=x[flow], minlength=L)
    over = np.flatnonzero(load > cap * (1 + rtol))
    out += [f"link {j}: load {load[j]} > capacity {cap[j]}" for j in over[:10]]

    level = x / w
    max_level = np.full(L, -np.inf)
    np.maximum.at(max_level, link, level[flow])
    saturated = load >= cap * (1 - rtol)
    justified = saturated[link] & (level[flow] >= max_level[link] * (1 - rtol))
    has_bottleneck = np.zeros(F, bool)
    has_bottleneck[flow[justified]] = True
    at_limit = x >= limit * (1 - rtol)
    unjust = np.flatnonzero(~has_bottleneck & ~at_limit)
    out += [f"flow {f}: rate {x[f]} is below its limit and has no bottleneck link" for f in unjust[:10]]
    return out


def link_loads(routes, rates, num_links: int) -> np.ndarray:
    """float64[L]: sum of the rates of the flows crossing each link."""
    flow, link = _links_of(routes)
    return np.bincount(link, weights=np.asarray(rates, np.float64)[flow], minlength=num_links)


def completion_times(routes, sizes, capacity, weights=None, rate_limit=None, start_times=None,
                     latency=None) -> np.ndarray:
    """Fluid finish times by a plain event loop over :func:`maxmin_rates`, in float64.

    A flow activates at start_time + the latencies along its route; at each activation or
    completion every active flow's rate is re-solved from scratch. Completions within 1e-12
    relative of the next event are taken together.
    """
    routes = np.asarray(routes)
    cap = np.asarray(capacity, dtype=np.float64)
    F, L = routes.shape[0], cap.shape[0]
    w = np.ones(F) if weights is None else np.asarray(weights, dtype=np.float64)
    limit = np.full(F, np.inf) if rate_limit is None else np.asarray(rate_limit, dtype=np.float64)
    start = np.zeros(F) if start_times is None else np.asarray(start_times, dtype=np.float64)
    lat = np.zeros(L) if latency is None else np.asarray(latency, dtype=np.float64)
    activation = start + np.where(routes >= 0, lat[np.clip(routes, 0, None)], 0.0).sum(axis=1)

    remaining = np.asarray(sizes, dtype=np.float64).copy()
    finish = np.full(F, np.inf)
    done = np.zeros(F, bool)
    t = activation.min()
    while not done.all():
        active = (activation <= t) & ~done
        rates = np.zeros(F)
        if active.any():
            rates[active] = maxmin_rates(routes[active], cap, w[active], limit[active])
        tau = np.full(F, np.inf)
        tau[active] = remaining[active] / rates[active]
        t_arrive = activation[activation > t].min(initial=np.inf)
        by_completion = t + tau.min() <= t_arrive
        t_next = t + tau.min() if by_completion else t_arrive
        # compare durations, not clock times: t + tau can round to t for a nearly finished flow
        completing = active & (tau <= tau.min() * (1 + 1e-12)) & by_completion
        remaining[active] -= rates[active] * (t_next - t)
        finish[completing] = t_next
        done |= completing
        t = t_next
    return finish


def pipeline_schedule(schedule, t_forward, t_backward, send_forward, send_backward):
    """End time of every operation of a pipeline schedule, by a plain event simulation in float64.

    ``schedule`` is ``one_f_one_b``'s per-rank op lists; the other arguments as in
    ``steptime.evaluate_schedule``. Each rank runs its ops in order; an op starts when its rank is
    free and its input has arrived (forward: the previous virtual stage's forward plus
    ``send_forward``; backward: the next stage's backward plus ``send_backward``, or its own forward
    on the last stage). Returns a dict ``(kind, micro-batch, virtual stage) -> end time`` and per
    rank the end of its last op.
    """
    p = len(schedule)
    V = len(t_forward)
    tf, tb = [float(x) for x in t_forward], [float(x) for x in t_backward]
    sf, sb = [float(x) for x in send_forward], [float(x) for x in send_backward]
    end: dict[tuple[str, int, int], float] = {}
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
                        arrive = end[dep] + sf[(k - 1) % p]
                    duration = tf[k]
                else:
                    dep = ("F", mb, k) if k == V - 1 else ("B", mb, k + 1)
                    arrive = None
                    if dep in end:
                        arrive = end[dep] if k == V - 1 else end[dep] + sb[k % p]
                    duration = tb[k]
                if arrive is None:
                    break  # waits for another rank
                end[(kind, mb, k)] = max(free[s], arrive) + duration
                free[s] = end[(kind, mb, k)]
                cursor[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("pipeline schedule deadlocked: an operation waits for one that never runs")
    return end, free
