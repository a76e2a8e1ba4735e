"""Iteration time of a recommendation (DLRM-class) training job on the fabric.

The iteration, in order (Naumov et al. 2019, docs/sources.md "DLRM"): embedding lookup and pooling
on each table's owner; the forward all-to-all of the pooled vectors; the dense MLPs' forward and
backward; then the backward all-to-all of the pooled vectors' gradients and the dense gradients'
all-reduce, started together (the MLP gradients are complete when the backward all-to-all starts)
and simulated in one fluid phase, so they share links while both run; finally the embedding update
on each owner, which the all-reduce may still overlap. So

    iteration = embedding_forward + all_to_all_forward + dense
                + max(all_to_all_backward + embedding_backward, all_reduce end)

Assumed: no overlap of the forward all-to-all with the bottom MLP, nor of any communication with
the dense compute (a conservative schedule); interaction and optimizer compute are not counted.
A ring all-reduce over several GPUs per scale-up domain runs one NCCL-style channel per GPU of a
domain (``ring_channels``), so every NIC carries it.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from ..fabric._network import FabricInfo, Network
from ..kernels import link_bytes, soft_max
from ..routing import Router
from ..traffic._collectives import Phase, all_reduce, all_to_all, bus_factor
from ..traffic._recommendation import Recommendation
from ._comm import (
    DOMAINS,
    EXACT,
    Options,
    RoutedPhase,
    domain_of,
    phase_finish,
    phase_time,
    residual_capacity,
    ring_channels,
    route_phase,
    smooth_phase_finish,
)
from ._training import StepResult, phase_bound

KINDS = ("all_to_all_forward", "all_to_all_backward", "dense_all_reduce")


@dataclasses.dataclass(frozen=True, eq=False)
class RecommendationPlan:
    """The routed collectives of one iteration: the forward all-to-all, and the backward all-to-all
    merged with the dense all-reduce (``backward_collective`` int[F]: 0 all-to-all, 1 all-reduce,
    per flow; ``backward_steps`` int[C]). Phases are None on one GPU."""

    job: Recommendation
    ranks: np.ndarray
    forward: RoutedPhase | None
    backward: RoutedPhase | None
    backward_collective: np.ndarray
    backward_steps: np.ndarray
    domains: dict[str, str]
    sizes: dict[str, tuple[str, float, int]]  # kind -> (collective, bytes per rank, ranks per group)

    KIND = "recommendation"  # the FleetResult field its results land in (steptime/_fleet.py's plan protocol)
    SERVICE = False  # closed loop: its average load is bytes per iteration / iteration time

    def phases(self) -> dict[str, RoutedPhase]:
        return recommendation_phases(self)

    def calls(self, name: str) -> float:
        return 1.0

    def bytes(self, num_links: int, *, logits=None):
        return recommendation_bytes(self, num_links, logits=logits)

    def evaluate(self, network: Network, options: Options = EXACT, *, info=None, background=None, logits=None):
        return iteration_time(self, network, options, info=info, background=background, logits=logits)

    def map_phases(self, fn) -> RecommendationPlan:
        return dataclasses.replace(self, **{k: fn(k, v) for k, v in self.phases().items()})

    def figures(self, result=None) -> dict:
        """run.json's extra figures for this job (``result``: its evaluated ``StepResult``)."""
        return {"embedding_bytes_per_gpu": self.job.embedding_bytes()}


def plan_recommendation(job: Recommendation, info: FabricInfo, router: Router, *, policy: str = "ecmp",
                        seed: int = 0, qps: int = 4) -> RecommendationPlan:
    """Place the job on its ranks and route its collectives (``policy`` as in routing)."""
    ranks = job.job_ranks(info.num_gpus)
    n = ranks.size
    if n < 2:
        return RecommendationPlan(job, ranks, None, None, np.zeros(0, np.int64), np.zeros(0, np.int64), {}, {})
    a2a = all_to_all(ranks[None, :], job.all_to_all_bytes()).phases[0]
    sizes = {"all_to_all_forward": ("all_to_all", job.all_to_all_bytes(), n),
             "all_to_all_backward": ("all_to_all", job.all_to_all_bytes(), n)}
    parts = [a2a]
    if job.dense_params > 0:
        rings = ring_channels(info, ranks[None, :]) if job.algorithm == "ring" else (None, 1)
        ar = all_reduce(ranks[None, :], job.all_reduce_bytes(), job.algorithm, local_size=rings[0],
                        channels=rings[1]).phases
        if len(ar) != 1:
            raise ValueError(f"recommendation.algorithm: {job.algorithm!r} has {len(ar)} phases; the overlapped "
                             "all-reduce takes a one-phase all-reduce (ring or tree)")
        parts.append(ar[0])
        sizes["dense_all_reduce"] = ("all_reduce", job.all_reduce_bytes(), n)
    which = np.concatenate([np.full(p.num_flows, c) for c, p in enumerate(parts)]).astype(np.int64)
    steps = np.array([p.steps for p in parts], np.int64)
    merged = Phase(np.concatenate([p.src for p in parts]), np.concatenate([p.dst for p in parts]),
                   np.concatenate([p.bytes for p in parts]), int(steps.max()))
    forward = route_phase(a2a, router, policy, seed=seed, qps=qps)
    backward = route_phase(merged, router, policy, seed=seed, qps=qps)
    domains = {"all_to_all_forward": forward.domain, "all_to_all_backward": forward.domain}
    if len(parts) > 1:
        routes = np.asarray(backward.sub.routes)[which[backward.sub.parent] == 1]
        domains["dense_all_reduce"] = domain_of(router.info, routes)
    return RecommendationPlan(job, ranks, forward, backward, which, steps, domains, sizes)


