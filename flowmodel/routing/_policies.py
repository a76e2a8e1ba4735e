"""Routing policies: turn candidate paths into sub-flows the kernels can take.

A flow split over paths becomes sub-flows, each carrying a ``fraction`` of the flow's bytes and
weight; the flow finishes when its last sub-flow does. Giving a sub-flow its fraction of the flow's
weight keeps a split flow from grabbing more than one flow's share where its sub-flows meet (the
NIC): at a common bottleneck its sub-flows together get exactly one flow's weighted share.

- ``ecmp``: each flow pinned to one equal-cost candidate by a hash of (seed, src, dst, the flow's
  occurrence among flows of that pair), so collisions are reproduced and stable.
- ``spray``: each flow split evenly over all its equal-cost candidates (packet spraying, DSF).
- ``qp_scaling``: each flow split into ``qps`` equal sub-flows, each hashed independently (E-ECMP).
- ``wcmp``: each flow split over all candidates by a softmax of per-candidate logits;
  differentiable in the logits (what the optimiser tunes).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import is_traced
from .._hashing import hash_keys as _hash
from ._paths import Candidates, Router


@dataclasses.dataclass(frozen=True, eq=False)
class SubFlows:
    """Sub-flows of F flows; both directions of the mapping.

    Attributes:
      routes: int32[N, H] link indices, -1 padded.
      parent: int64[N] the flow of each sub-flow (non-decreasing).
      fraction: float[N] its share of the flow's bytes and weight (numpy, or a jax array for wcmp).
      first, count: int64[F] flow f's sub-flows are ``first[f] : first[f] + count[f]``.
      unreachable: int64[U] flows without sub-flows (no path).
    """

    routes: np.ndarray
    parent: np.ndarray
    fraction: np.ndarray | jax.Array
    first: np.ndarray
    count: np.ndarray
    unreachable: np.ndarray

    @property
    def num_flows(self) -> int:
        return self.first.shape[0]

    def sizes(self, flow_sizes):
        """float[N] bytes of each sub-flow."""
        return jnp.asarray(flow_sizes)[self.parent] * self.fraction

    def weights(self, flow_weights=None):
        """float[N] max-min weight of each sub-flow (flow weight, default 1, times its fraction)."""
        if flow_weights is None:
            return jnp.asarray(self.fraction)
        return jnp.asarray(flow_weights)[self.parent] * self.fraction

    def flow_finish(self, sub_finish):
        """float[F] each flow's finish: its last sub-flow's; ``inf`` for an unreachable flow."""
        out = jax.ops.segment_max(jnp.asarray(sub_finish), self.parent, num_segments=self.num_flows,
                                  indices_are_sorted=True)
        return out.at[self.unreachable].set(jnp.inf) if self.unreachable.size else out

    def flow_rate(self, sub_rates):
        """float[F] each flow's total rate over its sub-flows."""
        return jax.ops.segment_sum(jnp.asarray(sub_rates), self.parent, num_segments=self.num_flows,
                                   indices_are_sorted=True)


def _occurrence(c: Candidates) -> np.ndarray:
    """int64[F]: how many earlier flows have the same (src, dst)."""
    order = np.lexsort((np.arange(c.num_flows), c.dst, c.src))
    s, d = c.src[order], c.dst[order]
    start = np.r_[True, (s[1:] != s[:-1]) | (d[1:] != d[:-1])]
    group_first = np.maximum.accumulate(np.where(start, np.arange(order.size), 0))
    occ = np.empty(c.num_flows, np.int64)
    occ[order] = np.arange(order.size) - group_first
    return occ


def _from_picks(c: Candidates, rows: np.ndarray, parent: np.ndarray, fraction) -> SubFlows:
    count = np.bincount(parent, minlength=c.num_flows).astype(np.int64)
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    return SubFlows(routes=c.links[rows], parent=parent, fraction=fraction, first=first, count=count,
                    unreachable=c.unreachable)


