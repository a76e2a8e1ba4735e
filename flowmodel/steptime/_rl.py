"""Iteration time of an RL post-training workload (``traffic.RL``) on the fabric.

The trainer's steps are timed as a training job's (``step_time``); the weight sync and the rollouts'
return are phases of their own on the fabric; generation is the generators' compute (a roofline,
``traffic.Serving``). An iteration, synchronous:

    iteration = generation + rollout_transfer + train_steps x trainer step + weight_sync

and with ``one_step_off`` (generation of the next batch overlaps training):

    iteration = max(generation + rollout_transfer, train_steps x trainer step) + weight_sync

The broadcast sync is timed one bucket at a time: one bucket's chain (and its owner's H2D, a phase
of its own on the owner's host link, pipelined with the chain: the bucket takes the longer of the
two) times the number of buckets. Every bucket is timed as the first one's owner sends it; owners
are alike in a symmetric fabric.

Assumed (docs/sources.md, "RL post-training"): a trainer replica holds the whole model (with expert
parallelism it holds 1 / ep of the routed experts, and their bytes would come from the rest of its
expert-parallel group: not modelled), and the rollouts go to the first pipeline stage.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from ..fabric._network import FabricInfo, Network
from ..routing import Router
from ..traffic._collectives import Phase, bus_factor
from ..traffic._rl import RL
from ._attached import Attached, fabric_bytes
from ._comm import DOMAINS, EXACT, Options, RoutedPhase, phase_time, residual_capacity, route_phase
from ._training import (
    StepResult,
    TrainingPlan,
    calls_per_step,
    map_training_phases,
    phase_bound,
    plan_training,
    routed_phases,
    step_bytes,
    step_time,
)

TRAIN = "train/"  # prefix of the trainer's phases among the plan's


@dataclasses.dataclass(frozen=True, eq=False)
class RLPlan:
    """The routed parts of one RL iteration: the trainer's plan, the weight sync (``sync``: one
    bucket's chain under broadcast, every piece under p2p; ``h2d``: its host-link part when the
    weights wait in host memory) and the rollouts' return. Phases are None where nothing moves."""

    job: RL
    trainer: TrainingPlan
    sync: RoutedPhase | None
    h2d: RoutedPhase | None
    rollout: RoutedPhase | None
    receivers: int  # generator GPUs the sync reaches
    sync_per_gpu: float  # bytes each receiver gets

    KIND = "rl"  # the FleetResult field its results land in (steptime/_fleet.py's plan protocol)
    SERVICE = False  # closed loop: its average load is bytes per iteration / iteration time

    @property
    def domains(self) -> dict[str, str]:
        """The domain each reported transfer crosses."""
        return {kind: ph.domain for kind, ph in (("weight_sync", self.sync), ("rollout_transfer", self.rollout))
                if ph is not None}

    @property
    def sync_calls(self) -> int:
        """Sync phases per iteration: one per bucket under broadcast, one under p2p."""
        return self.job.buckets if self.job.sync == "broadcast" else 1

    def phases(self) -> dict[str, RoutedPhase]:
        out = {TRAIN + n: ph for n, ph in routed_phases(self.trainer).items()}
        for name in ("sync", "h2d", "rollout"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def calls(self, name: str) -> float:
        if name.startswith(TRAIN):
            return self.job.train_steps * calls_per_step(self.trainer, name[len(TRAIN):])
        return float(self.sync_calls) if name in ("sync", "h2d") else 1.0

    def bytes(self, num_links: int, *, logits=None):
        train, _ = _split(logits)
        total = self.job.train_steps * step_bytes(self.trainer, num_links, logits=train)
        for name in ("sync", "h2d", "rollout"):
            total = total + self.calls(name) * fabric_bytes(getattr(self, name), num_links)
        return total

    def evaluate(self, network: Network, options: Options = EXACT, *, info=None, background=None, logits=None):
        return iteration_time(self, network, options, info=info, background=background, logits=logits)

    def map_phases(self, fn) -> RLPlan:
        own = {n: fn(n, getattr(self, n)) for n in ("sync", "h2d", "rollout") if getattr(self, n) is not None}
        trainer = map_training_phases(self.trainer, lambda n, ph: fn(TRAIN + n, ph))
        return dataclasses.replace(self, trainer=trainer, **own)

    def figures(self, result=None) -> dict:
        """run.json's extra figures for this workload."""
        job = self.job
        return {"sync": job.sync, "sync_bytes": job.sync_bytes, "sync_buckets": self.sync_calls,
                "generator_instances": int(job.instances.shape[0]), "colocated": job.colocated,
                "generation_s": job.generation_seconds(), "trainer_gpus": len(job.trainer.ranks)}


def _split(logits):
    """(trainer's logits, the plan's own) of ``{"<phase name>": logits}``."""
    train = {k[len(TRAIN):]: v for k, v in (logits or {}).items() if k.startswith(TRAIN)}
    own = {k: v for k, v in (logits or {}).items() if not k.startswith(TRAIN)}
    if own:
        raise ValueError(f"logits: split logits reach the trainer's phases only, got {', '.join(own)}")
    return train or None, own


def _reshard(job: RL, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, bytes) of the p2p sync: every generator GPU's shard from the trainer ranks that hold
    it (instance i from trainer replica i mod dp), local pieces (src == dst) included."""
    dp, pp, _, tp = grid.shape
    gen = job.instances
    K = gen.shape[1]
    t, k = np.arange(tp)[:, None], np.arange(K)[None, :]
    overlap = np.clip(np.minimum((t + 1) / tp, (k + 1) / K) - np.maximum(t / tp, k / K), 0.0, None)  # [tp, K]
    per_stage = job.sync_bytes / pp
    ti, ki = np.nonzero(overlap > 0)  # the (trainer TP rank, generator TP rank) pairs that share a slice
    src, dst, size = [], [], []
    for i in range(gen.shape[0]):
        for s in range(pp):
            src.append(grid[i % dp, s, 0, ti])
            dst.append(gen[i, ki])
            size.append(per_stage * overlap[ti, ki])
    return tuple(np.concatenate(x) for x in (src, dst, size))


def _chains(info: FabricInfo, owner: int, receivers: np.ndarray, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) int64 of ``channels`` pipelined chains from ``owner`` over ``receivers``: chain c
    visits the receivers' scale-up domains in order, entering each at its c-th GPU."""
    domain = info.gpu_domain[receivers]
    cuts = np.flatnonzero(np.diff(domain) != 0) + 1
    blocks = np.split(receivers, cuts)
    src, dst = [], []
    for c in range(channels):
        order = np.concatenate([[owner], *(np.roll(b, -(c % b.size)) for b in blocks)])
        src.append(order[:-1])
        dst.append(order[1:])
    return np.concatenate(src).astype(np.int64), np.concatenate(dst).astype(np.int64)


def plan_rl(job: RL, info: FabricInfo, router: Router, *, policy: str = "ecmp", seed: int = 0,
            qps: int = 4) -> RLPlan:
    """Place the workload and route its trainer, weight sync and rollouts (``policy`` as in routing)."""
    trainer = plan_training(job.trainer, info, router, policy=policy, seed=seed, qps=qps)
    grid = trainer.grid
    gen = job.instances
    receivers = gen.reshape(-1)
    h2d = None
    if job.sync == "broadcast":
        owner = int(grid[0, 0, 0, 0])
        bucket = job.sync_bytes / job.buckets
        others = receivers[receivers != owner]
        src, dst = _chains(info, owner, others, job.channels) if others.size else (np.zeros(0, np.int64),) * 2
        phase = Phase(src, dst, np.full(src.size, bucket / job.channels), int(src.size // job.channels))
        if job.weights_in_host:  # even a lone GPU reads its weights from host memory
            host = Attached.of(info, [owner], job.host_bandwidth)
            h2d = host.phase([owner], [[host.host_in(owner)]], bucket)
        per_gpu = job.sync_bytes
    else:
        src, dst, size = _reshard(job, grid)
        if job.weights_in_host and src.size:  # every piece read leaves its source's host memory, kept ones too
            owners, where = np.unique(src, return_inverse=True)
            host = Attached.of(info, owners, job.host_bandwidth)
            h2d = host.phase(owners, [[host.host_in(int(r))] for r in owners], np.bincount(where, weights=size))
        moved = src != dst  # a piece a GPU keeps crosses no fabric link
        phase = Phase(src[moved].astype(np.int64), dst[moved].astype(np.int64), size[moved], 1)
        per_gpu = job.sync_bytes / gen.shape[1]
    sync = route_phase(phase, router, policy, seed=seed, qps=qps) if phase.num_flows else None
    first_stage = grid[np.arange(gen.shape[0]) % grid.shape[0], 0, 0, 0]
    back = gen[:, 0] != first_stage
    rollout = None
    if back.any():
        rollout = route_phase(Phase(gen[back, 0], first_stage[back], np.full(int(back.sum()), job.rollout_bytes()), 1),
                              router, policy, seed=seed, qps=qps)
    return RLPlan(job, trainer, sync, h2d, rollout, int(receivers.size), float(per_gpu))


def iteration_time(plan: RLPlan, network: Network, options: Options = EXACT, *, info: FabricInfo | None = None,
                   background=None, logits=None) -> StepResult:
    """One RL iteration on ``network`` (differentiable in its capacity and latency), as a ``StepResult``:
    ``breakdown`` (sums to ``step_time``) is ``generation`` (its exposed part under one_step_off, the
    rollouts' return included there), ``rollout_transfer``, ``training`` (train_steps x the trainer's
    step) and ``weight_sync``; ``collectives`` reports the weight sync and the rollout transfer;
    ``dp_starts`` are the trainer step's."""
    residual_capacity(network.capacity, background, info)
    train_logits, _ = _split(logits)
    job = plan.job
    train = step_time(plan.trainer, network, options, info=info, background=background, logits=train_logits)
    capacity = network.capacity if background is None else network.capacity - background
    latency = network.latency
    zero = jnp.zeros((), capacity.dtype)

    def timed(ph):
        return zero if ph is None else phase_time(ph, capacity, latency, options)

    sync = plan.sync_calls * jnp.maximum(timed(plan.sync), timed(plan.h2d))
    rollout = timed(plan.rollout)
    generation = job.generation_seconds()
    training = job.train_steps * train.step_time
    if job.schedule == "synchronous":
        parts = {"generation": generation + zero, "rollout_transfer": rollout, "training": training,
                 "weight_sync": sync}
    else:
        exposed = jnp.maximum(generation + rollout - training, 0.0)
        parts = {"generation": exposed, "rollout_transfer": zero, "training": training, "weight_sync": sync}
    total = parts["generation"] + parts["rollout_transfer"] + training + sync
    by_domain = {d: job.train_steps * train.by_domain[d] for d in DOMAINS}
    for ph, seconds in ((plan.sync if plan.sync is not None else plan.h2d, sync),
                        (plan.rollout, parts["rollout_transfer"])):
        if ph is not None:  # a sync on host links alone counts as scale_up (inside the node)
            by_domain[ph.domain] = by_domain[ph.domain] + seconds
    report = {}
    if plan.sync is not None or plan.h2d is not None:
        bound = plan.sync_calls * jnp.maximum(*(zero if ph is None else phase_bound(ph, capacity, latency,
                                                                                     options.step_latency)
                                                for ph in (plan.sync, plan.h2d)))
        report["weight_sync"] = _figures("broadcast", sync, bound, plan.sync_per_gpu, plan.receivers)
    if plan.rollout is not None:
        bound = phase_bound(plan.rollout, capacity, latency, options.step_latency)
        report["rollout_transfer"] = _figures("send_recv", rollout, bound, job.rollout_bytes(), 2)
    return StepResult(step_time=total, breakdown=parts, by_domain=by_domain, collectives=report,
                      dp_starts=train.dp_starts)  # the trainer's: the link view replays its DP reduction from them


def _figures(collective: str, seconds, bound, size: float, ranks: int) -> dict:
    return {"seconds": seconds, "bound_seconds": bound, "efficiency": bound / seconds, "bytes": size,
            "ranks": ranks, "algbw": size / seconds, "busbw": size / seconds * bus_factor(collective, ranks)}
