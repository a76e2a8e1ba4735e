"""The max-min VJP: the adjoint of the level-by-level replay of a solve's passes.

Rates are piecewise linear in (capacity, weights, rate_limit). The forward solve records the structure
(each flow's pass and bottleneck, each bottleneck link's pass and share: ``MaxMinStructure``); the
adjoint solves the replay

    s_b = (c_b - sum_{f in b, pass_f < pass_b} x_f) / sum_{f in b, pass_f = pass_b} w_f
    x_f = w_f * s_{b_f}   or   x_f = rate_limit_f   (capped flows)

backwards over the passes. That is the exact derivative wherever the structure is locally stable,
and a one-sided derivative at ties.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._incidence import pad_routes
from ._waterfill import MaxMinStructure, safe_div


def adjoint(routes, weights, rates, st: MaxMinStructure, g, window: int | None = None):
    """Reverse-mode adjoint of the level-by-level replay (module docstring): (c_bar, w_bar, limit_bar).

    With ``window`` (at most that many flows froze in any pass) each reverse pass reads only the flows
    of its own pass, found by sorting flows by pass once; without it, every pass reads all flows.
    """
    F, _ = routes.shape
    L = st.share.shape[0] - 1
    r = pad_routes(routes, L)
    capped = st.bottleneck == L
    finite = jnp.isfinite(rates)
    g = jnp.where(finite, g, 0)
    level = jnp.where(finite, rates / weights, 0)
    share_b = jnp.where(capped | ~finite, 0, st.share[st.bottleneck])
    # sbar (each link's adjoint from the flows it froze) accumulates over the reverse passes: a deferred
    # flow's pass comes after its bottleneck's, so it is added before the link is done.
    links_done = lambda s_hat, sbar, p: s_hat + jnp.where(  # noqa: E731
        (st.pass_of_link == p) & (st.weight_at > 0), safe_div(sbar, st.weight_at), 0)

    if window is None:
        def body(state):
            p, s_hat, xbar, sbar = state
            now = st.pass_of_flow == p
            # x_f is read only by links that froze later: their adjoints are already in s_hat.
            xb = jnp.where(now, g - jnp.sum(s_hat[r], axis=1), 0)
            sbar = sbar + jax.ops.segment_sum(jnp.where(capped, 0, xb * weights), st.bottleneck, num_segments=L + 1)
            return p - 1, links_done(s_hat, sbar, p), xbar + xb, sbar

        init = (st.num_passes - 1, jnp.zeros(L + 1, rates.dtype), jnp.zeros(F, rates.dtype),
                jnp.zeros(L + 1, rates.dtype))
        _, s_hat, xbar, _ = jax.lax.while_loop(lambda s: s[0] >= 0, body, init)
    else:
        # empty-route flows froze at their cap before any pass: x_bar = g, and they touch no link
        empty = jnp.all(routes < 0, axis=1)
        key = jnp.where(empty, -1, st.pass_of_flow)
        order = jnp.argsort(key).astype(jnp.int32)
        sorted_key = jnp.concatenate([key[order], jnp.full((window,), -2, key.dtype)])
        order = jnp.concatenate([order, jnp.full((window,), F, jnp.int32)])
        r_ext = jnp.concatenate([r, jnp.full((1, r.shape[1]), L, r.dtype)])
        g_ext, w_ext = jnp.append(g, 0), jnp.append(weights, 0)
        capped_ext, bneck_ext = jnp.append(capped, True), jnp.append(st.bottleneck, L)

        first_of = lambda p: jnp.searchsorted(sorted_key[:F], p, side="left").astype(jnp.int32)  # noqa: E731

        def body(state):  # the next ``window`` flows of pass p (a pass of tied links may hold more)
            p, start, s_hat, xbar, sbar = state
            f = jax.lax.dynamic_slice(order, (start,), (window,))
            now = jax.lax.dynamic_slice(sorted_key, (start,), (window,)) == p
            xb = jnp.where(now, g_ext[f] - jnp.sum(s_hat[r_ext[f]], axis=1), 0)
            sbar = sbar.at[bneck_ext[f]].add(jnp.where(capped_ext[f], 0, xb * w_ext[f]))
            more = sorted_key[start + window] == p
            s_hat = jnp.where(more, s_hat, links_done(s_hat, sbar, p))
            return (jnp.where(more, p, p - 1), jnp.where(more, start + window, first_of(p - 1)), s_hat,
                    xbar.at[f].add(xb), sbar)

        p0 = st.num_passes - 1
        init = (p0, first_of(p0), jnp.zeros(L + 1, rates.dtype), jnp.zeros(F + 1, rates.dtype),
                jnp.zeros(L + 1, rates.dtype))
        _, _, s_hat, xbar, _ = jax.lax.while_loop(lambda s: s[0] >= 0, body, init)
        xbar = jnp.where(empty & (st.pass_of_flow >= 0), g, xbar[:F])
    s_hat = jnp.where(jnp.isfinite(s_hat), s_hat, 0).at[L].set(0)
    # Bottlenecks on a flow's route that froze while it was active (in its pass, or earlier when the
    # pass deferred it) all have share == its level; their W includes w_f.
    pl = st.pass_of_link[r]
    same_pass = (pl >= 0) & (pl <= st.pass_of_flow[:, None])
    own_links = jnp.sum(jnp.where(same_pass, s_hat[r], 0), axis=1)
    wbar = jnp.where(capped, 0, xbar * share_b - level * own_links)
    wbar = jnp.where(finite, wbar, 0)
    limit_bar = jnp.where(capped & finite, xbar, 0)
    return s_hat[:L], wbar, limit_bar
