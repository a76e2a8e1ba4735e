"""End-to-end time to train on a prepared scenario: failures at real rates, checkpoints, restarts.

``plan(model)`` reads the scenario's ``reliability`` section (:class:`~flowmodel.steptime.Reliability`)
against each training job that says how much to train (``tokens`` or ``steps``), once:

- **What the job depends on.** Its GPUs, hosts (``gpus_per_host`` GPUs each) and NICs (one per GPU)
  and the site power of every site it runs in always interrupt it. Of the switches (by kind) and
  cables (by tier) its routes cross, one element per kind, the one that carries the most of the job's
  bytes, is failed on the fabric (``resilience.failed``: re-routed with the scenario's routing): if
  the job loses a GPU or a path, that kind interrupts it; otherwise the kind degrades it, and the
  failed fabric's step time (``resilience.carry_groups``: a function of the healthy fabric's link
  groups) holds for the element's repair time. Fabrics are symmetric within a kind, so one element
  speaks for all; the most loaded one is the conservative choice.
- **Checkpoint traffic.** Storage sits at the top of each site's scale-out fabric: every site has a
  storage ingest (and egress) of ``storage_bandwidth`` bytes/s attached to its top-tier switches. A
  checkpoint is written in a pause of the job (the fabric carries only the scenario's inference and
  background load meanwhile): every GPU of the job writes an equal shard of it (a distributed
  checkpoint: weights and optimizer state, the replicas de-duplicated) up its scale-out path (one
  up-link per level, spread over the GPUs in mixed radix so that every up-link carries the same
  number of shards) and into its site's storage; the restart reads the same shards back down. Both
  are timed by the fluid model (``completion_times``) on the network's capacities with the storage
  links appended, so they are differentiable in the network and in the storage bandwidth. With
  ``checkpoint_mode: overlap`` the job pauses only for a ``snapshot`` to host memory and the write
  runs alongside it (see ``time_to_train``).
- **Time to train.** ``time_to_train`` combines them in the renewal-reward model of
  ``flowmodel.steptime`` (``expected_wall_time``): healthy and degraded step time, checkpoint pauses,
  lost work and restarts (detection + rescheduling + the checkpoint's read, + the site's repair after a
  power loss). ``report`` adds the seeded Monte Carlo (p50 / p90) and is what ``flowmodel run``
  prints; ``objective`` is expected time to train for ``optimize.minimize``.

>>> import jax; jax.config.update("jax_enable_x64", True)
>>> from flowmodel import fabric as fb, reliability, scenario as sc, steptime as st, traffic as tr
>>> site = fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=2, spines_per_pod=2)
>>> small = tr.Model("small", layers=4, hidden=1024, ffn_hidden=4096, heads=8, kv_heads=8, vocab=32000, seq_len=2048)
>>> job = tr.Training(small, tr.Parallelism(tp=8, dp=2), global_batch=8, steps=1_000_000)
>>> section = st.Reliability(gpu=st.Component(rate_per_day=0.01), storage_bandwidth=10e9, rescheduling=600.0)
>>> model = sc.prepare(sc.Scenario("demo", fb.Fleet(sites=(fb.Site("a", scale_out=site),)), training=(job,),
...                                reliability=section))
>>> figures, lines = reliability.report(model)
>>> round(figures["interruptions_per_day"], 2), round(figures["checkpoint_write_s"], 3)  # 16 GPUs; 1.9 GB
(0.16, 0.186)
>>> round(figures["checkpoint_interval_s"]), round(figures["effective_training_time"], 4)
(448, 0.9981)
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from . import _units
from .fabric import Network
from .kernels import completion_times, incidence, link_bytes
from .resilience import Failure, carry_groups, failed
from .scenario import Model, ScenarioWarning
from .steptime import (
    Options,
    Reliability,
    TrainingPlan,
    evaluate_fleet,
    expected_wall_time,
    mean_step_time,
    optimal_interval,
    residual_capacity,
    simulate,
    step_bytes,
    young_daly,
)
from .steptime._attached import climb, descents

DAY = 86400.0  # seconds; failure rates are given per component-day
UNITS = {"_days": "days", "_per_day": "per day", "effective": "healthy time / expected time",
         "effective_training_time": "healthy time / expected time", "rate_per_day": "per component per day"}


@dataclasses.dataclass(frozen=True, eq=False)
class Exposure:
    """One kind of component a job depends on: ``count`` of them, each failing at ``rate_per_day``;
    ``interrupts`` (with ``restart_extra`` seconds of repair to wait for) or degrades the job to the
    step time of ``failed_model`` for ``repair`` seconds. ``element`` is the one that was failed."""

    name: str
    count: int
    rate_per_day: float
    repair: float
    interrupts: bool
    restart_extra: float = 0.0
    element: str | None = None
    failed_model: Model | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class StorageTraffic:
    """A checkpoint's shards as flows: ``write`` / ``read`` int32[F, H] routes over the network's links
    and the storage links appended after them (site ``s``: ingest ``L + s``, egress ``L + S + s``)."""

    write: np.ndarray
    read: np.ndarray
    shard: float  # bytes per GPU
    num_sites: int


@dataclasses.dataclass(frozen=True, eq=False)
class JobReliability:
    """What ``time_to_train`` needs of one job, prepared once."""

    plan: TrainingPlan
    steps: int
    checkpoint_size: float
    exposures: tuple[Exposure, ...]
    storage: StorageTraffic

    @property
    def interrupting(self) -> tuple[Exposure, ...]:
        return tuple(e for e in self.exposures if e.interrupts and e.count * e.rate_per_day > 0)

    @property
    def degrading(self) -> tuple[Exposure, ...]:
        return tuple(e for e in self.exposures if not e.interrupts and e.count * e.rate_per_day > 0)

    @property
    def rate(self) -> float:
        """Interruptions per second."""
        return sum(e.count * e.rate_per_day for e in self.interrupting) / DAY


def _section(model: Model) -> Reliability:
    r = model.scenario.reliability
    if r is None:
        raise ValueError("reliability: the scenario has no reliability section")
    return r


def _storage_traffic(model: Model, ranks: np.ndarray, shard: float) -> StorageTraffic:
    info = model.info
    L = info.num_links
    sites = sorted({info.site_of(int(info.gpus[r])) for r in ranks})
    paths = climb(info, ranks, "reliability.storage")
    downs = descents(info, paths)
    H = max(len(p) for p in paths) + 1
    write = np.full((len(paths), H), -1, np.int32)
    read = np.full((len(paths), H), -1, np.int32)
    for f, (r, path, back) in enumerate(zip(ranks.tolist(), paths, downs)):
        s = sites.index(info.site_of(int(info.gpus[r])))
        write[f, :len(path) + 1] = path + [L + s]
        read[f, :len(path) + 1] = [L + len(sites) + s] + back
    return StorageTraffic(write, read, shard, len(sites))


def checkpoint_times(job: JobReliability, model: Model, network: Network | None = None, storage_bandwidth=None,
                     *, busy=None):
    """(write, read) seconds of the job's checkpoint on ``network`` (the fluid model; differentiable
    in the network's capacities and in ``storage_bandwidth``, default the section's). ``busy``:
    float[L] bytes/s the running job keeps on the links during the write (the read is in a pause)."""
    network = model.network if network is None else network
    bandwidth = _section(model).storage_bandwidth if storage_bandwidth is None else storage_bandwidth
    free = residual_capacity(network.capacity, model.fixed_load, model.info)  # inference, background go on
    S = job.storage.num_sites
    storage = jnp.broadcast_to(jnp.asarray(bandwidth, free.dtype), (2 * S,))
    sizes = jnp.full(job.storage.write.shape[0], job.storage.shard, free.dtype)
    shared = free if busy is None else jnp.maximum(free - busy, 0.01 * free)  # a link the job fills still drains
    engine = model.options.engine

    def makespan(routes, capacity):  # the xla engine keeps the sparse solve with the routes' incidence
        inc = None if engine.on_host else incidence(routes, capacity.shape[0])
        return jnp.max(completion_times(routes, sizes, capacity, incidence=inc, engine=engine))

    return makespan(job.storage.write, jnp.concatenate([shared, storage])), makespan(job.storage.read,
                                                                                     jnp.concatenate([free, storage]))


def _heaviest(elements: dict, load: np.ndarray) -> str:
    return max(elements, key=lambda e: (sum(load[i] for i in elements[e]), e))


def _exposures(model: Model, plan: TrainingPlan, section: Reliability) -> tuple[Exposure, ...]:
    info, job = model.info, plan.job
    ranks = job.job_ranks(info.num_gpus)
    n = int(ranks.size)
    sites = sorted({info.site_of(int(info.gpus[r])) for r in ranks})
    out = [Exposure("gpu", n, section.gpu.rate_per_day, section.gpu.repair, True),
           Exposure("host", len({int(r) // section.gpus_per_host for r in ranks}), section.host.rate_per_day,
                    section.host.repair, True),
           Exposure("nic", n, section.nic.rate_per_day, section.nic.repair, True),
           Exposure("site_power", len(sites), section.site_power.rate_per_day, section.site_power.repair, True,
                    restart_extra=section.site_power.repair)]
    load = np.asarray(step_bytes(plan, info.num_links))
    used = np.flatnonzero(load > 0)
    candidates = []  # (name, component, {element: its links}, failure of one element)
    for kind, component in section.switches:
        nodes: dict[str, list[int]] = {}
        for i in used:
            for node in (int(info.src[i]), int(info.dst[i])):
                if info.node_kind[node] == kind:
                    nodes.setdefault(info.nodes[node], []).append(int(i))
        candidates.append((f"switch {kind}", component, nodes, lambda e: Failure(f"{e} down", switches=(e,))))
    for tier, component in section.cables:
        cables: dict[tuple[str, str], list[int]] = {}
        for i in used[info.tier[used] == tier]:
            u, v = sorted((info.nodes[info.src[i]], info.nodes[info.dst[i]]))
            cables.setdefault((u, v), []).append(int(i))
        candidates.append((f"cable {tier}", component, cables, lambda e: Failure(f"{e[0]}-{e[1]} down", cables=(e,))))
    for name, component, elements, failure in candidates:
        if not elements or component.rate_per_day == 0:
            continue  # nothing of the kind on the job's routes, or it never fails: no re-routing needed
        element = _heaviest(elements, load)
        after = failed(model, failure(element))
        cut = job.name in after.lost
        out.append(Exposure(name, len(elements), component.rate_per_day, component.repair, cut,
                            element=str(element), failed_model=None if cut else after))
    return tuple(out)


def plan(model: Model) -> dict[str, JobReliability]:
    """Every training job with ``tokens`` or ``steps``: its exposures (failed fabrics re-routed once)
    and its checkpoint traffic. Raises when a site's storage cannot hold its part of the checkpoint."""
    section = _section(model)
    out = {}
    for p in model.plans:
        job = p.job
        if job.training_steps is None:
            continue
        size = section.checkpoint_size or section.bytes_per_parameter * job.model.params
        ranks = job.job_ranks(model.info.num_gpus)
        storage = _storage_traffic(model, ranks, size / ranks.size)
        if section.storage_capacity is not None:
            per_site: dict[str, int] = {}
            for r in ranks.tolist():
                site = model.info.site_of(int(model.info.gpus[r]))
                per_site[site] = per_site.get(site, 0) + 1
            site, gpus = max(per_site.items(), key=lambda kv: kv[1])
            if gpus * storage.shard > section.storage_capacity:
                raise ValueError(f"reliability.storage.capacity: {job.name}'s checkpoint puts "
                                 f"{gpus * storage.shard:.4g} bytes on site {site}'s storage, more than its "
                                 f"{section.storage_capacity:.4g}")
        out[job.name] = JobReliability(p, job.training_steps, size, _exposures(model, p, section), storage)
    if not out:
        raise ValueError("workloads.training: the reliability section needs a training job with tokens or steps")
    return out


