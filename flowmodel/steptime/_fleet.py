"""Several workloads on one fabric at once: training jobs, disaggregated inference, background classes.

Within a training job, collectives contend exactly (fluid max-min over shared links). Between
workloads the coupling is mean-field: each workload sees every other one as constant-rate traffic
at its average link load over a step (bytes per step / step time), taken from capacity first.
Only jobs that share a link are coupled (``coupling_groups``): a job alone in its group is evaluated
once. Within a group, step times and loads are solved together by Gauss-Seidel sweeps to a relative
tolerance (``Options.fleet_tol``, at most ``Options.fleet_iterations`` sweeps), and the gradient goes
through the fixed point by the implicit function theorem, not by unrolling the sweeps
(``fixed_point``); the result says how much the last sweep still changed.

Training jobs are ``TrainingPlan``s. Every other workload with phases of its own on the fabric
(recommendation, RL post-training, agentic inference) is a plan object with this protocol:

- ``KIND``: the ``FleetResult`` field its results land in;
- ``SERVICE``: True for an open-loop service, whose time is a request's latency (not a step, so not in
  the fleet's step time) and whose average load is ``bytes x rate()``; False for a closed-loop job,
  whose load is bytes per iteration / iteration time;
- ``job`` (with ``name`` and ``job_ranks``), ``phases()``, ``calls(name)``, ``bytes(num_links, logits=)``,
  ``evaluate(network, options, info=, background=, logits=) -> StepResult``, ``map_phases(fn)`` and
  ``figures()`` (run.json's extra figures).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from ..fabric import FabricInfo, Network
from ..routing import Router
from ._comm import EXACT, Options, RoutedPhase, background_load, phase_time, residual_capacity
from ._training import StepResult, TrainingPlan, calls_per_step, routed_phases, step_bytes, step_time


def constant_load(router: Router, inference=(), background=(), *, policy: str = "ecmp", seed: int = 0,
                  qps: int = 4, unreachable: str = "raise") -> np.ndarray:
    """float64[L] bytes/s of the background classes plus the inference services' average KV traffic
    (``unreachable="report"``: streams a failure cut off carry nothing)."""
    load = np.zeros(router.info.num_links)
    for b in background:
        load += background_load(router, np.asarray(b.src), np.asarray(b.dst), b.rate, policy=policy, seed=seed,
                                qps=qps, unreachable=unreachable)
    for inf in inference:
        src, dst, rate = inf.flows()
        load += background_load(router, src, dst, rate, policy=policy, seed=seed, qps=qps, unreachable=unreachable)
    return load


KINDS = ("recommendation", "rl", "agentic")  # the plan kinds beside training, as FleetResult fields


@dataclasses.dataclass(frozen=True)
class FleetResult:
    """Every training job's step, every recommendation job's iteration (``recommendation``), every
    inference service's KV transfer time (s), and the coupling: the most sweeps a coupled group took
    (``iterations``; 0 when no jobs share a link), the last sweep's largest relative change
    (``change``), ``converged`` when it is within ``Options.fleet_tol``."""

    steps: dict[str, StepResult]
    kv_transfer_s: dict[str, object]
    iterations: object
    change: object
    converged: object
    recommendation: dict[str, StepResult] = dataclasses.field(default_factory=dict)
    rl: dict[str, StepResult] = dataclasses.field(default_factory=dict)
    agentic: dict[str, StepResult] = dataclasses.field(default_factory=dict)

    @property
    def jobs(self) -> dict[str, StepResult]:
        """Every closed-loop job's step or iteration: training, recommendation, RL."""
        return {**self.steps, **self.recommendation, **self.rl}

    @property
    def every(self) -> dict[str, StepResult]:
        """Every workload's result: the jobs', then the services' (an agentic request's latency)."""
        return {**self.jobs, **self.agentic}

    @property
    def step_time(self):
        """The slowest job's step time (recommendation and RL iterations included): the scenario's step time."""
        return _slowest([r.step_time for r in self.jobs.values()])

    def critical(self) -> str | None:
        """The name of the slowest job (concrete results only), None without jobs."""
        every = self.jobs
        return max(every, key=lambda name: float(every[name].step_time)) if every else None


RESULT_FIELDS = ("steps", "kv_transfer_s", "iterations", "change", "converged", *KINDS)
jax.tree_util.register_dataclass(FleetResult, data_fields=list(RESULT_FIELDS), meta_fields=[])


def _slowest(values):
    if not values:
        raise ValueError("workloads: no training job, so there is no step time")
    out = values[0]
    for v in values[1:]:
        out = jnp.maximum(out, v)
    return out


def check_workloads(jobs, inference=(), background=(), *, num_gpus: int) -> None:
    """Names are unique across workloads and no GPU belongs to two training jobs."""
    names = [j.name for j in jobs] + [i.name for i in inference] + [b.name for b in background]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ValueError(f"workloads: the name {dup!r} is used twice")
    used: dict[int, str] = {}
    for job in jobs:
        for r in job.job_ranks(num_gpus).tolist():
            if r in used:
                raise ValueError(f"jobs: GPU rank {r} belongs to both {used[r]!r} and {job.name!r}")
            used[r] = job.name