def recommendation_phases(plan: RecommendationPlan) -> dict[str, RoutedPhase]:
    """The plan's routed phases by name: ``forward`` and ``backward``."""
    return {name: ph for name, ph in (("forward", plan.forward), ("backward", plan.backward)) if ph is not None}


def _resolve(plan: RecommendationPlan, logits) -> dict[str, RoutedPhase]:
    phases = recommendation_phases(plan)
    for name, value in (logits or {}).items():
        if name not in phases:
            raise ValueError(f"logits: the plan has no phase {name!r}; phases: {', '.join(phases)}")
        phases[name] = phases[name].with_logits(value)
    return phases


def recommendation_bytes(plan: RecommendationPlan, num_links: int, *, logits=None):
    """float[L] bytes the job puts on each link per iteration."""
    total = jnp.zeros(num_links)
    for ph in _resolve(plan, logits).values():
        total = total + link_bytes(ph.sub.routes, ph.sub.sizes(ph.sizes), num_links)
    return total


def iteration_time(plan: RecommendationPlan, network: Network, options: Options = EXACT, *,
                   info: FabricInfo | None = None, background=None, logits=None) -> StepResult:
    """One iteration on ``network`` (differentiable in its capacity and latency), as a ``StepResult``:
    ``breakdown`` (sums to ``step_time``) is ``compute`` (embedding lookup and update, dense MLPs),
    ``all_to_all_forward``, ``all_to_all_backward`` (until its last flow ends, sharing links with the
    all-reduce) and ``all_reduce`` (the part of the dense all-reduce left exposed after the embedding
    update). ``collectives`` reports each of the three kinds as a training step does."""
    residual_capacity(network.capacity, background, info)
    phases = _resolve(plan, logits)
    capacity = network.capacity if background is None else network.capacity - background
    latency = network.latency
    c = plan.job.compute_times()
    zero = jnp.zeros((), capacity.dtype)
    fwd, a2a_end, ar_end = zero, zero, zero
    times = {}
    if "forward" in phases:
        fwd = phase_time(phases["forward"], capacity, latency, options)
        ph, which = phases["backward"], plan.backward_collective
        starts = jnp.zeros(ph.phase.num_flows, capacity.dtype)
        extra = dict(collective_of_flow=which, collective_steps=plan.backward_steps)
        ends_of = {}
        if options.smooth:
            ends, temperature = smooth_phase_finish(ph, capacity, latency, starts, options, **extra)
            sub_of = which[ph.sub.parent]
            for k in range(plan.backward_steps.size):
                ends_of[k] = soft_max(jnp.where(jnp.asarray(sub_of == k), ends, -jnp.inf), temperature)
        else:
            ends = phase_finish(ph, capacity, latency, starts, options, **extra)
            for k in range(plan.backward_steps.size):
                ends_of[k] = jnp.max(ends[which == k])
        a2a_end = ends_of[0]
        ar_end = ends_of.get(1, zero)
        times = {"all_to_all_forward": fwd, "all_to_all_backward": a2a_end, "dense_all_reduce": ar_end}
    update_end = a2a_end + c["embedding_backward"]
    backward_end = jnp.maximum(update_end, ar_end)
    parts = {"compute": c["embedding_forward"] + c["dense"] + c["embedding_backward"],
             "all_to_all_forward": fwd, "all_to_all_backward": a2a_end, "all_reduce": backward_end - update_end}
    total = c["embedding_forward"] + fwd + c["dense"] + backward_end
    by_domain = {d: 0.0 for d in DOMAINS}
    for kind, key in (("all_to_all_forward", "all_to_all_forward"), ("all_to_all_backward", "all_to_all_backward"),
                      ("dense_all_reduce", "all_reduce")):
        if kind in plan.domains:
            by_domain[plan.domains[kind]] = by_domain[plan.domains[kind]] + parts[key]
    report = {}
    for kind, (collective, size, n) in plan.sizes.items():
        if kind == "all_to_all_forward":
            bound = phase_bound(phases["forward"], capacity, latency, options.step_latency)
        else:
            k = 0 if kind == "all_to_all_backward" else 1
            bound = phase_bound(phases["backward"], capacity, latency, options.step_latency,
                           sub_mask=plan.backward_collective[phases["backward"].sub.parent] == k,
                           steps=int(plan.backward_steps[k]))
        time = times[kind]
        report[kind] = {"seconds": time, "bound_seconds": bound, "efficiency": bound / time, "bytes": size,
                        "ranks": n, "algbw": size / time, "busbw": size / time * bus_factor(collective, n)}
    return StepResult(step_time=total, breakdown=parts, by_domain=by_domain, collectives=report,
                      dp_starts=jnp.zeros(0, capacity.dtype))
