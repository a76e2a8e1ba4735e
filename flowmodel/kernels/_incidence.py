"""Routes as link incidence: -1 -> dummy-link padding, the prepared link-membership table, per-link sums,
and the input checks and defaults shared by the kernels.

Routes are int[F, H] with -1 padding; ``pad_routes`` maps -1 to a dummy link L (infinite capacity, never
a bottleneck), so per-link reductions have L+1 segments and the last one is discarded or ignored.
The sparse solves also need the opposite view, the flows of each link: an :class:`Incidence`, built once
with NumPy from concrete routes and passed to the kernels (also into a caller's ``jit``/``vmap``) as an
argument. Nothing here is cached between calls.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .. import _checks
from .._types import Array, Int

# The table's width (largest link degree) is rounded up to a multiple of this, so that similar instances
# share one compilation.
DEGREE_BUCKET = 16


class Incidence(eqx.Module):
    """The flows of each link, prepared once from concrete routes by :func:`incidence`.

    members:   int32[L+1, D]  flows crossing each link in increasing order, padded with F; row L (the
                              dummy link) is empty; D is the largest degree rounded up to a multiple of 16
    degree:    int32[L+1]     number of flows crossing each link
    num_flows: int            F, the number of routes it was built from (static)
    num_links: int            L (static)

    A PyTree: pass it to ``jax.jit`` / ``jax.vmap`` (unbatched) as an argument.
    """

    members: Int[Array, "L+1 D"]
    degree: Int[Array, "L+1"]
    num_flows: int = eqx.field(static=True)
    num_links: int = eqx.field(static=True)


def incidence(routes: Int[Array, "F H"], num_links: int) -> Incidence:
    """The :class:`Incidence` of concrete ``routes`` over ``num_links`` links (NumPy, O(F x H)).

    Build it once per set of routes and pass it as ``incidence=`` to :func:`maxmin_rates`,
    :func:`maxmin_structure` and :func:`completion_times`; inside a ``jax.jit`` whose routes are
    arguments, this is what keeps the sparse solve (without it, traced routes take the dense one).

    >>> import flowmodel as fm
    >>> inc = fm.incidence([[0, 1], [0, -1], [1, -1]], 2)
    >>> inc.members[:, :3].tolist(), inc.degree.tolist()
    ([[0, 1, 3], [0, 2, 3], [3, 3, 3]], [2, 2, 0])
    >>> fm.maxmin_rates([[0, 1], [0, -1], [1, -1]], [10.0, 4.0], incidence=inc).tolist()
    [2.0, 8.0, 2.0]
    """
    if _checks.is_traced(routes):
        raise ValueError("incidence needs concrete routes: build it outside jit/vmap and pass it in as an argument")
    num_links = int(num_links)
    if num_links < 0:
        raise ValueError(f"num_links must be >= 0, got {num_links}")
    _checks.check_routes(routes, num_links)
    return _build(np.asarray(routes), num_links)


def _build(r: np.ndarray, num_links: int) -> Incidence:
    F, H = r.shape
    flat = r.reshape(-1)
    hops = np.flatnonzero(flat >= 0)
    link = flat[hops]
    # stable sort by link, so each link lists its flows in increasing order; a 16-bit key sorts by radix
    key = link.astype(np.uint16) if num_links < 1 << 16 else link
    order = np.argsort(key, kind="stable")
    link, flow = link[order], (hops[order] // H).astype(np.int32)
    degree = np.bincount(link, minlength=num_links + 1)
    start = np.concatenate([[0], np.cumsum(degree)[:-1]])
    slot = np.arange(link.size) - start[link]
    width = max(int(degree.max(initial=0)), 1)
    width += -width % DEGREE_BUCKET
    members = np.full((num_links + 1, width), F, dtype=np.int32)
    members[link, slot] = flow
    return Incidence(jnp.asarray(members), jnp.asarray(degree, jnp.int32), F, num_links)


def members_for(routes, num_links: int, prepared: Incidence | None, check: bool) -> Array | None:
    """The link-membership table a solve reads: that of ``prepared`` (the caller's ``incidence=``,
    checked against the routes), one built for this call from concrete routes, or None for traced
    routes without one (the dense solve). ``routes`` come from ``prepare``: inside a trace, routes that
    were a NumPy constant are traced by then too (``jnp.asarray``), and take the dense solve as well."""
    F = int(np.shape(routes)[0])
    if prepared is None:
        return None if _checks.is_traced(routes) else _build(np.asarray(routes), num_links).members
    if not isinstance(prepared, Incidence):
        raise ValueError(f"incidence must be an Incidence (fm.incidence(routes, num_links)), got "
                         f"{type(prepared).__name__}")
    if (prepared.num_flows, prepared.num_links) != (F, num_links):
        raise ValueError(f"incidence was built for (flows, links) = ({prepared.num_flows}, {prepared.num_links}), "
                         f"but routes and capacity give ({F}, {num_links})")
    if check and not _checks.is_traced(routes, prepared.degree):
        r = np.asarray(routes)
        want = np.bincount(r[r >= 0].astype(np.int64), minlength=num_links + 1)
        got = np.asarray(prepared.degree)
        bad = _checks.first_bad(want != got)
        if bad is not None:
            (link,) = bad
            raise ValueError(f"incidence does not match routes: link {link} carries {want[link]} flows in routes "
                             f"but {got[link]} in incidence (built from other routes?)")
    return prepared.members


def pad_routes(routes, num_links: int):
    """``routes`` with -1 replaced by the dummy link ``num_links``."""
    return jnp.where(routes < 0, num_links, routes)


def link_sums(padded, values, num_segments: int):
    """Per-link sums over every hop of per-flow ``values`` ([F] or [F, C] -> [num_segments] or
    [num_segments, C]), in one scatter; ``padded`` is int[F, H] from :func:`pad_routes`."""
    H = padded.shape[1]
    values = jnp.asarray(values)
    out = jnp.zeros((num_segments,) + values.shape[1:], values.dtype)
    return out.at[padded.reshape(-1)].add(jnp.repeat(values, H, axis=0))


def prepare(routes, capacity, weights, rate_limit, check: bool):
    """Validate (outside jit, on concrete values) and broadcast defaults: (routes int32, capacity float,
    weights, rate_limit), the last two in capacity's dtype."""
    if np.ndim(capacity) != 1:
        raise ValueError(f"capacity must be 1-D [L], got shape {tuple(np.shape(capacity))}")
    _checks.check_routes(routes, np.shape(capacity)[0], values=check)
    F = np.shape(routes)[0]
    capacity = jnp.asarray(capacity)
    if not jnp.issubdtype(capacity.dtype, jnp.floating):
        capacity = capacity.astype(jnp.result_type(float))
    dtype = capacity.dtype
    weights = jnp.ones(F, dtype) if weights is None else jnp.asarray(weights, dtype)
    rate_limit = jnp.full(F, jnp.inf, dtype) if rate_limit is None else jnp.asarray(rate_limit, dtype)
    _checks.check_shape("weights", weights, (F,))
    _checks.check_shape("rate_limit", rate_limit, (F,))
    if check:
        _checks.check_values("capacity", capacity, positive=True)
        _checks.check_values("weights", weights, positive=True, allow_inf=False)
        _checks.check_values("rate_limit", rate_limit, positive=True)
        if not _checks.is_traced(routes, capacity, rate_limit):
            r = np.asarray(routes)
            cap_ext = np.append(np.asarray(capacity, np.float64), np.inf)
            route_cap = cap_ext[np.where(r < 0, len(cap_ext) - 1, r)].min(axis=1)
            unbounded = np.flatnonzero(np.isinf(route_cap) & np.isinf(np.asarray(rate_limit)))
            if unbounded.size:
                f = unbounded[0]
                why = "has an empty route" if (r[f] < 0).all() else "crosses only infinite-capacity links"
                raise ValueError(f"flow {f} {why} and rate_limit[{f}] = inf: its rate would be unbounded")
    return jnp.asarray(routes, jnp.int32), capacity, weights, rate_limit