def job_logits(logits, j: int):
    """The WCMP logits of job ``j`` from a flat ``{"<job index>/<phase name>": logits}`` mapping."""
    own = {k.split("/", 1)[1]: v for k, v in (logits or {}).items() if k.split("/", 1)[0] == str(j)}
    return own or None


def plan_phases(plan) -> dict[str, RoutedPhase]:
    """The routed phases of a plan by name (a training plan's: ``routed_phases``)."""
    return routed_phases(plan) if isinstance(plan, TrainingPlan) else plan.phases()


def plan_calls(plan, name: str) -> float:
    """How many times a step (an iteration, a request) runs the plan's named phase."""
    return calls_per_step(plan, name) if isinstance(plan, TrainingPlan) else plan.calls(name)


def plan_bytes(plan, num_links: int, *, logits=None):
    """float[L] bytes the plan puts on each link per step (iteration, request)."""
    return step_bytes(plan, num_links, logits=logits) if isinstance(plan, TrainingPlan) else \
        plan.bytes(num_links, logits=logits)


def plan_time(plan, network: Network, options: Options = EXACT, *, info=None, background=None,
              logits=None) -> StepResult:
    """The plan's step (iteration, request) on ``network`` with ``background`` bytes/s reserved."""
    evaluate = functools.partial(step_time, plan) if isinstance(plan, TrainingPlan) else plan.evaluate
    return evaluate(network, options, info=info, background=background, logits=logits)


def plan_kind(plan) -> str:
    """The FleetResult field the plan's result lands in."""
    return "steps" if isinstance(plan, TrainingPlan) else plan.KIND


def average_load(plan, per_step, time):
    """float[L] bytes/s the plan puts on the fabric on average: a job's bytes per step over its step
    time, a service's bytes per request times its request rate."""
    return per_step * plan.rate() if getattr(plan, "SERVICE", False) else per_step / time


def plan_links(plan, num_links: int | None = None) -> np.ndarray:
    """int64[] every link the plan's routed phases can use (WCMP: every candidate path's links); with
    ``num_links``, the fabric's only (not the host and storage links a phase may have attached)."""
    parts = [np.zeros(0, np.int64)]
    for ph in plan_phases(plan).values():
        if ph.sub is not None:
            parts.append(np.asarray(ph.sub.routes).ravel())
        if ph.candidates is not None:
            parts.append(np.asarray(ph.candidates.links).ravel())
    used = np.concatenate(parts)
    keep = (used >= 0) if num_links is None else (used >= 0) & (used < num_links)
    return np.flatnonzero(np.bincount(used[keep], minlength=1))  # a count, not a sort: O(hops)


def coupling_groups(plans, num_links: int) -> tuple[tuple[int, ...], ...]:
    """The jobs (indices into ``plans``) that contend with each other, directly or through a chain of
    jobs: connected components of "shares a link". A job alone in its group needs no coupling sweeps."""
    if not plans:
        return ()
    links = [plan_links(p, num_links) for p in plans]
    rows = np.concatenate([np.full(len(ls), j) for j, ls in enumerate(links)])
    cols = np.concatenate(links)
    if cols.size and cols.max() >= num_links:
        raise ValueError(f"plans: a route names link {int(cols.max())}, but the network has {num_links} links")
    uses = sp.csr_matrix((np.ones(cols.size), (rows, cols)), shape=(len(plans), num_links))
    _, label = csgraph.connected_components(uses @ uses.T, directed=False)
    return tuple(tuple(np.flatnonzero(label == c).tolist()) for c in np.unique(label))



@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 3, 4))
def fixed_point(sweep, theta, y0, tol: float, max_sweeps: int):
    """``y = sweep(theta, y)`` iterated from ``y0`` until the largest relative change is <= ``tol``
    (at most ``max_sweeps`` sweeps): returns (y, sweeps, change).

    Reverse mode differentiates the fixed point implicitly: with ``J = d sweep / d y`` at the solution,
    ``theta_bar = (d sweep / d theta)^T w`` where ``(I - J)^T w = y_bar``; ``J`` is n x n for n
    coupled jobs (n batched VJPs), so the cost does not grow with the sweeps taken. ``sweeps`` and
    ``change`` carry no gradient. (optimistix's implicit adjoint is forward-mode first and cannot
    pass through the max-min kernels' custom VJPs, hence this small one.)
    """
    return _iterate(sweep, theta, y0, tol, max_sweeps)


def _iterate(sweep, theta, y0, tol, max_sweeps):
    def cond(state):
        _, k, change = state
        return (change > tol) & (k < max_sweeps)

    def body(state):
        y, k, _ = state
        new = sweep(theta, y)
        return new, k + 1, jnp.max(jnp.abs(new - y) / new)

    return jax.lax.while_loop(cond, body, (y0, jnp.asarray(0), jnp.asarray(jnp.inf, y0.dtype)))


