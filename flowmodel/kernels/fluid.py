"""Fluid completion times: flows start, share max-min rates, re-share whenever one starts or ends.

Semantics (SimGrid's fluid model): flow f starts consuming bandwidth at its activation time
``a_f = start_times_f + sum of its links' latencies``; at every instant the active flows get weighted
max-min rates (with rate_limit); rates are re-computed whenever a flow activates or completes; a flow
finishes when its last byte has been sent.

Event loop. Each event advances to the earlier of the next activation and the next completion under
the current rates. Flows whose completion times agree to 1e-12 relative complete in the same event, so
the equal flows of a collective cost one event. After completions the water-filling resumes at the
earliest pass in which a completed flow, or a link it crossed while active, froze: the completed flows
crossed no bottleneck of an earlier pass, so every earlier decision stands. The per-link state at that
pass comes from a snapshot the earlier solve recorded (less the flows completed since), so an event
costs O(L) plus its passes, not O(F x H). After activations the rates are re-solved in full.

Engines. On a CPU backend (``engine="host"``, the default there) the event loop is the compiled one of
``_host``: the same events, with the re-fill restarting at the first step of the sequential solve that
froze a completed flow or that an activated flow undercuts. The XLA loop above is the accelerator
path. Both record the same ``Events``.

Differentiation. A custom VJP runs the adjoint of the event recursion backwards: completion event
times solve ``sum_k x_d^k (t_{k+1} - t_k) = size_d`` for the flow d that defines them, activation
event times are ``start_g + latency along g``; rates in each interval go through the max-min adjoint.
Exact wherever the event order and bottleneck structures are locally stable.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import _checks
from .._types import Array, Bool, Float, Int
from ._adjoint import adjoint
from ._engine import Engine, engine_for
from ._host import host_simulate, host_solve, solve
from ._host_adjoint import fluid_adjoint
from ._incidence import Incidence, link_sums, members_for, pad_routes, prepare
from ._transport import Transport, transport_inputs, transport_profile
from ._waterfill import (
    NO_PROGRESS,
    MaxMinStructure,
    Snapshots,
    fill,
    fill_result,
    fill_resume,
    fill_start,
    pass_window,
    solve_dense,
    solve_sparse,
    sparse_tables,
)

_TIE = 1e-12  # completions within this relative gap count as one event
EVENT_BOUND = "completion_times: event bound 2F+1 exceeded (a flow never completed)"
# Links examined per pass. Re-fills after a completion touch few levels, so fewer candidates per pass
# cost less than the extra passes they cause (k=8 fat-tree, 10K distinct finishes: 8 is 1.6x faster
# than 16 and 16 ~3x faster than 64; the 24K-GPU training step is within noise of 16).
_CANDIDATES = 8
# Snapshot rows: a solve's passes rarely exceed a few hundred; the table stays <= 4 MB (float64)
# per simulation, as vmapped sweeps hold one per point.
_SNAPSHOT_ROWS = 256
_SNAPSHOT_BUDGET = 1 << 19  # elements of the snapshot table [S, L+1, 3]


class Events(NamedTuple):
    """What the forward simulation recorded (event k starts interval k, which ends at event k+1).

    time:       float[E+1]  event times (entries past ``count`` are +inf)
    cause:      int32[E+1]  flow that defines the event time (its completion or its activation)
    completes:  bool[E+1]   whether the defining flow completes (else it activates) at the event
    first:      int32[F]    index of the interval in which each flow is first active
    last:       int32[F]    index of the event at which each flow completes
    count:      int32[]     number of events
    """

    time: Array
    cause: Array
    completes: Array
    first: Array
    last: Array
    count: Array


def _rates(routes, members, capacity, weights, rate_limit, present, has_caps, engine):
    """Max-min rates of the ``present`` flows, solved in full (the backward pass replays each interval)."""
    if engine is Engine.HOST:
        return host_solve(routes, capacity, weights, rate_limit, present)
    if members is None:  # traced routes without an incidence: the dense solve
        return solve_dense(routes, capacity, weights, rate_limit, present)
    return solve_sparse(routes, members, capacity, weights, rate_limit, candidates=_CANDIDATES,
                         has_caps=has_caps, present=present)


class _Refill(NamedTuple):
    """What the event loop carries between sparse solves to re-fill only what a completion changed."""

    structure: MaxMinStructure
    restart: Array     # int32[]  first pass to re-fill; -1: solve from scratch (after activations)
    removed: Array     # [L+1, 2] per-link weight and count of every completed flow
    snaps: Snapshots


def _snapshot_rows(F, L):
    """Passes with a snapshot (later ones resume by a full re-count, which is just slower)."""
    return max(1, min(_SNAPSHOT_ROWS, F + F // max(min(_CANDIDATES, F), 1) + 2, _SNAPSHOT_BUDGET // (3 * (L + 1))))


def _refill_rates(t, active, rf: _Refill):
    """Rates of the ``active`` flows, re-filling from ``rf.restart`` (from a snapshot when there is one)."""
    S = rf.snaps.ptr.shape[0]
    branches = [
        lambda: fill_start(t, active),
        lambda: fill_resume(t, active, rf.structure, rf.restart, rf.snaps, rf.removed),
        lambda: fill_start(t, active, rf.structure, rf.restart),
    ]
    which = jnp.where(rf.restart < 0, 0, jnp.where(rf.restart < S, 1, 2))
    s0 = jax.lax.switch(which, branches)
    st, snaps = fill(t, s0, candidates=_CANDIDATES, snaps=rf.snaps, removed=rf.removed)
    rates, structure = fill_result(t, st, active)
    return rates, rf._replace(structure=structure, snaps=snaps)


def _after_event(t, rf: _Refill, completing, arriving):
    """Record the completed flows' removal and where the next solve must start.

    A completed flow left every link that froze while it was active (its bottleneck, and any that froze
    before it when a pass deferred it): the re-fill starts at the earliest of those passes. The
    decisions of every earlier pass stand, since the flow crossed none of those bottlenecks.
    """
    H = t.r.shape[1]
    never = jnp.iinfo(jnp.int32).max
    pass_l = jnp.where(rf.structure.pass_of_link >= 0, rf.structure.pass_of_link, never)
    pass_f = jnp.append(rf.structure.pass_of_flow, never)

    def one():  # the usual case: one flow completes, a scatter over its own hops
        f = jnp.argmax(completing)
        vals = jnp.stack([jnp.broadcast_to(t.w[f], (H,)), jnp.ones(H, t.w.dtype)], axis=-1)
        return rf.removed.at[t.r[f]].add(vals), jnp.minimum(pass_f[f], jnp.min(pass_l[t.r[f]]))

    def many():  # a collective's equal flows complete together: one scatter over every flow
        done = jnp.append(completing, False)
        gone = link_sums(t.r, jnp.stack([jnp.where(done, t.w, 0), done.astype(t.w.dtype)], axis=-1),
                         t.cap.shape[0])
        first = jnp.minimum(pass_f, jnp.min(pass_l[t.r], axis=1))
        return rf.removed + gone, jnp.min(jnp.where(done, first, never))

    removed, first_pass = jax.lax.cond(jnp.sum(completing) == 1, one, many)
    restart = jnp.where(jnp.any(arriving), -1, first_pass).astype(jnp.int32)
    return rf._replace(restart=restart, removed=removed)


def _arrival(routes, start_times, latency):
    """Each flow's activation time: its start plus its route's latency."""
    lat = jnp.concatenate([latency, jnp.zeros((1,), latency.dtype)])
    return start_times + jnp.sum(lat[pad_routes(routes, latency.shape[0])], axis=1)


def _simulate(routes, members, sizes, capacity, weights, rate_limit, start_times, latency, has_caps, engine):
    F, _ = routes.shape
    L = capacity.shape[0]
    dtype = capacity.dtype
    max_events = 2 * F + 1  # every event activates or completes at least one flow
    arrival = _arrival(routes, start_times, latency)
    if engine is Engine.HOST:
        finish, *ev, undone = host_simulate(routes, sizes, capacity, weights, rate_limit, arrival, _TIE)
        finish = eqx.error_if(finish, undone > 0, EVENT_BOUND)
        return finish, Events(*ev)
    sparse = members is not None
    if sparse:
        t = sparse_tables(routes, members, capacity, weights, rate_limit, candidates=_CANDIDATES, has_caps=has_caps)

    def body(state):
        k, t_now, remaining, arrived, done, finish, rf, ev = state
        active = arrived & ~done
        if sparse:
            rates, rf = _refill_rates(t, active, rf)
        else:  # traced routes without an incidence: the dense solve, always in full
            rates, _ = solve_dense(routes, capacity, weights, rate_limit, active)
        tau = jnp.where(active, remaining / jnp.where(active, rates, 1), jnp.inf)
        tau_min = jnp.min(tau)
        t_arrive = jnp.min(jnp.where(arrived, jnp.inf, arrival))
        by_completion = t_now + tau_min <= t_arrive
        t_next = jnp.where(by_completion, t_now + tau_min, t_arrive)
        # ties: relative, and absolute at the clock's resolution (finishes closer than a few ulps of t
        # cannot be told apart, and leaving one behind would drive its remaining bytes negative)
        resolution = 4 * jnp.finfo(dtype).eps * jnp.abs(t_next)
        completing = active & (tau <= tau_min * (1 + _TIE) + resolution) & by_completion
        arriving = ~arrived & (arrival <= t_next)
        left = jnp.maximum(remaining - rates * (t_next - t_now), 0)  # rounding never leaves a negative remainder
        remaining = jnp.where(completing, 0, jnp.where(active, left, remaining))
        finish = jnp.where(completing, t_next, finish)
        cause = jnp.where(by_completion, jnp.argmax(completing), jnp.argmax(arriving)).astype(jnp.int32)
        ev = ev._replace(
            time=ev.time.at[k + 1].set(t_next),
            cause=ev.cause.at[k + 1].set(cause),
            completes=ev.completes.at[k + 1].set(by_completion),
            first=jnp.where(arriving, k + 1, ev.first),
            last=jnp.where(completing, k + 1, ev.last),
            count=k + 2,
        )
        if sparse:
            rf = _after_event(t, rf, completing, arriving)
        return k + 1, t_next, remaining, arrived | arriving, done | completing, finish, rf, ev

    t0 = jnp.min(arrival)
    arrived0 = arrival <= t0
    ev0 = Events(
        time=jnp.full(max_events + 1, jnp.inf, dtype).at[0].set(t0),
        cause=jnp.zeros(max_events + 1, jnp.int32).at[0].set(jnp.argmin(arrival).astype(jnp.int32)),
        completes=jnp.zeros(max_events + 1, bool),
        first=jnp.where(arrived0, 0, -1).astype(jnp.int32),
        last=jnp.full(F, -1, jnp.int32),
        count=jnp.int32(1),
    )
    rf0 = None
    if sparse:
        S = _snapshot_rows(F, L)
        rf0 = _Refill(
            structure=MaxMinStructure(  # nothing solved yet: the first event fills from scratch
                pass_of_flow=jnp.full(F, -1, jnp.int32), bottleneck=jnp.full(F, L, jnp.int32),
                pass_of_link=jnp.full(L + 1, -1, jnp.int32), share=jnp.full(L + 1, jnp.inf, dtype),
                weight_at=jnp.zeros(L + 1, dtype), num_passes=jnp.int32(0)),
            restart=jnp.int32(-1),
            removed=jnp.zeros((L + 1, 2), dtype),
            snaps=Snapshots(jnp.zeros((S, L + 1, 3), dtype), jnp.zeros(S, jnp.int32)),
        )
    init = (jnp.int32(0), t0, sizes, arrived0, jnp.zeros(F, bool), jnp.full(F, jnp.inf, dtype), rf0, ev0)
    state = jax.lax.while_loop(lambda s: ~jnp.all(s[4]) & (s[0] < max_events), body, init)
    finish, ev = state[5], state[7]
    finish = eqx.error_if(finish, ~jnp.all(state[4]), EVENT_BOUND)
    return finish, ev


@functools.partial(jax.custom_vjp, nondiff_argnums=(8, 9))
def _finish(routes, members, sizes, capacity, weights, rate_limit, start_times, latency, has_caps, engine):
    return _simulate(routes, members, sizes, capacity, weights, rate_limit, start_times, latency, has_caps,
                     engine)[0]


def _finish_fwd(routes, members, sizes, capacity, weights, rate_limit, start_times, latency, has_caps, engine):
    finish, ev = _simulate(routes, members, sizes, capacity, weights, rate_limit, start_times, latency, has_caps,
                           engine)
    # the host adjoint re-runs the event loop (recording each interval's solve), so it keeps its inputs
    host = (sizes, start_times, latency) if engine is Engine.HOST else None
    return finish, (routes, members, capacity, weights, rate_limit, ev, host)


def _finish_bwd(has_caps, engine, res, finish_bar):
    routes, members, capacity, weights, rate_limit, ev, host = res
    F, _ = routes.shape
    L = capacity.shape[0]
    dtype = capacity.dtype
    E = ev.time.shape[0]
    if engine is Engine.HOST:  # the whole recursion in one compiled kernel (kernels/_host_adjoint.py)
        sizes, start_times, latency = host
        size_bar, cap_bar, w_bar, lim_bar, t_bar = fluid_adjoint(
            routes, sizes, capacity, weights, rate_limit, _arrival(routes, start_times, latency), _TIE, ev,
            finish_bar)
        return (None, None, size_bar, cap_bar, w_bar, lim_bar, *_arrival_adjoint(routes, L, F, E, ev, t_bar))
    # d finish_f / d (time of the event at which f completes) = 1
    t_bar0 = jnp.zeros(E, dtype).at[jnp.where(ev.last >= 0, ev.last, E - 1)].add(finish_bar)
    window = pass_window(F, L, members, _CANDIDATES)

    def body(state):
        k, t_bar, mu, size_bar, cap_bar, w_bar, lim_bar = state
        active = (ev.first <= k) & (ev.first >= 0) & (k < ev.last)
        rates, st = _rates(routes, members, capacity, weights, rate_limit, active, has_caps, engine)
        dt = ev.time[k + 1] - ev.time[k]
        # flows that continue past event k+1 read t_{k+1} through x_d^k (t_{k+1} - t_k)
        t_bar = t_bar.at[k + 1].add(jnp.sum(jnp.where(active & (ev.last > k + 1), mu * rates, 0)))
        d = ev.cause[k + 1]
        defines = ev.completes[k + 1]
        mu_d = jnp.where(defines, -t_bar[k + 1] / rates[d], 0)
        mu = mu.at[d].add(mu_d)
        size_bar = size_bar.at[d].add(-mu_d)
        x_bar = jnp.where(active, mu * dt, 0)
        t_bar = t_bar.at[k].add(-jnp.sum(jnp.where(active, mu * rates, 0)))
        c_b, w_b, l_b = adjoint(routes, weights, rates, st, x_bar, window)
        return k - 1, t_bar, mu, size_bar, cap_bar + c_b, w_bar + w_b, lim_bar + l_b

    init = (ev.count - 2, t_bar0, jnp.zeros(F, dtype), jnp.zeros(F, dtype), jnp.zeros(L, dtype),
            jnp.zeros(F, dtype), jnp.zeros(F, dtype))
    _, t_bar, _, size_bar, cap_bar, w_bar, lim_bar = jax.lax.while_loop(lambda s: s[0] >= 0, body, init)
    return (None, None, size_bar, cap_bar, w_bar, lim_bar, *_arrival_adjoint(routes, L, F, E, ev, t_bar))


def _arrival_adjoint(routes, L, F, E, ev, t_bar):
    """(start_bar, lat_bar): activation events are at t = start_g + latency along g."""
    is_arrival = (jnp.arange(E) < ev.count) & ~ev.completes
    start_bar = jax.ops.segment_sum(jnp.where(is_arrival, t_bar, 0), ev.cause, num_segments=F)
    return start_bar, link_sums(pad_routes(routes, L), start_bar, L + 1)[:L]


_finish.defvjp(_finish_fwd, _finish_bwd)


@functools.partial(jax.jit, static_argnames=("has_caps", "engine"))
def _finish_jit(routes, members, sizes, capacity, weights, rate_limit, start_times, latency, has_caps, engine):
    return _finish(routes, members, sizes, capacity, weights, rate_limit, start_times, latency, has_caps, engine)


@functools.partial(jax.jit, static_argnames=("has_caps", "engine"))
def _simulate_jit(routes, members, sizes, capacity, weights, rate_limit, start_times, latency, has_caps, engine):
    return _simulate(routes, members, sizes, capacity, weights, rate_limit, start_times, latency, has_caps, engine)


def _prepare_fluid(routes, sizes, capacity, weights, rate_limit, start_times, latency, incidence, check,
                   transport=None, engine=None, reverse=None, packet_links=None):
    transport = transport_profile(transport)
    engine = engine_for(engine)
    # a window, or a marking ramp's mean rate, caps flows
    has_caps = rate_limit is not None or (transport is not None and (transport.window is not None
                                                                     or transport.mark_packets > 0))
    routes, capacity, weights, rate_limit = prepare(routes, capacity, weights, rate_limit, check)
    F, L = routes.shape[0], capacity.shape[0]
    dtype = capacity.dtype
    sizes = jnp.asarray(sizes, dtype)
    start_times = jnp.zeros(F, dtype) if start_times is None else jnp.asarray(start_times, dtype)
    latency = jnp.zeros(L, dtype) if latency is None else jnp.asarray(latency, dtype)
    _checks.check_shape("sizes", sizes, (F,))
    _checks.check_shape("start_times", start_times, (F,))
    _checks.check_shape("latency", latency, (L,))
    if check:
        _checks.check_values("sizes", sizes, positive=True, allow_inf=False)
        _checks.check_values("start_times", start_times, allow_inf=False)
        _checks.check_values("latency", latency, nonnegative=True, allow_inf=False)
    if reverse is not None and not _checks.is_traced(reverse):
        reverse = np.asarray(reverse)
        if reverse.shape != (L,) or not np.issubdtype(reverse.dtype, np.integer):
            raise ValueError(f"reverse: expected int[{L}] (a link per link, -1 for none), got {reverse.dtype}"
                             f"{list(reverse.shape)}")
        bad = np.flatnonzero((reverse < -1) | (reverse >= L))
        if bad.size:
            raise ValueError(f"reverse[{bad[0]}]: must name a link in [0, {L}) or be -1, got {reverse[bad[0]]}")
    if packet_links is not None:  # its shape and dtype are known, traced or not
        if not _checks.is_traced(packet_links):
            packet_links = np.asarray(packet_links)
        if jnp.shape(packet_links) != (L,) or packet_links.dtype != bool:
            raise ValueError(f"packet_links: expected bool[{L}] (whether the transport runs on each link), got "
                             f"{packet_links.dtype}{list(jnp.shape(packet_links))}")
    if transport is not None:  # a profile only reshapes the inputs (see kernels/_transport.py)
        sizes, capacity, weights, rate_limit, delay = transport_inputs(transport, routes, sizes, capacity, latency,
                                                                       weights, rate_limit, reverse,
                                                                       packet_links=packet_links)
        start_times = start_times + delay
    members = None
    if engine is Engine.XLA or incidence is not None:  # the host engine reads the routes (see maxmin_rates)
        members = members_for(routes, L, incidence, check)
    members = None if engine is Engine.HOST else members
    return routes, members, sizes, capacity, weights, rate_limit, start_times, latency, has_caps, engine


def completion_times(
    routes: Int[Array, "F H"],
    sizes: Float[Array, "F"],
    capacity: Float[Array, "L"],
    *,
    weights: Float[Array, "F"] | None = None,
    rate_limit: Float[Array, "F"] | None = None,
    start_times: Float[Array, "F"] | None = None,
    latency: Float[Array, "L"] | None = None,
    incidence: Incidence | None = None,
    check: bool = True,
    transport: str | Transport | None = None,
    engine: Engine | str | None = None,
    reverse: Int[Array, "L"] | None = None,
    packet_links: Bool[Array, "L"] | None = None,
) -> Float[Array, "F"]:
    """Absolute time at which each flow's last byte is sent, under fluid max-min sharing.

    Args:
      routes: int[F, H] link indices, -1 pads.  sizes: float[F] bytes > 0.
      capacity: float[L] bytes/s > 0 (inf allowed).  weights, rate_limit: as in ``maxmin_rates``.
      start_times: float[F] seconds (default 0).  latency: float[L] seconds per link (default 0);
        a flow starts consuming bandwidth at start_time + the sum of its links' latencies.
      incidence: ``fm.incidence(routes, L)``, prepared once, as in ``maxmin_rates``: without it an
        eager call builds one per call, and a call whose routes are traced (under ``jax.jit``, NumPy
        routes too) takes the dense solve in every event; inside your own ``jax.jit``, pass it (as an
        argument or a constant) to keep the sparse, resumable solve.
      check: validate concrete inputs (``ValueError`` naming the argument, index and value).
      transport: None (pure fluid), a profile name (``"tcp"``/``"newreno"``, ``"cubic"``, ``"dctcp"``:
        fitted against ns-3) or a ``Transport``: header goodput and contention on capacity, a start
        delay (handshake, slow start, queueing, DCTCP's marking ramp), regrowth bytes, RTT-dependent
        weights and window caps (``kernels/_transport.py``). The named profiles take a link that every
        flow crossing it enters at its first packet hop for a sender's NIC, which fair-queues its flows
        and is no contended port (``Transport.sender_fair_queue``): routes that start at their hosts.
      reverse: int[L] the link carrying each link's ACKs back (-1: none; ``fabric.reverse_links(src,
        dst)`` from the links' ends, ``FabricInfo.reverse``): with a transport profile, ACKs take their
        bytes from those links. The named profiles were fitted with it; without it ACKs are free
        (1.8% optimistic on a link that carries data both ways).
      packet_links: bool[L] the links a transport profile runs on (``FabricInfo.packet_links``: every
        tier but scale-up), or None: every link. Links off it keep their capacity, and flows that
        cross none of it keep their fluid inputs.
      engine: an :class:`Engine` or its name: ``"host"`` (the compiled CPU event loop, through a
        callback; batched under ``vmap``), ``"xla"`` (the JAX event loop, for accelerators) or None /
        ``"auto"`` (host on a CPU backend, else xla), as in ``maxmin_rates``. Both give the same
        events, finish times and gradients.

    Returns:
      float[F] finish times in seconds.

    The event loop is a ``lax.while_loop`` bounded by 2F+1 events (each event activates or
    completes at least one flow); should the bound ever be hit, an ``equinox`` runtime error is
    raised instead of returning unfinished flows. Jittable, vmappable, and differentiable wrt sizes,
    capacity, weights, rate_limit, start_times and latency where the event order is locally stable.

    Example: two flows share a 10 B/s link at 5 B/s each; the 10-byte one ends at 2 s, then the
    other has the link alone for its last 20 bytes. With 0.5 s of link latency both start later.

    >>> import flowmodel as fm
    >>> fm.completion_times([[0], [0]], [10.0, 30.0], [10.0]).tolist()
    [2.0, 4.0]
    >>> fm.completion_times([[0], [0]], [10.0, 30.0], [10.0], latency=[0.5]).tolist()
    [2.5, 4.5]
    """
    args = _prepare_fluid(routes, sizes, capacity, weights, rate_limit, start_times, latency, incidence, check,
                          transport, engine, reverse, packet_links)
    return _finish_jit(*args)


def completion_events(routes, sizes, capacity, *, weights=None, rate_limit=None, start_times=None,
                      latency=None, incidence: Incidence | None = None, check: bool = True,
                      transport: str | Transport | None = None,
                      engine: Engine | str | None = None, reverse=None,
                      packet_links=None) -> tuple[Array, Events]:
    """``completion_times`` plus the :class:`Events` it simulated (how many, when, and why)."""
    args = _prepare_fluid(routes, sizes, capacity, weights, rate_limit, start_times, latency, incidence, check,
                          transport, engine, reverse, packet_links)
    return _simulate_jit(*args)


class IntervalLoads(NamedTuple):
    """Per-link load over the intervals of a fluid simulation (``interval_loads``).

    peak:    float[L]  the largest sum of rates on each link in any interval of positive length (bytes/s)
    carried: float[L]  bytes each link carried: the sum over intervals of its rates x the interval's length
    """

    peak: Array
    carried: Array


@functools.partial(jax.jit, static_argnames=("has_caps", "engine"))
def _interval_loads_jit(routes, members, capacity, weights, rate_limit, ev, has_caps, engine):
    L = capacity.shape[0]
    padded = pad_routes(routes, L)

    def body(state):
        k, peak, carried = state
        active = (ev.first <= k) & (ev.first >= 0) & (k < ev.last)  # as the backward pass replays interval k
        rates, _ = _rates(routes, members, capacity, weights, rate_limit, active, has_caps, engine)
        load = link_sums(padded, jnp.where(active, rates, 0), L + 1)[:L]
        dt = ev.time[k + 1] - ev.time[k]
        return k + 1, jnp.where(dt > 0, jnp.maximum(peak, load), peak), carried + load * dt

    zero = jnp.zeros(L, capacity.dtype)
    _, peak, carried = jax.lax.while_loop(lambda s: s[0] < ev.count - 1, body, (jnp.int32(0), zero, zero))
    return IntervalLoads(peak, carried)


def _host_interval_loads(routes, capacity, weights, rate_limit, ev) -> IntervalLoads:
    """``interval_loads`` on the host engine, without a compiled program: the intervals' solves in
    batches (one compiled solve per interval, spread over the cores), a NumPy sum per interval."""
    r = np.asarray(routes)
    cap, w, lim = (np.asarray(a, np.float64) for a in (capacity, weights, rate_limit))
    time, first, last = (np.asarray(a) for a in (ev.time, ev.first, ev.last))
    F, H = r.shape
    L = cap.shape[0]
    hops = np.where(r < 0, L, r).reshape(-1)
    peak, carried = np.zeros(L), np.zeros(L)
    count = int(np.asarray(ev.count)) - 1
    chunk = max(1, (1 << 23) // (F + 3 * (L + 1)))  # a batch's outputs stay within ~64 MB
    for k0 in range(0, count, chunk):
        ks = np.arange(k0, min(count, k0 + chunk))[:, None]
        active = (first <= ks) & (first >= 0) & (ks < last)
        rates, *_, left = solve(r, cap, w, lim, active)
        if np.any(left > 0):
            raise ValueError(NO_PROGRESS)
        for k, row in zip(ks[:, 0], np.where(active, rates, 0.0)):
            load = np.bincount(hops, weights=np.repeat(row, H), minlength=L + 1)[:L]
            dt = time[k + 1] - time[k]
            if dt > 0:
                np.maximum(peak, load, out=peak)
            carried += load * dt
    return IntervalLoads(peak, carried)


def interval_loads(routes, capacity, events: Events, *, weights=None, rate_limit=None,
                   incidence: Incidence | None = None, check: bool = True,
                   engine: Engine | str | None = None) -> IntervalLoads:
    """Per-link peak rate and carried bytes of a simulation that ``completion_events`` recorded.

    Interval k (from event k to event k+1) runs the max-min rates of the flows active in it, re-solved
    as the backward pass does; ``routes``, ``capacity``, ``weights`` and ``rate_limit`` must be those
    the simulation ran with (their transport transform applied: pass ``transport=None`` there).
    A report, for concrete inputs: not differentiable, not for use under ``jit``; one solve per
    interval (on the host engine, without compiling a program).

    Example: two flows share a 10 B/s link at 5 B/s each until the 10-byte one ends at 2 s; the other
    then has the link alone. Link 1 carries only the second flow: 5 B/s, then 10 B/s.

    >>> import flowmodel as fm
    >>> routes = [[0, -1], [0, 1]]
    >>> _, events = fm.completion_events(routes, [10.0, 30.0], [10.0, 20.0])
    >>> loads = fm.kernels.interval_loads(routes, [10.0, 20.0], events)
    >>> loads.peak.tolist(), loads.carried.tolist()
    ([10.0, 10.0], [40.0, 30.0])
    """
    if _checks.is_traced(routes, capacity, weights, rate_limit, *events):
        raise ValueError("interval_loads: needs concrete inputs (a report, computed outside jit and vmap)")
    has_caps = rate_limit is not None
    engine = engine_for(engine)
    routes, capacity, weights, rate_limit = prepare(routes, capacity, weights, rate_limit, check)
    if engine is Engine.HOST:
        return _host_interval_loads(routes, capacity, weights, rate_limit, events)
    members = members_for(routes, capacity.shape[0], incidence, check)
    return _interval_loads_jit(routes, members, capacity, weights, rate_limit, events, has_caps, engine)


def event_count(events: Events) -> int:
    """Number of events after the first activation."""
    return int(np.asarray(events.count)) - 1
