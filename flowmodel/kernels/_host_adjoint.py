"""The fluid event loop's reverse pass on the host: the adjoint of every interval in compiled code.

The XLA adjoint (``fluid._finish_bwd``) replays each interval with a full solve and the max-min VJP
of ``_adjoint`` as a JAX loop over passes: on a CPU, a few dozen dependent XLA ops per pass and a
callback per interval, so a 700-flow tree all-reduce with ~1,000 events cost 200x its forward event
loop. Here the same recursion runs in one Numba kernel. It first re-runs the forward event loop
(``_host.event_loop``, with its incremental re-fills) recording each interval's solve in freezing
order, then walks the intervals backwards, each solve's replay adjoint read off the record in reverse
freezing order: O(flows frozen x H) per interval, where a full re-solve per interval cost 10-20x the
forward loop. Intervals past the record's memory budget are re-solved in full (``_host.solve_csr``)
and replayed by pass. The arithmetic is that of ``_adjoint.adjoint`` (without its window) and of
``fluid._finish_bwd``; tests hold the two engines' gradients together and against finite differences.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ._host import batched, compact_links, event_loop, njit, route_empty, solve_csr


@njit
def _by_pass(key, n_pass):
    """Indices grouped by ``key`` (pass; negative: none): (order, start) with group p at
    ``order[start[p]:start[p + 1]]``."""
    start = np.zeros(n_pass + 1, np.int64)
    for i in range(key.shape[0]):
        if 0 <= key[i] < n_pass:
            start[key[i] + 1] += 1
    for p in range(n_pass):
        start[p + 1] += start[p]
    fill = start[:n_pass].copy()
    order = np.empty(start[n_pass], np.int64)
    for i in range(key.shape[0]):
        if 0 <= key[i] < n_pass:
            order[fill[key[i]]] = i
            fill[key[i]] += 1
    return order, start


@njit
def _maxmin_adjoint(r, w, rates, pass_f, bneck, pass_l, share, wat, n_pass, g, cap_bar, w_bar, lim_bar):
    """Add the max-min VJP of cotangent ``g`` to (cap_bar, w_bar, lim_bar): the replay
    s_b = (c_b - sum of earlier flows on b) / W_b, x_f = w_f s_{b_f} (or its cap), backwards by pass."""
    F, H = r.shape
    L = cap_bar.shape[0]
    s_hat = np.zeros(L + 1)
    sbar = np.zeros(L + 1)
    xbar = np.zeros(F)
    flows, f_start = _by_pass(pass_f, n_pass)
    links, l_start = _by_pass(pass_l[:L], n_pass)
    for p in range(n_pass - 1, -1, -1):
        for i in range(f_start[p], f_start[p + 1]):
            f = flows[i]
            if not np.isfinite(rates[f]):
                continue
            xb = g[f]
            for h in range(H):  # x_f is read only by links that froze later: their adjoints are in s_hat
                if r[f, h] >= 0:
                    xb -= s_hat[r[f, h]]
            xbar[f] += xb
            if bneck[f] != L:
                sbar[bneck[f]] += xb * w[f]
        for i in range(l_start[p], l_start[p + 1]):
            link = links[i]
            if wat[link] > 0:
                s_hat[link] += sbar[link] / wat[link]
    for link in range(L):
        if np.isfinite(s_hat[link]):
            cap_bar[link] += s_hat[link]
        else:
            s_hat[link] = 0.0
    for f in range(F):
        if pass_f[f] < 0 or not np.isfinite(rates[f]):
            continue
        if bneck[f] == L:  # capped: the rate is its limit
            lim_bar[f] += xbar[f]
            continue
        own = 0.0  # the bottlenecks on its route that froze while it was active: share == its level
        for h in range(H):
            link = r[f, h]
            if link >= 0 and 0 <= pass_l[link] <= pass_f[f]:
                own += s_hat[link]
        w_bar[f] += xbar[f] * share[bneck[f]] - rates[f] / w[f] * own


# Entries (flows frozen, summed over intervals) the forward re-run records for the reverse sweep: 28
# bytes each, so at most ~120 MB per scenario; later intervals are re-solved in full. Read per call.
RECORD_BUDGET = 1 << 22


@njit
def _recorded_adjoint(r, w, lim_bar, w_bar, cap_bar, s_hat, g, rec_f, rec_b, rec_x, rec_wat, rec_step, lo, hi):
    """Add the max-min VJP of cotangent ``g`` for one recorded solve (entries ``lo:hi`` in freezing
    order): backwards by step, each step's flows (x_f = w_f s_b, or the cap) then its link (s_b =
    (c_b - earlier flows on b) / W_b). A flow's bottleneck is the only link on its route that froze
    while it was free, so its weight reads s_b alone. ``s_hat`` is zero on entry and on return."""
    H = r.shape[1]
    L = cap_bar.shape[0]
    i = hi - 1
    while i >= lo:
        j = i
        while j >= lo and rec_step[j] == rec_step[i]:
            j -= 1
        b = rec_b[i]
        sbar = 0.0
        for e in range(j + 1, i + 1):
            f = rec_f[e]
            xb = g[f]
            for h in range(H):  # x_f is read only by links that froze later: their adjoints are in s_hat
                if r[f, h] >= 0:
                    xb -= s_hat[r[f, h]]
            if b == L:
                lim_bar[f] += xb
            else:
                sbar += xb * w[f]
                w_bar[f] += xb * rec_x[e] / w[f]
        if b < L and rec_wat[i] > 0:
            s_b = sbar / rec_wat[i]
            if np.isfinite(s_b):
                s_hat[b] = s_b
                cap_bar[b] += s_b
                for e in range(j + 1, i + 1):
                    f = rec_f[e]
                    w_bar[f] -= rec_x[e] / w[f] * s_b
        i = j
    for e in range(lo, hi):
        if rec_b[e] < L:
            s_hat[rec_b[e]] = 0.0


@njit
def _fluid_adjoint(r, ptr, idx, sizes, cap, w, lim, arrival, time, cause, completes, first, last, count, finish_bar,
                   tie, budget):
    """(size_bar, cap_bar, w_bar, lim_bar, t_bar) of the fluid event recursion (``fluid._finish_bwd``)."""
    F = r.shape[0]
    L = cap.shape[0]
    E = time.shape[0]
    size = min(budget, F * E)
    rec_f, rec_b, rec_step = np.empty(size, np.int32), np.empty(size, np.int32), np.empty(size, np.int32)
    rec_x, rec_wat, rec_ptr = np.empty(size), np.empty(size), np.zeros(E + 1, np.int64)
    n_rec = event_loop(r, ptr, idx, sizes, cap, w, lim, arrival, tie, rec_f, rec_b, rec_x, rec_wat, rec_step,
                       rec_ptr)[9]
    empty = np.zeros(F, np.bool_)
    for f in range(F):
        empty[f] = route_empty(r, f)
    t_bar = np.zeros(E)
    for f in range(F):
        t_bar[int(last[f]) if last[f] >= 0 else E - 1] += finish_bar[f]
    mu = np.zeros(F)
    size_bar = np.zeros(F)
    cap_bar = np.zeros(L)
    w_bar = np.zeros(F)
    lim_bar = np.zeros(F)
    x_bar = np.zeros(F)
    s_hat = np.zeros(L + 1)
    rates = np.zeros(F)
    active = np.zeros(F, np.bool_)
    for k in range(int(count) - 2, -1, -1):
        for f in range(F):
            active[f] = 0 <= first[f] <= k < last[f]
        recorded = k < n_rec
        if recorded:
            for e in range(rec_ptr[k], rec_ptr[k + 1]):
                rates[rec_f[e]] = rec_x[e]
            for f in range(F):
                if active[f] and empty[f]:
                    rates[f] = lim[f]
        else:  # past the record: solved in full (rates, and the structure the pass replay reads)
            solved = solve_csr(r, ptr, idx, cap, w, lim, active)
            rates[:] = solved[0]
        dt = time[k + 1] - time[k]
        carry = 0.0  # flows that continue past event k+1 read t_{k+1} through x_d^k (t_{k+1} - t_k)
        for f in range(F):
            if active[f] and last[f] > k + 1:
                carry += mu[f] * rates[f]
        t_bar[k + 1] += carry
        d = int(cause[k + 1])
        if completes[k + 1]:
            mu_d = -t_bar[k + 1] / rates[d]
            mu[d] += mu_d
            size_bar[d] -= mu_d
        back = 0.0
        for f in range(F):
            x_bar[f] = mu[f] * dt if active[f] else 0.0
            if active[f]:
                back += mu[f] * rates[f]
        t_bar[k] -= back
        if recorded:
            _recorded_adjoint(r, w, lim_bar, w_bar, cap_bar, s_hat, x_bar, rec_f, rec_b, rec_x, rec_wat, rec_step,
                              rec_ptr[k], rec_ptr[k + 1])
            for f in range(F):  # an empty route's flow runs at its cap
                if active[f] and empty[f] and np.isfinite(lim[f]):
                    lim_bar[f] += x_bar[f]
        else:
            _maxmin_adjoint(r, w, solved[0], solved[1], solved[2], solved[3], solved[4], solved[5], solved[6], x_bar,
                            cap_bar, w_bar, lim_bar)
    return size_bar, cap_bar, w_bar, lim_bar, t_bar


def fluid_adjoint(routes, sizes, capacity, weights, rate_limit, arrival, tie, events, finish_bar):
    """(size_bar, cap_bar, w_bar, lim_bar, t_bar) of ``completion_times`` on the host, through
    ``jax.pure_callback`` (batched under ``vmap`` like the forward kernels). ``sizes``, ``arrival`` and
    ``tie`` are the forward's: the kernel re-runs it to record each interval's solve."""
    F, L = routes.shape[0], capacity.shape[0]
    dtype = capacity.dtype
    E = events.time.shape[0]
    shapes = (jax.ShapeDtypeStruct((F,), dtype), jax.ShapeDtypeStruct((L,), dtype),
              jax.ShapeDtypeStruct((F,), dtype), jax.ShapeDtypeStruct((F,), dtype),
              jax.ShapeDtypeStruct((E,), dtype))

    def call(r, sz, c, w, lim, a, time, cause, completes, first, last, count, g):
        r, used = compact_links(r, L)
        if used is not None:
            c = np.asarray(c)[..., used]
        # batched passes every value as float64 (bool stays bool); the event indices are exact in it
        out = list(batched(_fluid_adjoint, r, (sz, c, w, lim, a, time, cause, completes, first, last, count, g),
                           (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1), L if used is None else used.size,
                           (tie, RECORD_BUDGET)))
        if used is not None:  # capacity adjoints back onto every link (the unused ones get none)
            cap_bar = np.zeros(out[1].shape[:-1] + (L,))
            cap_bar[..., used] = out[1]
            out[1] = cap_bar
        return tuple(np.asarray(o, shape.dtype) for o, shape in zip(out, shapes))

    ev = events
    return jax.pure_callback(call, shapes, routes, sizes, capacity, weights, rate_limit, arrival, ev.time, ev.cause,
                             ev.completes, ev.first, ev.last, ev.count, jnp.asarray(finish_bar, dtype),
                             vmap_method="expand_dims")