def time_to_train(job: JobReliability, model: Model, network: Network | None = None, *, interval=None,
                  storage_bandwidth=None, options: Options | None = None) -> dict:
    """Expected time to train ``job`` on ``network`` (default: the scenario's), in seconds, with its parts.

    ``interval`` (seconds of work between checkpoints) defaults to the section's, or the exact optimum.
    Every value is a JAX scalar, differentiable in the network, ``interval`` and ``storage_bandwidth``.
    Keys: ``expected_s``, ``healthy_s`` (the steps at the healthy step time), ``effective`` (their
    ratio), ``interval_s``, ``young_daly_s``, ``optimal_interval_s``, ``checkpoint_s`` (the write),
    ``pause_s`` (what a checkpoint stops the job for), ``read_s``, ``restart_s`` (the mean over
    interruption kinds), ``restart_base_s`` (before any repair), ``healthy_step_s``, ``mean_step_s``,
    ``interruptions_per_day``.

    With ``checkpoint_mode: overlap`` the job and the write see each other's average load (mean-field,
    one pass): the write runs on the capacity the job's average load leaves, the job's step carries
    the checkpoint's bytes spread over the interval, the interval is never shorter than the write (writes
    do not pile up), and an interruption costs one write more (the newest checkpoint may not be durable
    yet: an upper bound on the loss).
    """
    section = _section(model)
    network = model.network if network is None else network
    options = model.options if options is None else options
    name = job.plan.job.name
    healthy = model.fleet(network, options).steps[name].step_time
    degraded = [e.failed_model.fleet(carry_groups(model, e.failed_model, network), options).steps[name].step_time
                for e in job.degrading]
    mean = healthy
    if degraded:
        d = job.degrading
        mean = mean_step_time(healthy, jnp.stack(degraded), [e.count for e in d], [e.rate_per_day for e in d],
                              [e.repair for e in d])
    overlap = section.checkpoint_mode == "overlap"
    L = network.num_links
    busy = step_bytes(job.plan, L) / healthy if overlap else None
    write, read = checkpoint_times(job, model, network, storage_bandwidth, busy=busy)
    pause = section.snapshot if overlap else write
    rate = job.rate
    restart_base = section.detection + section.rescheduling + read + (write if overlap else 0.0)
    asked = section.interval if interval is None else interval
    if rate > 0:
        shares = np.array([e.count * e.rate_per_day for e in job.interrupting]) / (rate * DAY)
        restarts = jnp.stack([restart_base + e.restart_extra for e in job.interrupting])
        best = optimal_interval(pause, rate)
        yd = young_daly(pause, rate)
        restart = jnp.sum(shares * restarts)
    else:  # nothing interrupts it: no checkpoint is needed, unless an interval is asked for
        best = yd = jnp.inf
        restart = restart_base
    tau = best if asked is None else asked
    if overlap:
        tau = jnp.maximum(tau, write)
        on_links = link_bytes(job.storage.write, jnp.full(job.storage.write.shape[0], job.storage.shard),
                              L + 2 * job.storage.num_sites)[:L]
        loaded = evaluate_fleet(list(model.all_plans), network, options, fixed_load=model.fixed_load + on_links / tau,
                                transfers=model.transfers, info=model.info).steps[name].step_time
        mean = mean + (loaded - healthy)
    work = job.steps * mean
    if rate > 0:
        expected = expected_wall_time(work, tau, pause, rate, restart=restarts, shares=shares)
    else:
        expected = work * (1.0 + pause / tau)
    healthy_s = job.steps * healthy
    return {"expected_s": expected, "healthy_s": healthy_s, "effective": healthy_s / expected,
            "interval_s": jnp.asarray(tau), "young_daly_s": jnp.asarray(yd), "optimal_interval_s": jnp.asarray(best),
            "checkpoint_s": write, "pause_s": jnp.asarray(pause), "read_s": read, "restart_s": restart,
            "restart_base_s": jnp.asarray(restart_base), "healthy_step_s": healthy, "mean_step_s": mean,
            "interruptions_per_day": jnp.asarray(rate * DAY)}


