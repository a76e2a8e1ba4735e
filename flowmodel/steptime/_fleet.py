"""Several workloads on one fabric at once: training jobs, disaggregated inference, background classes.

Within a training job, collectives contend exactly (fluid max-min over shared links). Between
workloads the coupling is mean-field: each workload sees every other one as constant-rate traffic
at its average link load over a step (bytes per step / step time), taken from capacity first.
Step times and loads are solved together by a fixed-point iteration (Gauss-Seidel over the jobs);
the result says how many iterations it took and whether it met the tolerance.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..fabric._network import FabricInfo, Network
from ..routing import Router
from ..traffic._collectives import Phase
from ..traffic._workload import Model, Training
from ._comm import Congestion, background_load, phase_time, residual_capacity, route_phase
from ._training import StepResult, plan_training, step_bytes, step_time


@dataclasses.dataclass(frozen=True)
class Background:
    """Constant-rate traffic (storage, agentic CPU<->GPU, telemetry): flows ``src -> dst`` of ``rate``
    bytes/s each (scalar or one per flow)."""

    name: str
    src: tuple[int, ...]
    dst: tuple[int, ...]
    rate: float | tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Inference:
    """Prefill/decode-disaggregated serving: every request's KV cache moves from a prefill instance to a
    decode instance (instance ``i`` of prefill sends to instance ``i mod D`` of decode), each TP rank
    its shard.

    Attributes:
      prefill, decode: int[instances, tp] GPU ranks of each instance.
      requests_per_s: request rate of the whole service.
      prompt_tokens: tokens per prompt (KV bytes per request = model.kv_bytes_per_token() x this).
    """

    name: str
    model: Model
    prefill: tuple[tuple[int, ...], ...]
    decode: tuple[tuple[int, ...], ...]
    requests_per_s: float
    prompt_tokens: int

    def __post_init__(self):
        pre, dec = np.asarray(self.prefill), np.asarray(self.decode)
        if pre.ndim != 2 or dec.ndim != 2 or pre.shape[1] != dec.shape[1] or pre.size == 0 or dec.size == 0:
            raise ValueError(f"inference[{self.name}]: prefill and decode must be int[instances, tp] with the same tp, "
                             f"got shapes {pre.shape} and {dec.shape}")
        if not (self.requests_per_s > 0 and np.isfinite(self.requests_per_s)):
            raise ValueError(f"inference[{self.name}].requests_per_s: must be > 0, got {self.requests_per_s!r}")
        if not (isinstance(self.prompt_tokens, int) and self.prompt_tokens > 0):
            raise ValueError(f"inference[{self.name}].prompt_tokens: must be a positive integer, "
                             f"got {self.prompt_tokens!r}")

    @property
    def kv_bytes(self) -> int:
        return self.model.kv_bytes_per_token() * self.prompt_tokens

    def transfer(self) -> Phase:
        """One request's KV transfer: prefill instance 0's ranks to decode instance 0's, shard by shard."""
        pre, dec = np.asarray(self.prefill, np.int64), np.asarray(self.decode, np.int64)
        tp = pre.shape[1]
        return Phase(src=pre[0], dst=dec[0], bytes=np.full(tp, self.kv_bytes / tp), steps=1)

    def flows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Average traffic: (src, dst, bytes/s) of every shard stream, requests spread evenly."""
        pre, dec = np.asarray(self.prefill, np.int64), np.asarray(self.decode, np.int64)
        pairs = np.arange(pre.shape[0])
        src, dst = pre[pairs].reshape(-1), dec[pairs % dec.shape[0]].reshape(-1)
        rate = self.requests_per_s * self.kv_bytes / src.size
        return src, dst, np.full(src.size, rate)


def constant_load(router: Router, inference=(), background=(), *, policy: str = "ecmp", seed: int = 0) -> np.ndarray:
    """float64[L] bytes/s of the background classes plus the inference services' average KV traffic."""
    load = np.zeros(router.info.num_links)
    for b in background:
        load += background_load(router, np.asarray(b.src), np.asarray(b.dst), b.rate, policy=policy, seed=seed)
    for inf in inference:
        src, dst, rate = inf.flows()
        load += background_load(router, src, dst, rate, policy=policy, seed=seed)
    return load


@dataclasses.dataclass(frozen=True)
class FleetResult:
    steps: dict[str, StepResult]
    kv_transfer_s: dict[str, float]
    iterations: int
    converged: bool


def evaluate_fleet(jobs: list[Training], network: Network, info: FabricInfo, router: Router, *,
                   inference: tuple[Inference, ...] = (), background: tuple[Background, ...] = (),
                   policy: str = "ecmp", seed: int = 0, alpha: float = 0.0, tol: float = 1e-6,
                   max_iterations: int = 50, plans=None, congestion: Congestion | None = None) -> FleetResult:
    """Step time of every training job and KV transfer time of every inference service, all at once.

    Jobs must not share GPUs. Each job's step is evaluated with the exact model; the other workloads'
    average loads are reserved from capacity (an error names a link they alone would fill). A KV
    transfer is one request moved on top of every workload's average load. ``plans`` may carry the
    jobs' plans when the caller already made them (same policy and seed). ``congestion`` switches on
    window limits and queueing delay for every workload (:class:`Congestion`).
    """
    names = [j.name for j in jobs] + [i.name for i in inference] + [b.name for b in background]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ValueError(f"workloads: the name {dup!r} is used twice")
    used: dict[int, str] = {}
    for job in jobs:
        for r in job.job_ranks(info.num_gpus).tolist():
            if r in used:
                raise ValueError(f"jobs: GPU rank {r} belongs to both {used[r]!r} and {job.name!r}")
            used[r] = job.name
    L = info.num_links
    fixed = constant_load(router, inference, background, policy=policy, seed=seed)
    if plans is None:
        plans = [plan_training(job, info, router, policy=policy, seed=seed) for job in jobs]
    elif [p.job for p in plans] != list(jobs):
        raise ValueError("plans: need one plan per job, in the jobs' order")
    per_step = [np.asarray(step_bytes(plan, L)) for plan in plans]
    results: list[StepResult | None] = [None] * len(jobs)
    times = [np.inf] * len(jobs)  # a job not yet evaluated loads nothing
    converged, iterations = not jobs, 0
    while not converged and iterations < max_iterations:
        iterations += 1
        change = 0.0
        for j, plan in enumerate(plans):
            others = fixed + sum((per_step[i] / times[i] for i in range(len(jobs)) if i != j), np.zeros(L))
            results[j] = step_time(plan, network, info=info, background=others, alpha=alpha, congestion=congestion)
            new = float(results[j].step_time)
            change = max(change, abs(new - times[j]) / new if np.isfinite(times[j]) else np.inf)
            times[j] = new
        converged = change <= tol or len(jobs) == 1

    kv = {}
    total = fixed + sum((per_step[i] / times[i] for i in range(len(jobs))), np.zeros(L))
    capacity = residual_capacity(network.capacity, total, info)
    for inf in inference:  # one request's transfer, on top of every workload's average load
        rp = route_phase(inf.transfer(), router, policy, seed=seed)
        kv[inf.name] = float(phase_time(rp, capacity, network.latency, alpha=alpha, congestion=congestion))
    return FleetResult(steps={job.name: r for job, r in zip(jobs, results)}, kv_transfer_s=kv,
                       iterations=iterations, converged=converged)
