"""Several workloads on one fabric at once: training jobs, disaggregated inference, background classes.

Within a training job, collectives contend exactly (fluid max-min over shared links). Between
workloads the coupling is mean-field: each workload sees every other one as constant-rate traffic
at its average link load over a step (bytes per step / step time), taken from capacity first.
Step times and loads are solved together by Gauss-Seidel sweeps over the jobs, a fixed number of
them (``Options.fleet_iterations``; one job needs one), so that the evaluation is one differentiable
function of the network; the result says how much the last sweep still changed.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..fabric import FabricInfo, Network
from ..routing import Router
from ._comm import EXACT, Options, RoutedPhase, background_load, phase_time, residual_capacity
from ._training import StepResult, TrainingPlan, step_bytes, step_time


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


@dataclasses.dataclass(frozen=True)
class FleetResult:
    """Every training job's step, every inference service's KV transfer time (s), and the coupling's
    last relative change (``change``; ``converged`` when it is within ``tol``)."""

    steps: dict[str, StepResult]
    kv_transfer_s: dict[str, object]
    iterations: int
    change: object
    converged: object

    @property
    def step_time(self):
        """The slowest job's step time: the scenario's step time."""
        return _slowest([r.step_time for r in self.steps.values()])

    def critical(self) -> str | None:
        """The name of the slowest job (concrete results only), None without jobs."""
        return max(self.steps, key=lambda name: float(self.steps[name].step_time)) if self.steps else None


jax.tree_util.register_dataclass(FleetResult, data_fields=["steps", "kv_transfer_s", "change", "converged"],
                                 meta_fields=["iterations"])


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


def evaluate_fleet(plans: list[TrainingPlan], network: Network, options: Options = EXACT, *, fixed_load=None,
                   transfers: tuple[tuple[str, RoutedPhase], ...] = (), info: FabricInfo | None = None,
                   logits=None, tol: float = 1e-6) -> FleetResult:
    """Step time of every planned training job and KV transfer time of every inference service, at once.

    Each job's step is evaluated with ``options``; the constant load ``fixed_load`` (float[L] bytes/s:
    background classes and inference, ``constant_load``) and the other jobs' average loads are
    reserved from capacity first (an error names a link they alone would fill). A KV transfer (named
    routed phase) is one request moved on top of every workload's average load. ``logits`` are WCMP
    split logits keyed ``"<job index>/<phase name>"``. Differentiable in ``network`` and ``logits``.
    """
    L = network.num_links
    fixed = jnp.zeros(L, network.capacity.dtype) if fixed_load is None else jnp.asarray(fixed_load)
    coupled = len(plans) > 1 or transfers  # only then are the jobs' average loads needed
    per_step = [step_bytes(plan, L, logits=job_logits(logits, j)) if coupled else None
                for j, plan in enumerate(plans)]
    results: list[StepResult | None] = [None] * len(plans)
    times = [jnp.inf] * len(plans)  # a job not yet evaluated loads nothing
    iterations = 1 if len(plans) <= 1 else options.fleet_iterations
    change = jnp.asarray(jnp.inf)
    for sweep in range(iterations if plans else 0):
        change = jnp.asarray(0.0 if sweep else jnp.inf)  # the first sweep starts from nothing
        for j, plan in enumerate(plans):
            others = fixed + sum((per_step[i] / times[i] for i in range(len(plans)) if i != j), jnp.zeros(L))
            results[j] = step_time(plan, network, options, info=info, background=others, logits=job_logits(logits, j))
            new = results[j].step_time
            if sweep:
                change = jnp.maximum(change, jnp.abs(new - times[j]) / new)
            times[j] = new
    if len(plans) <= 1:  # nothing to couple: exact after one evaluation
        change = jnp.zeros(())
    converged = change <= tol

    kv = {}
    if transfers:
        total = fixed + sum((per_step[i] / times[i] for i in range(len(plans))), jnp.zeros(L))
        capacity = residual_capacity(network.capacity, total, info)
    for name, rp in transfers:  # one request's transfer, on top of every workload's average load
        kv[name] = phase_time(rp, capacity, network.latency, options)
    return FleetResult(steps={plan.job.name: r for plan, r in zip(plans, results)}, kv_transfer_s=kv,
                       iterations=iterations if plans else 0, change=change, converged=converged)
