"""Exact weighted max-min fair rates (progressive filling), jittable, vmappable and differentiable.

Two engines give the same rates. ``host`` (the default on a CPU backend) runs the compiled sequential
solve of ``_host`` through a callback, batched over a ``vmap``; ``xla`` (the default on accelerators)
is the water-filling of ``_waterfill`` (sparse passes through the routes' :class:`~flowmodel.Incidence`,
or the dense solve for traced routes without one). The gradient is a custom VJP, the adjoint of the
replay of the solve's passes (``_adjoint``), in JAX for both.
"""

from __future__ import annotations

import functools

import jax

from .._types import Array, Float, Int
from ._adjoint import adjoint
from ._engine import Engine, engine_for
from ._host import HOST_WINDOW, host_solve
from ._incidence import Incidence, members_for, prepare
from ._waterfill import MaxMinStructure, pass_window, solve_dense, solve_sparse

_CANDIDATES = 64  # links examined per pass by the sparse solve; any value >= 1 gives the same rates


def _forward(routes, members, capacity, weights, rate_limit, candidates, has_caps, engine):
    if engine is Engine.HOST:
        return host_solve(routes, capacity, weights, rate_limit)
    if members is None:
        return solve_dense(routes, capacity, weights, rate_limit)
    return solve_sparse(routes, members, capacity, weights, rate_limit, candidates=candidates, has_caps=has_caps)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _maxmin(routes, members, capacity, weights, rate_limit, candidates, has_caps, engine=Engine.XLA):
    return _forward(routes, members, capacity, weights, rate_limit, candidates, has_caps, engine)[0]


def _maxmin_fwd(routes, members, capacity, weights, rate_limit, candidates, has_caps, engine=Engine.XLA):
    rates, st = _forward(routes, members, capacity, weights, rate_limit, candidates, has_caps, engine)
    return rates, (routes, members, weights, rates, st)


def _maxmin_bwd(candidates, has_caps, engine, res, g):
    routes, members, weights, rates, st = res
    if engine is Engine.HOST:
        window = min(routes.shape[0], HOST_WINDOW)
    else:
        window = pass_window(routes.shape[0], st.share.shape[0] - 1, members, candidates)
    cbar, wbar, lbar = adjoint(routes, weights, rates, st, g, window)
    return None, None, cbar, wbar, lbar


_maxmin.defvjp(_maxmin_fwd, _maxmin_bwd)


@functools.partial(jax.jit, static_argnames=("candidates", "has_caps", "engine"))
def _rates_jit(routes, members, capacity, weights, rate_limit, candidates, has_caps, engine=Engine.XLA):
    return _maxmin(routes, members, capacity, weights, rate_limit, candidates, has_caps, engine)


@functools.partial(jax.jit, static_argnames=("candidates", "has_caps", "engine"))
def _structure_jit(routes, members, capacity, weights, rate_limit, candidates, has_caps, engine=Engine.XLA):
    return _forward(routes, members, capacity, weights, rate_limit, candidates, has_caps, engine)


def solve_inputs(routes, capacity, weights, rate_limit, incidence, check, engine):
    """The checked inputs of a solve and its engine: (routes, members, capacity, weights, rate_limit, engine).

    The host engine reads the routes themselves (even traced ones arrive concrete in its callback), so
    it needs no membership table; a given ``incidence`` is still checked against the routes."""
    engine = engine_for(engine)
    routes, capacity, weights, rate_limit = prepare(routes, capacity, weights, rate_limit, check)
    members = None
    if engine is Engine.XLA or incidence is not None:
        members = members_for(routes, capacity.shape[0], incidence, check)
    return routes, None if engine is Engine.HOST else members, capacity, weights, rate_limit, engine