MAX_EVENTS = 200_000  # per run: past this the simulation would take minutes; the analytic figure stands


def monte_carlo(job: JobReliability, model: Model, figures: dict) -> np.ndarray | None:
    """float64[runs] seeded Monte Carlo wall-clock seconds of the job at ``figures`` (``time_to_train``'s),
    or None (with a ``ScenarioWarning``) when a run would take more than ``MAX_EVENTS`` segments and
    interruptions (each simulation pass serves one of them)."""
    section = _section(model)
    rate = job.rate
    work = job.steps * float(figures["mean_step_s"])
    if rate == 0:
        return np.full(section.runs, float(figures["expected_s"]))
    events = float(figures["expected_s"]) * rate + work / float(figures["interval_s"])
    if not events <= MAX_EVENTS:
        warnings.warn(f"reliability.monte_carlo: skipped, a run would take about {events:.3g} segments and "
                      f"interruptions (more than {MAX_EVENTS}); p50 and p90 are not reported", ScenarioWarning,
                      stacklevel=2)
        return None
    shares = np.array([e.count * e.rate_per_day for e in job.interrupting]) / (rate * DAY)
    base = float(figures["restart_base_s"])
    return simulate(work, float(figures["interval_s"]), float(figures["pause_s"]), rate,
                    restart=[base + e.restart_extra for e in job.interrupting], shares=shares, runs=section.runs,
                    seed=section.seed, weibull_shape=section.weibull_shape)


