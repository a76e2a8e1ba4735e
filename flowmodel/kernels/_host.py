"""The compiled CPU engine: max-min water-filling and the fluid event loop as Numba kernels on the host.

On a CPU the XLA solve pays for its parallel design (``_waterfill``: every pass is a few dozen dependent
XLA ops over padded tables). Here the solve is the classical sequential progressive filling: an
indexed min-heap of link fair shares, and a window over the flows sorted by cap level; each step freezes
the flows of the link with the smallest share (or the flow with the smallest cap) and updates the shares
of the links they cross. Every flow freezes once, so a solve is O(F x H log L).

The result carries the :class:`MaxMinStructure` the adjoint replays. A link's *pass* is its depth in
the bottleneck chain (1 + the largest pass of a flow on it that froze before it; 0 if none did), and a
flow's pass is that of its bottleneck (0 if capped): every link then reads only flows of earlier passes,
which is all the replay needs, and the number of passes is the chain length, as in the XLA solve.

The event loop keeps the order in which the last solve froze flows, and each step's level: when flows
complete, every step before the first one that froze a completed flow stands (those links never carried
it); when flows activate, every step below the least share they bring to a link they cross (or their
cap) stands (``_arrival_restart``). The re-fill restarts there from per-link sums rebuilt in one
O(F x H) sweep, and ends as a full solve would, step for step (up to rounding in the incremental
per-link sums, which can turn an exact tie between two links the other way).

Called from JAX through ``jax.pure_callback`` (``vmap_method="expand_dims"``): under ``jax.vmap`` one
callback receives the whole batch, and the scenarios run in parallel on threads, one per core (the
kernels release the GIL). Numba caches the compiled kernels on disk (``cache=True``): the first call
in a fresh install compiles them (~10 s), later processes load them.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import equinox as eqx
import jax
import jax.numpy as jnp
import numba as nb
import numpy as np

from ._waterfill import NO_PROGRESS, MaxMinStructure

_INF = np.inf



def njit(*args, **kw):
    # numpy's error model: x / 0 is inf (the kernels test for it), without Python's zero-division checks
    return nb.njit(*args, cache=True, nogil=True, error_model="numpy", **kw)


# ---- link -> flows (CSR) and the indexed min-heap of link shares --------------------------------

@njit
def _csr(r, L):
    F, H = r.shape
    ptr = np.zeros(L + 1, np.int64)
    for f in range(F):
        for h in range(H):
            if r[f, h] >= L or r[f, h] < -1:  # unchecked routes (check=False, or traced) must not index out of bounds
                raise ValueError("routes name a link outside 0..L-1 (-1 pads)")
            if r[f, h] >= 0:
                ptr[r[f, h] + 1] += 1
    for i in range(L):
        ptr[i + 1] += ptr[i]
    idx = np.empty(ptr[L], np.int32)
    fill = ptr[:L].copy()
    for f in range(F):
        for h in range(H):
            link = r[f, h]
            if link >= 0:
                idx[fill[link]] = f
                fill[link] += 1
    return ptr, idx


@njit
def _less(key, a, b):
    return key[a] < key[b] or (key[a] == key[b] and a < b)  # ties: the lower link index first


@njit
def _sift_down(heap, pos, key, i, n):
    while True:
        c = 2 * i + 1
        if c >= n:
            return
        if c + 1 < n and _less(key, heap[c + 1], heap[c]):
            c += 1
        if not _less(key, heap[c], heap[i]):
            return
        a, b = heap[i], heap[c]
        heap[i], heap[c] = b, a
        pos[b], pos[a] = i, c
        i = c


@njit
def _heapify(heap, pos, key, n):
    for i in range(n):
        pos[heap[i]] = i
    for i in range(n // 2 - 1, -1, -1):
        _sift_down(heap, pos, key, i, n)


@njit
def _share(cap, frz, W, cnt, link):
    if cnt[link] <= 0 or W[link] <= 0:
        return _INF
    return max(cap[link] - frz[link], 0.0) / W[link]


# ---- one water-filling ----------------------------------------------------------------------------

@njit
def _fill(r, ptr, idx, cap, w, lim, order, n_cap, free, n_free, W, cnt, frz, rates, pass_f, bneck, pass_l, share,
          wat, step_f, step_l, level, step0, seq, nseq, structure):
    """Freeze the ``n_free`` flows marked ``free``, by increasing share; numbers the steps from ``step0``.

    W, cnt, frz: per link, the weight and count of the free flows and the rate of the frozen ones
    (updated in place: on return ``frz`` holds every frozen rate). ``order[:n_cap]``: the flows with a
    finite cap by increasing cap level. Writes rates / pass_f / bneck / step_f of the flows it freezes
    (appended to ``seq`` from ``nseq``) and pass_l / share / wat / step_l of the links it pops; without
    ``structure`` every pass is 0 (the event loop's gradient re-solves each interval for its structure).
    Returns (flows left unfrozen, the new length of ``seq``).

    Heap keys are lower bounds of the shares (shares only grow as flows freeze): a link whose flows
    changed is marked stale and its key refreshed only when it reaches the top, so the top, once
    fresh, is the smallest share (ties: the lowest link index).
    """
    H = r.shape[1]
    L = cap.shape[0]
    key = np.full(L, _INF)
    heap = np.empty(L, np.int64)
    pos = np.full(L, -1, np.int64)
    stale = np.zeros(L, np.bool_)
    n = 0
    for link in range(L):
        if cnt[link] > 0:
            key[link] = _share(cap, frz, W, cnt, link)
            heap[n] = link
            n += 1
    _heapify(heap, pos, key, n)
    ci = 0
    step = step0
    while n_free > 0:
        while ci < n_cap and not free[order[ci]]:
            ci += 1
        while n > 0 and stale[heap[0]]:
            top = heap[0]
            stale[top] = False
            if cnt[top] <= 0:  # no flows left on it: out of the heap
                n -= 1
                heap[0] = heap[n]
                pos[heap[0]] = 0
                if n > 0:
                    _sift_down(heap, pos, key, 0, n)
                continue
            key[top] = _share(cap, frz, W, cnt, top)
            _sift_down(heap, pos, key, 0, n)
        s = key[heap[0]] if n > 0 else _INF
        if ci < n_cap and lim[order[ci]] / w[order[ci]] < s:  # a flow's cap comes first
            f = order[ci]
            ci += 1
            rates[f] = lim[f]
            pass_f[f] = 0
            bneck[f] = L
            level[step] = lim[f] / w[f]
            first = nseq
        elif s < _INF:
            b = heap[0]
            depth = 0
            if structure:
                for j in range(ptr[b], ptr[b + 1]):
                    f = idx[j]
                    if pass_f[f] >= 0 and not free[f]:
                        depth = max(depth, pass_f[f] + 1)
            pass_l[b] = depth
            share[b] = s
            wat[b] = W[b]
            step_l[b] = step
            level[step] = s
            first = nseq
            for j in range(ptr[b], ptr[b + 1]):
                f = idx[j]
                if free[f]:
                    rates[f] = w[f] * s
                    pass_f[f] = depth
                    bneck[f] = b
                    seq[nseq] = f
                    nseq += 1
                    free[f] = False
            f = -1
        else:  # nothing bounds the remaining flows (invalid input with check=False)
            return n_free, nseq
        if f >= 0:  # the capped flow
            seq[nseq] = f
            nseq += 1
            free[f] = False
        for i in range(first, nseq):
            f = seq[i]
            step_f[f] = step
            n_free -= 1
            for h in range(H):
                link = r[f, h]
                if link >= 0:
                    W[link] -= w[f]
                    cnt[link] -= 1
                    frz[link] += rates[f]
                    stale[link] = True
        step += 1
    return 0, nseq


@njit
def route_empty(r, f):
    for h in range(r.shape[1]):
        if r[f, h] >= 0:
            return False
    return True


@njit
def _cap_order(w, lim):
    """The flows with a finite cap by increasing cap level (a stable order), and how many there are."""
    if not np.any(lim < _INF):
        return np.empty(0, np.int64), 0
    level = lim / w
    order = np.argsort(level, kind="mergesort")
    n_cap = 0
    while n_cap < level.shape[0] and level[order[n_cap]] < _INF:
        n_cap += 1
    return order, n_cap


@njit
def _add_free(r, w, f, W, cnt):
    for h in range(r.shape[1]):
        link = r[f, h]
        if link >= 0:
            W[link] += w[f]
            cnt[link] += 1


@njit
def _add_rate(r, f, rate, frz):
    for h in range(r.shape[1]):
        link = r[f, h]
        if link >= 0:
            frz[link] += rate


@njit
def solve_csr(r, ptr, idx, cap, w, lim, present):
    """Rates and structure of the ``present`` flows (the others get rate 0, pass -1, bottleneck L)."""
    F = r.shape[0]
    L = cap.shape[0]
    rates = np.zeros(F)
    pass_f = np.full(F, -1, np.int32)
    bneck = np.full(F, L, np.int32)
    pass_l = np.full(L + 1, -1, np.int32)
    share = np.full(L + 1, _INF)
    wat = np.zeros(L + 1)
    free = np.zeros(F, np.bool_)
    W = np.zeros(L)
    cnt = np.zeros(L, np.int64)
    n_free = 0
    for f in range(F):
        if present[f] and route_empty(r, f):  # an empty route: its cap, before any pass
            rates[f] = lim[f]
            pass_f[f] = 0
        elif present[f]:
            free[f] = True
            n_free += 1
            _add_free(r, w, f, W, cnt)
    order, n_cap = _cap_order(w, lim)
    left, _ = _fill(r, ptr, idx, cap, w, lim, order, n_cap, free, n_free, W, cnt, np.zeros(L), rates, pass_f, bneck,
                    pass_l, share, wat, np.full(F, -1, np.int64), np.full(L, -1, np.int64), np.empty(F + 1), 0,
                    np.empty(F, np.int64), 0, True)
    return rates, pass_f, bneck, pass_l, share, wat, pass_f.max() + 1, left


# ---- the fluid event loop ---------------------------------------------------------------------------

@njit
def _arrival_restart(r, ptr, idx, cap, w, lim, active, empty, level, n_step, fresh, mark):
    """The first step of the last solve that the just-activated flows ``fresh`` change (-1: all of them).

    The new flows bring each link they cross a share no larger than its capacity over the weight of all
    its active flows (shares only grow as flows freeze), and each their cap level. Every step of the last
    solve below the least of these stands: each link a new flow crosses then has a larger share than the
    one the step chose, so the step picks the same link or cap and freezes the same flows at the same rates.
    """
    least = _INF
    links = np.empty(fresh.shape[0] * r.shape[1], np.int64)
    n = 0
    for g in fresh:
        if empty[g]:  # crosses no link: its cap, beside the solve
            continue
        least = min(least, lim[g] / w[g])
        for h in range(r.shape[1]):
            link = r[g, h]
            if link >= 0 and not mark[link]:
                mark[link] = True
                links[n] = link
                n += 1
    for i in range(n):
        link = links[i]
        mark[link] = False
        weight = 0.0
        for j in range(ptr[link], ptr[link + 1]):
            if active[idx[j]]:
                weight += w[idx[j]]
        least = min(least, cap[link] / weight)
    least *= 1.0 - 1e-12  # a share within rounding of a step's level could win its tie
    for j in range(n_step):
        if level[j] >= least:
            return j if j > 0 else -1
    return n_step if n_step > 0 else -1


# Re-fills after completions or activations update the per-link frozen rates incrementally; every this many
# of them the sums are rebuilt exactly, so that rounding cannot accumulate over thousands of events.
_EXACT_EVERY = 32


@njit
def _simulate(r, ptr, idx, sizes, cap, w, lim, arrival, tie):
    """Fluid finish times and the recorded events (the arrays of ``fluid.Events``); see module docstring."""
    none = np.empty(0, np.int32)
    return event_loop(r, ptr, idx, sizes, cap, w, lim, arrival, tie, none, none, np.empty(0), np.empty(0), none,
                      np.empty(1, np.int64))[:9]


@njit
def event_loop(r, ptr, idx, sizes, cap, w, lim, arrival, tie, rec_f, rec_b, rec_x, rec_wat, rec_step, rec_ptr):
    """``_simulate``, which also records each interval's solve for the adjoint while ``rec_*`` have room.

    Interval k's solve is entries ``rec_ptr[k]:rec_ptr[k + 1]``, in freezing order: the flow, its
    bottleneck (L: capped), its rate, the bottleneck's weight when it froze, and the step. Returns
    ``_simulate``'s values and the number of intervals recorded (the first ones; once the next one
    does not fit, recording stops).
    """
    F = r.shape[0]
    L = cap.shape[0]
    E = 2 * F + 1
    never = np.iinfo(np.int64).max
    order, n_cap = _cap_order(w, lim)
    eps4 = 4 * np.finfo(np.float64).eps
    time = np.full(E + 1, _INF)
    cause = np.zeros(E + 1, np.int32)
    completes = np.zeros(E + 1, np.bool_)
    first = np.full(F, -1, np.int32)
    last = np.full(F, -1, np.int32)
    finish = np.full(F, _INF)
    remaining = sizes.copy()
    tau = np.full(F, _INF)
    empty = np.zeros(F, np.bool_)
    for f in range(F):
        empty[f] = route_empty(r, f)
    by_arrival = np.argsort(arrival, kind="mergesort")
    t_now = arrival[by_arrival[0]]
    time[0] = t_now
    cause[0] = by_arrival[0]
    active = np.zeros(F, np.bool_)
    ai = 0
    while ai < F and arrival[by_arrival[ai]] <= t_now:
        active[by_arrival[ai]] = True
        first[by_arrival[ai]] = 0
        ai += 1
    # the last solve: rates, the step at which each flow froze, and the flows in freezing order
    rates = np.zeros(F)
    step_f = np.full(F, -1, np.int64)
    seq = np.empty(F, np.int64)
    # the structure ``_fill`` writes: the recording reads each frozen flow's bottleneck and its weight
    pass_f, bneck = np.zeros(F, np.int32), np.zeros(F, np.int32)
    pass_l, share, wat, step_l = np.zeros(L + 1, np.int32), np.zeros(L + 1), np.zeros(L + 1), np.zeros(L, np.int64)
    level = np.empty(F + 1)
    mark = np.zeros(L, np.bool_)
    new_lo = new_hi = 0  # by_arrival[new_lo:new_hi]: flows activated since the last solve
    nseq = 0
    free = np.zeros(F, np.bool_)
    W = np.zeros(L)
    cnt = np.zeros(L, np.int64)
    frz = np.zeros(L)
    restart = -1  # -1: solve in full; never: rates unchanged; else re-fill from this step
    since_exact = 0
    n_done = 0
    k = 0
    left = 0
    n_rec = 0
    rec_ptr[0] = 0
    while n_done < F and k < E:
        if restart != never:
            W[:] = 0.0
            cnt[:] = 0
            n_free = 0
            if restart <= 0:  # the first solve, or a re-fill from step 0: every active flow from scratch
                frz[:] = 0.0
                nseq = 0
                for f in range(F):
                    if active[f] and empty[f]:
                        rates[f], step_f[f] = lim[f], -1
                    elif active[f]:
                        free[f] = True
                        n_free += 1
                        _add_free(r, w, f, W, cnt)
                step0 = 0
                since_exact = 0
            else:  # after completions or activations: steps before ``restart`` stand; re-fill the flows frozen since
                lo, hi = 0, nseq
                while lo < hi:
                    mid = (lo + hi) // 2
                    if step_f[seq[mid]] < restart:
                        lo = mid + 1
                    else:
                        hi = mid
                exact = since_exact >= _EXACT_EVERY
                if exact:
                    frz[:] = 0.0
                    for i in range(lo):
                        _add_rate(r, seq[i], rates[seq[i]], frz)
                    since_exact = 0
                else:
                    since_exact += 1
                for i in range(lo, nseq):
                    f = seq[i]
                    if active[f]:
                        if not exact:
                            _add_rate(r, f, -rates[f], frz)
                        free[f] = True
                        n_free += 1
                        _add_free(r, w, f, W, cnt)
                for i in range(new_lo, new_hi):
                    g = by_arrival[i]
                    if empty[g]:
                        rates[g], step_f[g] = lim[g], -1
                    else:
                        free[g] = True
                        n_free += 1
                        _add_free(r, w, g, W, cnt)
                nseq = lo
                step0 = restart
            new_lo = new_hi
            left, nseq = _fill(r, ptr, idx, cap, w, lim, order, n_cap, free, n_free, W, cnt, frz, rates, pass_f,
                               bneck, pass_l, share, wat, step_f, step_l, level, step0, seq, nseq, False)
            if left > 0:
                break
        if n_rec == k and rec_ptr.shape[0] > k + 1 and rec_ptr[k] + nseq <= rec_f.shape[0]:
            at = rec_ptr[k]
            for i in range(nseq):
                f = seq[i]
                b = bneck[f]
                rec_f[at + i], rec_b[at + i], rec_x[at + i] = f, b, rates[f]
                rec_wat[at + i] = wat[b] if b < L else 0.0
                rec_step[at + i] = step_f[f]
            rec_ptr[k + 1] = at + nseq
            n_rec = k + 1
        # the next event: the earliest completion under these rates, or the next activation
        tau_min = _INF
        for f in range(F):
            if active[f]:
                tau[f] = remaining[f] / rates[f]
                tau_min = min(tau_min, tau[f])
        t_arrive = arrival[by_arrival[ai]] if ai < F else _INF
        by_completion = t_now + tau_min <= t_arrive
        t_next = t_now + tau_min if by_completion else t_arrive
        cut = tau_min * (1 + tie) + eps4 * abs(t_next)
        dt = t_next - t_now
        c = -1
        restart = never
        for f in range(F):
            if not active[f]:
                continue
            if by_completion and tau[f] <= cut:
                remaining[f] = 0.0
                finish[f] = t_next
                last[f] = k + 1
                n_done += 1
                if c < 0:
                    c = f
                if not empty[f]:  # an empty route's flow leaves no link: the rates stand
                    restart = min(restart, step_f[f])
                    _add_rate(r, f, -rates[f], frz)
                # (its step stays: the binary search over ``seq`` reads it until the re-fill drops it)
                active[f], rates[f] = False, 0.0
            else:
                remaining[f] = max(remaining[f] - rates[f] * dt, 0.0)
        a = -1
        new_lo = ai
        while ai < F and arrival[by_arrival[ai]] <= t_next:
            g = by_arrival[ai]
            active[g] = True
            first[g] = k + 1
            a = g if a < 0 else min(a, g)
            ai += 1
        new_hi = ai
        if a >= 0:
            n_step = step_f[seq[nseq - 1]] + 1 if nseq > 0 else 0
            restart = min(restart, _arrival_restart(r, ptr, idx, cap, w, lim, active, empty, level, n_step,
                                                    by_arrival[new_lo:new_hi], mark))
        time[k + 1] = t_next
        cause[k + 1] = c if by_completion else a
        completes[k + 1] = by_completion
        t_now = t_next
        k += 1
    return finish, time, cause, completes, first, last, k + 1, left, F - n_done, n_rec


# ---- NumPy entry points (what the JAX callbacks run) ------------------------------------------------

def _lead(args, ndims):
    """The broadcast batch shape of ``args`` beyond their base ranks ``ndims``."""
    return np.broadcast_shapes(*(np.shape(a)[: np.ndim(a) - nd] for a, nd in zip(args, ndims)))


def _rows(a, nd, batch, dtype):
    """``a`` broadcast to ``batch`` + its base shape, as contiguous rows of ``dtype``."""
    a = np.asarray(a, dtype)
    base = a.shape[a.ndim - nd:]
    return np.ascontiguousarray(np.broadcast_to(a, batch + base).reshape((math.prod(batch),) + base))


def batched(kernel, routes, values, ndims, L, extra=()):
    """Run ``kernel`` (one scenario) over the batch of ``values``, the scenarios spread over the host's
    cores (the kernels release the GIL); routes shared by the batch are indexed once. Outputs get the
    batch shape."""
    batch = _lead((routes, *values), (2, *ndims))
    routes = np.asarray(routes)
    vals = [_rows(v, nd, batch, bool if np.asarray(v).dtype == bool else np.float64) for v, nd in zip(values, ndims)]
    B = vals[0].shape[0]
    if routes.ndim == 2 or all(d == 1 for d in routes.shape[:-2]):
        r = np.ascontiguousarray(routes.reshape(routes.shape[-2:]), np.int32)
        csr = _csr(r, L)
        one = lambda i: kernel(r, *csr, *(v[i] for v in vals), *extra)  # noqa: E731
    else:
        rows = _rows(routes, 2, batch, np.int32)
        one = lambda i: kernel(rows[i], *_csr(rows[i], L), *(v[i] for v in vals), *extra)  # noqa: E731
    workers = min(B, os.cpu_count() or 1)
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            per = list(pool.map(one, range(B)))
    else:
        per = [one(i) for i in range(B)]
    outs = [np.stack([np.asarray(p[j]) for p in per]) for j in range(len(per[0]))]
    return tuple(o.reshape(batch + o.shape[1:]) for o in outs)


def compact_links(routes, L):
    """(routes renumbered onto the links they cross, those links in order), or (routes, None) when
    they cross all L. The kernels allocate and scan per-link state at every solve, and the adjoint
    solves once per interval: a phase over a few hundred of a fleet's thousands of links should pay
    for its own. Out-of-range routes are left as they are, for ``_csr`` to reject."""
    r = np.asarray(routes)
    if r.size == 0 or r.min() < -1 or r.max() >= L:
        return r, None
    used = np.flatnonzero(np.bincount(r[r >= 0].ravel(), minlength=L))
    if used.size == L:
        return r, None
    lookup = np.full(L + 1, -1, np.int32)  # lookup[-1] (a pad) stays -1
    lookup[used] = np.arange(used.size, dtype=np.int32)
    return lookup[r], used


def solve(routes, capacity, weights, rate_limit, present):
    """Max-min rates and structure, batched over any leading dimensions of the arguments: (rates,
    pass_of_flow, bottleneck, pass_of_link, share, weight_at, num_passes, unfrozen)."""
    L = np.shape(capacity)[-1]
    r, used = compact_links(routes, L)
    if used is None:
        return batched(solve_csr, r, (capacity, weights, rate_limit, present), (1, 1, 1, 1), L)
    rates, pass_f, bneck, pass_l, share, wat, n_pass, left = batched(
        solve_csr, r, (np.asarray(capacity)[..., used], weights, rate_limit, present), (1, 1, 1, 1), used.size)
    slot = np.append(used, L)  # the compact solve's "no link" (capped) slot is L's
    full = lambda a, fill: np.full(a.shape[:-1] + (L + 1,), fill, a.dtype)  # noqa: E731
    pass_full, share_full, wat_full = full(pass_l, -1), full(share, np.inf), full(wat, 0.0)
    pass_full[..., slot], share_full[..., slot], wat_full[..., slot] = pass_l, share, wat
    return rates, pass_f, slot[bneck].astype(bneck.dtype), pass_full, share_full, wat_full, n_pass, left


def simulate(routes, sizes, capacity, weights, rate_limit, arrival, tie):
    """The fluid event loop, batched over leading dimensions: (finish, time, cause, completes, first,
    last, count, unfrozen, not completed)."""
    L = np.shape(capacity)[-1]
    r, used = compact_links(routes, L)
    if used is not None:
        capacity, L = np.asarray(capacity)[..., used], used.size
    return batched(_simulate, r, (sizes, capacity, weights, rate_limit, arrival), (1, 1, 1, 1, 1), L, (tie,))


# ---- JAX entry points ---------------------------------------------------------------------------------

# Flows the adjoint reads per step when it replays a host solve (a pass with more takes several steps;
# the host solve's first passes hold many flows, so the XLA solve's slot bound does not apply).
HOST_WINDOW = 256


def host_solve(routes, capacity, weights, rate_limit, present=None):
    """(rates, MaxMinStructure) from the compiled solve, through ``jax.pure_callback`` (jit, vmap)."""
    F, L = routes.shape[0], capacity.shape[0]
    dtype = capacity.dtype
    present = jnp.ones(F, bool) if present is None else present
    shapes = (jax.ShapeDtypeStruct((F,), dtype), jax.ShapeDtypeStruct((F,), jnp.int32),
              jax.ShapeDtypeStruct((F,), jnp.int32), jax.ShapeDtypeStruct((L + 1,), jnp.int32),
              jax.ShapeDtypeStruct((L + 1,), dtype), jax.ShapeDtypeStruct((L + 1,), dtype),
              jax.ShapeDtypeStruct((), jnp.int32), jax.ShapeDtypeStruct((), jnp.int32))

    def call(r, c, w, lim, pres):
        out = solve(r, c, w, lim, pres)
        return tuple(np.asarray(o, s.dtype) for o, s in zip(out, shapes))

    rates, pass_f, bneck, pass_l, share, wat, num_passes, left = jax.pure_callback(
        call, shapes, routes, capacity, weights, rate_limit, present, vmap_method="expand_dims")
    rates = eqx.error_if(rates, left > 0, NO_PROGRESS)
    return rates, MaxMinStructure(pass_f, bneck, pass_l, share, wat, num_passes)


def host_simulate(routes, sizes, capacity, weights, rate_limit, arrival, tie):
    """(finish, time, cause, completes, first, last, count, not completed) of the compiled event loop
    (through ``jax.pure_callback``)."""
    F = routes.shape[0]
    dtype = capacity.dtype
    E = 2 * F + 1
    shapes = (jax.ShapeDtypeStruct((F,), dtype), jax.ShapeDtypeStruct((E + 1,), dtype),
              jax.ShapeDtypeStruct((E + 1,), jnp.int32), jax.ShapeDtypeStruct((E + 1,), bool),
              jax.ShapeDtypeStruct((F,), jnp.int32), jax.ShapeDtypeStruct((F,), jnp.int32),
              jax.ShapeDtypeStruct((), jnp.int32), jax.ShapeDtypeStruct((), jnp.int32),
              jax.ShapeDtypeStruct((), jnp.int32))

    def call(r, s, c, w, lim, a):
        out = simulate(r, s, c, w, lim, a, tie)
        return tuple(np.asarray(o, sh.dtype) for o, sh in zip(out, shapes))

    *out, left, undone = jax.pure_callback(call, shapes, routes, sizes, capacity, weights, rate_limit, arrival,
                                           vmap_method="expand_dims")
    out[0] = eqx.error_if(out[0], left > 0, NO_PROGRESS)
    return (*out, undone)