def maxmin_rates(
    routes: Int[Array, "F H"],
    capacity: Float[Array, "L"],
    *,
    weights: Float[Array, "F"] | None = None,
    rate_limit: Float[Array, "F"] | None = None,
    incidence: Incidence | None = None,
    check: bool = True,
    engine: Engine | str | None = None,
) -> Float[Array, "F"]:
    """Exact weighted max-min fair rates with per-flow caps.

    Args:
      routes: int[F, H] link indices of each flow's route, -1 pads (H = longest route).
      capacity: float[L] bytes/s, > 0; inf is an unconstrained link.
      weights: float[F] > 0; a flow gets ``weight x`` the fair share. Default 1.
      rate_limit: float[F] > 0 or inf; per-flow cap (NIC line rate, window limit). Default inf.
      incidence: ``fm.incidence(routes, L)``, the flows of each link, built once for these routes
        (an :class:`Incidence`; it must match the routes' F and L, else ``ValueError``). Without it an
        eager call (``vmap`` over capacity included) builds one for itself (O(F x H) NumPy work per
        call), and a call whose routes are traced (under ``jax.jit``, where even NumPy routes become
        traced values, or batched by ``vmap``) takes the dense solve, which reads every flow in every
        pass (same rates, slower on large instances): inside your own ``jax.jit``, pass ``incidence``
        (as an argument or a constant) to keep the sparse solve.
      check: validate concrete inputs and raise ``ValueError`` naming the argument and the bad
        index/value (with ``incidence``, also that its per-link flow counts match the routes). Shapes
        are always checked; values only outside a trace.
      engine: an :class:`Engine` or its name. ``"host"``: the compiled CPU solve through a callback
        (under ``jit`` and ``vmap`` too, where one callback solves the whole batch on the host's cores;
        it needs no ``incidence``). ``"xla"``: the JAX water-filling, for accelerators. None /
        ``"auto"``: host when JAX's default backend is the CPU, else xla. Both give the same rates and
        gradients.

    Returns:
      float[F] rates in bytes/s, in capacity's dtype. A flow with an empty route gets its rate_limit.

    Jittable and vmappable (batch over capacity / weights / rate_limit with ``jax.vmap``).
    ``jax.grad`` gives the exact derivative wherever the bottleneck structure is locally stable.
    The solve is a bounded ``lax.while_loop``: every pass freezes at least the flows at the global
    minimum level, so F + 1 passes always suffice; the loop stops at a slightly larger bound and
    raises (``equinox`` runtime error) rather than return unfrozen flows.

    Example: flow 0 crosses both links; link 1 (4 B/s) is the bottleneck of flows 0 and 2, and
    flow 1 takes what flow 0 leaves of link 0 (10 B/s).

    >>> import flowmodel as fm
    >>> fm.maxmin_rates([[0, 1], [0, -1], [1, -1]], [10.0, 4.0]).tolist()
    [2.0, 8.0, 2.0]
    >>> fm.maxmin_rates([[0, 1], [0, -1], [1, -1]], [10.0, 4.0], weights=[1.0, 1.0, 3.0]).tolist()
    [1.0, 9.0, 3.0]

    Inside a jitted function of the routes, with the incidence prepared once outside:

    >>> import jax, numpy as np
    >>> routes = np.array([[0, 1], [0, -1], [1, -1]])
    >>> solve = jax.jit(lambda r, c, inc: fm.maxmin_rates(r, c, incidence=inc))
    >>> solve(routes, np.array([10.0, 4.0]), fm.incidence(routes, 2)).tolist()
    [2.0, 8.0, 2.0]
    """
    has_caps = rate_limit is not None
    *args, engine = solve_inputs(routes, capacity, weights, rate_limit, incidence, check, engine)
    return _rates_jit(*args, _CANDIDATES, has_caps, engine)


def maxmin_structure(routes, capacity, *, weights=None, rate_limit=None, incidence: Incidence | None = None,
                     check: bool = True, engine: Engine | str | None = None) -> tuple[Array, MaxMinStructure]:
    """Rates and the :class:`MaxMinStructure` the solve found (bottlenecks, passes, shares).

    Arguments as in :func:`maxmin_rates`. The structure is that of the engine that ran: the host
    engine's passes are the depths of the bottleneck chain (a link's pass is one more than the largest
    pass of a flow on it that froze before it); the xla engine's are those of the sparse solve when it
    runs (an ``incidence`` given, or an eager call), else those of the dense solve.
    """
    has_caps = rate_limit is not None
    *args, engine = solve_inputs(routes, capacity, weights, rate_limit, incidence, check, engine)
    return _structure_jit(*args, _CANDIDATES, has_caps, engine)