def _check_seed(seed) -> None:
    if not (isinstance(seed, (int, np.integer)) and seed >= 0):
        raise ValueError(f"seed: must be an integer >= 0, got {seed!r}")


def qp_scaling(c: Candidates, qps: int, *, seed: int = 0) -> SubFlows:
    """Each flow split into ``qps`` sub-flows, each pinned to an equal-cost candidate by its own hash."""
    if not (isinstance(qps, (int, np.integer)) and qps >= 1):
        raise ValueError(f"qps: must be an integer >= 1, got {qps!r}")
    _check_seed(seed)
    flows = np.repeat(np.flatnonzero(c.num_equal > 0), qps)
    q = np.tile(np.arange(qps), flows.size // qps)
    h = _hash(seed, c.src[flows], c.dst[flows], _occurrence(c)[flows], q)
    rows = c.first[flows] + (h % c.num_equal[flows].astype(np.uint64)).astype(np.int64)
    return _from_picks(c, rows, flows, np.full(flows.size, 1.0 / qps))


def ecmp(c: Candidates, *, seed: int = 0) -> SubFlows:
    """Each flow pinned to one equal-cost candidate by a hash (collisions included)."""
    return qp_scaling(c, 1, seed=seed)


def spray(c: Candidates) -> SubFlows:
    """Each flow split evenly over all its equal-cost candidates."""
    rows = np.flatnonzero(c.equal_cost)
    parent = c.flow[rows]
    return _from_picks(c, rows, parent, 1.0 / c.num_equal[parent])


def wcmp(c: Candidates, logits) -> SubFlows:
    """Each flow split over all its candidates with ``softmax(logits)`` per flow (differentiable).

    Args:
      logits: float[P], one per candidate row of ``c``.
    """
    logits = jnp.asarray(logits)
    P = c.links.shape[0]
    if logits.shape != (P,):
        raise ValueError(f"logits: expected shape ({P},) (one per candidate), got {logits.shape}")
    if not is_traced(logits) and not bool(jnp.all(jnp.isfinite(logits))):
        bad = int(np.flatnonzero(~np.isfinite(np.asarray(logits)))[0])
        raise ValueError(f"logits[{bad}] must be finite, got {float(logits[bad])}")
    F = c.num_flows
    top = jax.ops.segment_max(logits, c.flow, num_segments=F, indices_are_sorted=True)
    e = jnp.exp(logits - jax.lax.stop_gradient(top)[c.flow])
    fraction = e / jax.ops.segment_sum(e, c.flow, num_segments=F, indices_are_sorted=True)[c.flow]
    return _from_picks(c, np.arange(P), c.flow, fraction)


POLICIES = ("ecmp", "spray", "qp_scaling", "wcmp")
HASHED = ("ecmp", "qp_scaling")  # the policies whose paths a hash of the seed picks


def route(router: Router, src, dst, policy: str = "ecmp", *, seed: int = 0, qps: int = 4, logits=None,
          unreachable: str = "raise") -> SubFlows:
    """Candidates for flows ``src -> dst`` (GPU ranks) on ``router``'s fabric, split by ``policy``."""
    if policy not in POLICIES:
        raise ValueError(f"routing.policy: unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    return split(router.candidates(src, dst, unreachable=unreachable), policy, seed=seed, qps=qps, logits=logits)


def split(c: Candidates, policy: str = "ecmp", *, seed: int = 0, qps: int = 4, logits=None) -> SubFlows:
    """The sub-flows ``policy`` makes of candidates ``c`` (the second half of ``route``)."""
    if policy not in POLICIES:
        raise ValueError(f"routing.policy: unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    if policy == "ecmp":
        return ecmp(c, seed=seed)
    if policy == "spray":
        return spray(c)
    if policy == "qp_scaling":
        return qp_scaling(c, qps, seed=seed)
    return wcmp(c, jnp.zeros(c.links.shape[0]) if logits is None else logits)