def report(model: Model, jobs: dict[str, JobReliability] | None = None) -> tuple[dict, list[str]]:
    """``flowmodel run``'s figures (floats) and printed lines, for the job that takes longest to train
    (``jobs``: from ``plan(model)``, when already made)."""
    jobs = plan(model) if jobs is None else jobs
    per_job = {}
    for name, job in jobs.items():
        evaluate = jax.jit(lambda net, job=job: time_to_train(job, model, net))  # one program: eager is slow
        figures = {k: float(v) for k, v in evaluate(model.network).items()}
        runs = monte_carlo(job, model, figures)
        if runs is None:
            figures.update(mc_mean_s=math.nan, mc_stderr_s=math.nan, mc_p50_s=math.nan, mc_p90_s=math.nan)
        else:
            figures.update(mc_mean_s=float(runs.mean()), mc_stderr_s=float(runs.std(ddof=1) / math.sqrt(runs.size)),
                           mc_p50_s=float(np.percentile(runs, 50)), mc_p90_s=float(np.percentile(runs, 90)))
        per_job[name] = (job, figures)
    name = max(per_job, key=lambda n: per_job[n][1]["expected_s"])
    job, f = per_job[name]
    result = {"time_to_train_days": f["expected_s"] / DAY, "effective_training_time": f["effective"],
              "interruptions_per_day": f["interruptions_per_day"], "checkpoint_interval_s": f["interval_s"],
              "young_daly_interval_s": f["young_daly_s"], "checkpoint_write_s": f["checkpoint_s"],
              "checkpoint_read_s": f["read_s"], "checkpoint_pause_s": f["pause_s"], "restart_s": f["restart_s"],
              "time_to_train_p50_days": f["mc_p50_s"] / DAY, "time_to_train_p90_days": f["mc_p90_s"] / DAY,
              "time_to_train": {n: {**figs, "steps": j.steps, "checkpoint_bytes": j.checkpoint_size,
                                    "exposures": {e.name: {"count": e.count, "rate_per_day": e.rate_per_day,
                                                           "interrupts": e.interrupts, "element": e.element}
                                                  for e in j.exposures}}
                                for n, (j, figs) in per_job.items()}}
    degrading = ", ".join(e.name for e in job.degrading) or "none"
    mode = _section(model).checkpoint_mode
    lines = [f"{name}: {job.steps} steps, time to train {f['expected_s'] / DAY:.2f} days "
             f"(p50 {f['mc_p50_s'] / DAY:.2f}, p90 {f['mc_p90_s'] / DAY:.2f}; healthy {f['healthy_s'] / DAY:.2f}), "
             f"effective training time {f['effective']:.1%}",
             f"  {f['interruptions_per_day']:.2f} interruptions a day; checkpoint of "
             f"{_units.format_value(job.checkpoint_size, 'size')} "
             f"every {f['interval_s'] / 60:.1f} min (Young/Daly {f['young_daly_s'] / 60:.1f} min), "
             f"write {f['checkpoint_s']:.1f} s ({mode}: the job pauses {f['pause_s']:.1f} s), "
             f"restart {f['restart_s']:.1f} s (read {f['read_s']:.1f} s)",
             f"  mean step {f['mean_step_s']:.4f} s vs healthy {f['healthy_step_s']:.4f} s (degraded by: {degrading})"]
    return result, lines


def objective(model: Model, job: JobReliability | None = None, *, search: str = "exact") -> tuple[Callable, Callable]:
    """(search, exact) functions of (network, logits) for ``optimize.minimize``: the expected time to
    train (seconds) of ``job`` (default: the only planned one), searched on exact rates with their
    subgradients (``search="smooth"``: smooth ones) and reported on exact ones; the checkpoint interval follows
    the section (optimal by default)."""
    if job is None:
        jobs = plan(model)
        if len(jobs) != 1:
            raise ValueError(f"job: the scenario plans {len(jobs)} jobs with tokens or steps; name one")
        job = next(iter(jobs.values()))
    exact, during = model.options.exact(), model.options.searched(search)
    compiled = jax.jit(lambda net: time_to_train(job, model, net, options=exact)["expected_s"])
    return (lambda net, logits: time_to_train(job, model, net, options=during)["expected_s"],
            lambda net, logits: float(compiled(net)))