def _fixed_point_fwd(sweep, theta, y0, tol, max_sweeps):
    out = _iterate(sweep, theta, y0, tol, max_sweeps)
    return out, (theta, out[0])


def _fixed_point_bwd(sweep, tol, max_sweeps, res, cotangents):
    theta, y = res
    y_bar = cotangents[0]
    _, vjp = jax.vjp(sweep, theta, y)
    jac = jax.vmap(lambda e: vjp(e)[1])(jnp.eye(y.shape[0], dtype=y.dtype))  # row i: e_i^T J
    w = jnp.linalg.solve((jnp.eye(y.shape[0], dtype=y.dtype) - jac).T, y_bar)
    return vjp(w)[0], jnp.zeros_like(y)


fixed_point.defvjp(_fixed_point_fwd, _fixed_point_bwd)


def evaluate_fleet(plans: list[TrainingPlan], network: Network, options: Options = EXACT, *, fixed_load=None,
                   transfers: tuple[tuple[str, RoutedPhase], ...] = (), info: FabricInfo | None = None,
                   logits=None, groups: tuple[tuple[int, ...], ...] | None = None) -> FleetResult:
    """Step time of every planned training job, the result of every other plan in ``plans`` (the
    module's plan protocol: recommendation and RL iterations, agentic requests; coupled the same way)
    and KV transfer time of every inference service, at once.

    Each job's step is evaluated with ``options``; the constant load ``fixed_load`` (float[L] bytes/s:
    background classes and inference, ``constant_load``) and the average loads of the jobs it is
    coupled with are reserved from capacity first (an error names a link they alone would fill).
    ``groups`` are the coupled jobs (``coupling_groups``, computed here when None; a prepared model
    holds them). A KV transfer (named routed phase) is one request moved on top of every workload's
    average load. ``logits`` are WCMP split logits keyed ``"<job index>/<phase name>"``.
    Differentiable in ``network`` and ``logits``.
    """
    L = network.num_links
    fixed = jnp.zeros(L, network.capacity.dtype) if fixed_load is None else jnp.asarray(fixed_load)
    groups = coupling_groups(plans, L) if groups is None else groups
    if sorted(j for g in groups for j in g) != list(range(len(plans))):
        raise ValueError(f"groups: must partition the {len(plans)} jobs, got {groups!r}")
    coupled = {j for g in groups if len(g) > 1 for j in g}
    per_step = {j: plan_bytes(plans[j], L, logits=job_logits(logits, j)) for j in range(len(plans))
                if transfers or j in coupled}

    def job_step(j, net, background, lg):
        return plan_time(plans[j], net, options, info=info, background=background, logits=lg)

    def sweep(group, theta, times):  # one Gauss-Seidel sweep over a group's jobs; theta holds every input
        net, fix, loads, lgs = theta
        for a, j in enumerate(group):
            others = fix + sum((average_load(plans[group[b]], loads[b], times[b]) for b in range(len(group))
                                if b != a), jnp.zeros(L))
            times = times.at[a].set(job_step(j, net, others, lgs[a]).step_time)
        return times

    results: list[StepResult | None] = [None] * len(plans)
    sweeps, change = [jnp.asarray(0)], [jnp.zeros((), network.capacity.dtype)]
    for group in groups:
        if len(group) == 1:
            results[group[0]] = job_step(group[0], network, fixed, job_logits(logits, group[0]))
            continue
        theta = (network, fixed, tuple(per_step[j] for j in group), tuple(job_logits(logits, j) for j in group))
        y0 = jnp.full(len(group), jnp.inf, network.capacity.dtype)  # the first sweep starts from no load
        times, k, last = fixed_point(functools.partial(sweep, group), theta, y0, options.fleet_tol,
                                     options.fleet_iterations)
        for a, j in enumerate(group):  # each job's whole result at the fixed point
            others = fixed + sum((average_load(plans[i], per_step[i], times[b]) for b, i in enumerate(group)
                                  if b != a), jnp.zeros(L))
            results[j] = job_step(j, network, others, job_logits(logits, j))
        sweeps.append(k)
        change.append(last)
    change = functools.reduce(jnp.maximum, change)

    kv = {}
    if transfers:
        times = [r.step_time for r in results]
        total = fixed + sum((average_load(plans[i], per_step[i], times[i]) for i in range(len(plans))), jnp.zeros(L))
        capacity = residual_capacity(network.capacity, total, info)
    for name, rp in transfers:  # one request's transfer, on top of every workload's average load
        kv[name] = phase_time(rp, capacity, network.latency, options)
    by_kind = {kind: {} for kind in ("steps", *KINDS)}
    for plan, r in zip(plans, results):
        by_kind[plan_kind(plan)][plan.job.name] = r
    return FleetResult(kv_transfer_s=kv, iterations=functools.reduce(jnp.maximum, sweeps), change=change,
                       converged=change <= options.fleet_tol, **by_kind)
