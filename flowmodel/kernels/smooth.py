"""Smooth relaxation of weighted max-min rates: alpha-fair allocation, differentiable everywhere.

The weighted alpha-fair allocation maximises ``sum_f w_f**a x_f**(1-a) / (1-a)`` subject to link
capacities and per-flow caps. Writing each link's dual price as ``sigma_l**(-a)``, its optimality
conditions say that a flow's normalised rate is the power-mean soft-min of the levels on its route,

    x_f / w_f = (sum_{l in f} sigma_l**(-a) + (rate_limit_f / w_f)**(-a)) ** (-1/a),

and that every link with a finite level is exactly full. As ``a -> inf`` the soft-min becomes a min
and the allocation becomes weighted max-min (Mo & Walrand, 2000); the relative gap is O(log(H) / a).
The levels are found by a fixed number of damped multiplicative updates in log space,
``log sigma_l += step * (log c_l - log load_l)``; links that are not binding see their level grow
without bound and drop out of the soft-min. Gradients flow through the unrolled updates (with
rematerialisation, so memory is O(iterations x L), not O(iterations x F x H)).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .._types import Array, Float, Int
from ._incidence import link_sums, pad_routes, prepare


@functools.partial(jax.jit, static_argnames=("iterations",))
def _smooth(routes, capacity, weights, rate_limit, sharpness, iterations, step):
    L = capacity.shape[0]
    r = pad_routes(routes, L)
    finite = jnp.isfinite(capacity)
    log_c = jnp.log(jnp.where(finite, capacity, 1))
    capped = jnp.isfinite(rate_limit)  # double where: no inf * 0 in the gradient of uncapped flows
    log_cap_level = jnp.where(capped, jnp.log(jnp.where(capped, rate_limit, 1.0)) - jnp.log(weights), jnp.inf)

    def per_link(values):
        return link_sums(r, values, L + 1)[:L]

    def levels(log_sigma):
        ls = jnp.concatenate([jnp.where(finite, log_sigma, jnp.inf), jnp.full((1,), jnp.inf, log_sigma.dtype)])
        terms = jnp.concatenate([-sharpness * ls[r], -sharpness * log_cap_level[:, None]], axis=1)
        return jnp.exp(-jax.nn.logsumexp(terms, axis=1) / sharpness)

    @jax.checkpoint
    def update(log_sigma, _):
        load = per_link(weights * levels(log_sigma))
        ok = load > 0
        delta = jnp.where(ok, log_c - jnp.log(jnp.where(ok, load, 1)), 1.0)
        return log_sigma + step * delta, None

    weight_sum = per_link(weights)
    has_flows = weight_sum > 0
    log_sigma0 = log_c - jnp.log(jnp.where(has_flows, weight_sum, 1))
    log_sigma, _ = jax.lax.scan(update, log_sigma0, None, length=iterations)
    return weights * levels(log_sigma)


def smooth_maxmin_rates(
    routes: Int[Array, "F H"],
    capacity: Float[Array, "L"],
    *,
    weights: Float[Array, "F"] | None = None,
    rate_limit: Float[Array, "F"] | None = None,
    sharpness: float = 64.0,
    iterations: int = 300,
    step: float = 0.8,
    check: bool = True,
) -> Float[Array, "F"]:
    """Alpha-fair rates (``alpha = sharpness``): a smooth stand-in for :func:`maxmin_rates` in search.

    Same arguments and units as :func:`maxmin_rates`. Larger ``sharpness`` is closer to exact max-min
    (relative gap O(log(H) / sharpness)) but needs more ``iterations`` to converge; report final
    numbers with the exact kernel. Differentiable everywhere wrt capacity, weights and rate_limit.

    >>> import numpy as np, flowmodel as fm
    >>> routes, capacity = [[0, 1], [0, -1], [1, -1]], [10.0, 4.0]
    >>> np.round(np.asarray(fm.smooth_maxmin_rates(routes, capacity, sharpness=64.0)), 2).tolist()
    [2.0, 8.0, 2.0]
    """
    if not sharpness >= 1:
        raise ValueError(f"sharpness must be >= 1, got {sharpness}")
    if not (isinstance(iterations, int) and iterations >= 1):
        raise ValueError(f"iterations must be a positive int, got {iterations!r}")
    if not 0 < step <= 1:
        raise ValueError(f"step must be in (0, 1], got {step}")
    routes, capacity, weights, rate_limit = prepare(routes, capacity, weights, rate_limit, check)
    return _smooth(routes, capacity, weights, rate_limit, sharpness, iterations, step)
