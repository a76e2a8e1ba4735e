"""Failures and what they cost: step time over failure scenarios, expected and tail.

A :class:`Failure` names what breaks (cables, link groups, switches, sites, or cables degraded to a
fraction of their capacity) and its probability weight. ``evaluate_failures(model, failures)``
applies each one to the prepared scenario's fabric graph and prepares the scenario again on it
(``scenario.prepare``: re-compiled, re-routed with the scenario's routing, every workload re-planned),
then evaluates it with the scenario's options: the healthy case is the scenario's own evaluation. A
job that loses a GPU or a path (``routing.Unreachable``) is reported as disconnected (step time
``inf``), never dropped. ``degraded_step_times`` is the batched form for capacity-only scenarios (no
re-routing): one ``vmap`` over capacity masks.

>>> from flowmodel import fabric as fb, resilience
>>> fleet = fb.Fleet(sites=(fb.Site("a"), fb.Site("b"), fb.Site("c")),
...                  long_haul=fb.ring(["a", "b", "c"], capacity=1.6e12, length_km=100.0))
>>> [f.name for f in resilience.single_failures(fb.build(fleet))]   # one scenario per long-haul cable
['a/border-b/border down', 'a/border-c/border down', 'b/border-c/border down']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np

from .fabric import Network, Tier, apply_groups, fail, group_values
from .scenario import Model, prepare
from .steptime import Options


@dataclasses.dataclass(frozen=True)
class Failure:
    """One failure scenario (see ``fabric.fail`` for what each field removes or degrades)."""

    name: str
    cables: tuple = ()
    switches: tuple[str, ...] = ()
    sites: tuple[str, ...] = ()
    degrade: tuple[tuple[object, float], ...] = ()
    probability: float = 1.0

    def apply(self, g: nx.DiGraph) -> nx.DiGraph:
        return fail(g, cables=self.cables, switches=self.switches, sites=self.sites, degrade=dict(self.degrade))


def single_failures(g: nx.DiGraph, *, tiers: Sequence[str] = (Tier.LONG_HAUL,), switch_kinds: Sequence[str] = (),
                    sites: bool = False, fraction: float | None = None, probability: float = 1.0) -> list[Failure]:
    """One scenario per cable of the given tiers (or that cable degraded to ``fraction``), per switch of
    the given kinds, and per site if asked; each with the same probability weight."""
    out, seen = [], set()
    for u, v, d in g.edges(data=True):
        if d.get("tier") in tiers and frozenset((u, v)) not in seen:
            seen.add(frozenset((u, v)))
            if fraction is None:
                out.append(Failure(f"{u}-{v} down", cables=((u, v),), probability=probability))
            else:
                out.append(Failure(f"{u}-{v} at {fraction:g}", degrade=(((u, v), fraction),), probability=probability))
    for n, d in g.nodes(data=True):
        if d.get("kind") in switch_kinds:
            out.append(Failure(f"{n} down", switches=(n,), probability=probability))
    if sites:
        for s in sorted({d.get("site") for _, d in g.nodes(data=True) if d.get("site")}):
            out.append(Failure(f"site {s} down", sites=(s,), probability=probability))
    if not out:
        raise ValueError("single_failures: no cable, switch or site matches the request")
    return out


def sampled_failures(g: nx.DiGraph, probabilities: dict[str, float], samples: int, *, seed: int = 0,
                     keep_healthy: bool = True, fraction: float | None = None) -> list[Failure]:
    """Monte Carlo scenarios under independent failures: every cable of tier ``t`` (a key of
    ``probabilities``) or switch of kind ``t`` fails with probability ``probabilities[t]``; each
    sample is one scenario of weight 1 / samples (samples with nothing failed are kept as healthy
    scenarios unless ``keep_healthy`` is false). A failed cable is cut, or with ``fraction`` keeps
    that fraction of its capacity. Seeded, so deterministic."""
    if not (isinstance(samples, int) and samples >= 1):
        raise ValueError(f"samples: must be an integer >= 1, got {samples!r}")
    components = []  # (kind key, cable or switch, is_switch)
    seen = set()
    for u, v, d in g.edges(data=True):
        if d.get("tier") in probabilities and frozenset((u, v)) not in seen:
            seen.add(frozenset((u, v)))
            components.append((d["tier"], (u, v), False))
    for n, d in g.nodes(data=True):
        if d.get("kind") in probabilities:
            components.append((d["kind"], n, True))
    for key, p in probabilities.items():
        if not (0 <= p <= 1):
            raise ValueError(f"probabilities[{key}]: must be in [0, 1], got {p!r}")
        if not any(c[0] == key for c in components):
            raise ValueError(f"probabilities[{key}]: no cable tier or switch kind is called {key!r}")
    rng = np.random.default_rng(seed)
    p = np.array([probabilities[c[0]] for c in components])
    out = []
    for i in range(samples):
        down = np.flatnonzero(rng.random(len(components)) < p)
        if not down.size and not keep_healthy:
            continue
        cables = tuple(components[j][1] for j in down if not components[j][2])
        switches = tuple(components[j][1] for j in down if components[j][2])
        name = f"sample {i}: " + (", ".join(str(components[j][1]) for j in down[:3]) if down.size else "healthy") + \
            (f" (+{down.size - 3})" if down.size > 3 else "")
        cut, degrade = (cables, ()) if fraction is None else ((), tuple((c, fraction) for c in cables))
        out.append(Failure(name, cables=cut, switches=switches, degrade=degrade, probability=1.0 / samples))
    if not out:
        raise ValueError("sampled_failures: every sample was healthy and keep_healthy is false")
    return out


@dataclasses.dataclass(frozen=True)
class FailureReport:
    """Step time of every job in every scenario (``inf``: disconnected), and the summary per job."""

    scenarios: list[str]
    step_times: dict[str, np.ndarray]  # job -> float[S]
    healthy: dict[str, float]
    expected: dict[str, float]  # (w_h t_h + sum_i p_i t_i) / (w_h + sum_i p_i) over connected scenarios
    p99: dict[str, float]  # of the same weighted distribution, healthy case included
    worst: dict[str, tuple[str, float]]  # the slowest scenario that kept the job connected
    disconnected: dict[str, list[str]]  # job or service -> scenarios where it lost GPUs or paths
    healthy_weight: float = 1.0
    kv_transfer: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # service -> float[S] seconds
    healthy_kv: dict[str, float] = dataclasses.field(default_factory=dict)
    expected_kv: dict[str, float] = dataclasses.field(default_factory=dict)
    # over routing seeds (``evaluate_failures(..., seeds=...)``): the values above are means over them
    seeds: tuple[int, ...] = ()
    healthy_samples: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # job or service -> float[N]
    samples: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # job or service -> float[S, N]

    def within_seed_spread(self, name: str) -> np.ndarray:
        """bool[S]: the failures whose mean (over the seeds) lies within the healthy fabric's range over
        the same seeds: a difference a new hash draw alone makes, not an effect of the failure. All
        False with one seed (no spread to compare with)."""
        t = self.step_times[name] if name in self.step_times else self.kv_transfer[name]
        base = self.healthy_samples.get(name)
        if base is None or base.size < 2 or not np.isfinite(base).all():
            return np.zeros(t.shape, bool)
        lo, hi = base.min() * (1 - 1e-9), base.max() * (1 + 1e-9)  # float residue is no difference
        return np.isfinite(t) & (t >= lo) & (t <= hi)


def case_weights(healthy_weight: float, probabilities) -> tuple[float, np.ndarray]:
    """The normalised weights of the healthy fabric and of each failure: w_h / W and p_i / W with
    W = w_h + sum_i p_i (a failure left out of the expectation has p_i = 0 here). The one place the
    expectation's weights are made: ``evaluate_failures`` and ``expected_cases`` both use it."""
    p = np.asarray(probabilities, np.float64)
    total = healthy_weight + p.sum()
    if not total > 0:
        raise ValueError(f"failures.healthy_weight: the healthy weight and the failures' probabilities sum to "
                         f"{total!r}; the expectation needs a positive total")
    return healthy_weight / total, p / total


def _summary(healthy: float, t: np.ndarray, probs: np.ndarray, healthy_weight: float):
    """(expected, p99) of one job or service: ``t`` float[S] (inf: disconnected, left out)."""
    ok = np.isfinite(t)
    if not ok.any() and healthy_weight <= 0:
        return np.inf, np.inf
    w_h, w = case_weights(healthy_weight, np.where(ok, probs, 0.0))
    expected = float(w_h * healthy + np.sum(w[ok] * t[ok]))
    values, weights = np.append(t, healthy), np.append(probs, healthy_weight)
    keep = weights > 0
    return expected, _weighted_quantile(values[keep], weights[keep], 0.99)


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values)
    cum = np.cumsum(weights[order]) / weights.sum()
    return float(values[order][min(np.searchsorted(cum, q), values.size - 1)])


def failure_scenarios(model: Model) -> list[Failure]:
    """The failures the scenario's ``failures`` section asks for, on its fabric: one per element, or
    with ``sample`` the seeded independent draws of ``sampled_failures``."""
    f = model.scenario.failures
    if f is None:
        raise ValueError("failures: the scenario has no failures section")
    if f.sample_count is not None:
        return sampled_failures(model.graph, f.sampled(), f.sample_count, seed=f.sample_seed, fraction=f.fraction)
    return single_failures(model.graph, tiers=f.tiers, switch_kinds=f.switch_kinds, sites=f.sites,
                           fraction=f.fraction, probability=f.probability)


def failed(model: Model, failure: Failure) -> Model:
    """The scenario prepared again on the fabric after ``failure`` (jobs it cuts off in ``.lost``);
    a failure that removes nothing (a healthy draw) is the model itself."""
    if not (failure.cables or failure.switches or failure.sites or failure.degrade):
        return model
    return prepare(model.scenario, graph=failure.apply(model.graph), drop_lost=True)


def job_step_times(model: Model) -> dict[str, float]:
    """Every training job's exact step time on the prepared model (``inf`` for a job it lost)."""
    return _times(model)[0]


def _times(model: Model) -> tuple[dict[str, float], dict[str, float]]:
    """(job -> exact step time, service -> KV transfer time or, agentic, request latency); ``inf`` where lost."""
    steps, kv = _seeded_times(model, None)
    return {k: float(v[0]) for k, v in steps.items()}, {k: float(v[0]) for k, v in kv.items()}


def _seeded_times(model: Model, seeds) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``_times`` under each routing seed (float[N] per job and service; None: the model's own seed),
    the seeds in one batched evaluation (``seeds.SeedSet``)."""
    n = 1 if seeds is None else len(seeds)
    sc = model.scenario
    services = (*sc.inference, *sc.agentic)  # open loop: a KV transfer's or a request's time
    steps = {job.name: np.full(n, np.inf) for job in sc.jobs if job.name in model.lost and job not in sc.agentic}
    kv = {s.name: np.full(n, np.inf) for s in services if s.name in model.lost}
    if model.all_plans or model.transfers:
        if seeds is None:
            fleet = jax.tree.map(lambda x: np.asarray(x)[None], model.evaluate())
        else:
            from .seeds import SeedSet

            fleet = SeedSet(model, seeds).evaluate()
        steps.update({name: np.asarray(r.step_time, np.float64) for name, r in fleet.jobs.items()})
        kv.update({name: np.asarray(v, np.float64) for name, v in fleet.kv_transfer_s.items()})
        kv.update({name: np.asarray(r.step_time, np.float64) for name, r in fleet.agentic.items()})
    return steps, kv


def evaluate_failures(model: Model, scenarios: Sequence[Failure], *, healthy_weight: float = 1.0,
                      progress: Callable[[str], None] | None = None,
                      seeds: Sequence[int] | None = None) -> FailureReport:
    """Step time of every job and KV transfer time of every inference service, healthy (the
    scenario's own evaluation) and under each failure (re-routed), with the expectation
    (w_h t_h + sum_i p_i t_i) / (w_h + sum_i p_i) (``case_weights``; w_h = ``healthy_weight``, p_i each
    failure's probability, failures that disconnect the job left out) and the p99 of that weighted
    distribution. Failures that remove the same elements are evaluated once. ``progress`` is called
    with each failure's name once it is evaluated.

    With ``seeds`` (routing seeds, ``seeds.routing_seeds``), the healthy fabric and every failure are
    evaluated under each of them (one batch per fabric): t_h and t_i are then means over the seeds,
    the report keeps every seed's value (``healthy_samples``, ``samples``), and
    ``FailureReport.within_seed_spread`` names the failures whose mean a new hash draw alone could give."""
    if not scenarios:
        raise ValueError("scenarios: none given")
    probs = np.array([s.probability for s in scenarios], np.float64)
    if not (np.isfinite(probs).all() and (probs > 0).all()):
        raise ValueError(f"scenarios: probabilities must be > 0, got {probs.tolist()}")
    if not (np.isfinite(healthy_weight) and healthy_weight >= 0):
        raise ValueError(f"healthy_weight: must be >= 0 and finite, got {healthy_weight!r}")
    sc = model.scenario
    jobs = [job.name for job in sc.jobs if job not in sc.agentic]  # closed loop: a step or an iteration
    services = [s.name for s in (*sc.inference, *sc.agentic)]  # open loop: a KV transfer or a request
    healthy_runs, healthy_kv_runs = _seeded_times(model, seeds)
    healthy = {k: float(v.mean()) for k, v in healthy_runs.items()}
    healthy_kv = {k: float(v.mean()) for k, v in healthy_kv_runs.items()}
    n = 1 if seeds is None else len(seeds)
    names = [s.name for s in scenarios]
    runs = {name: np.empty((len(scenarios), n)) for name in jobs + services}
    seen: dict = {}
    for i, s in enumerate(scenarios):
        key = (s.cables, s.switches, s.sites, s.degrade)
        if key not in seen:  # a draw that fails nothing is the healthy fabric, already evaluated
            seen[key] = (healthy_runs, healthy_kv_runs) if not any(key) else _seeded_times(failed(model, s), seeds)
        steps, kv = seen[key]
        for name in jobs:
            runs[name][i] = steps[name]
        for name in services:
            runs[name][i] = kv[name]
        if progress is not None:
            progress(s.name)
    per_job = {name: runs[name].mean(axis=1) for name in jobs}
    per_kv = {name: runs[name].mean(axis=1) for name in services}
    expected, p99, worst, lost = {}, {}, {}, {}
    for name, t in per_job.items():
        ok = np.isfinite(t)
        lost[name] = [names[i] for i in np.flatnonzero(~ok)]
        expected[name], p99[name] = _summary(healthy[name], t, probs, healthy_weight)
        j = int(np.argmax(np.where(ok, t, -np.inf))) if ok.any() else 0
        worst[name] = (names[j], float(t[j]))
    expected_kv = {}
    for name, t in per_kv.items():
        lost[name] = [names[i] for i in np.flatnonzero(~np.isfinite(t))]
        expected_kv[name] = _summary(healthy_kv[name], t, probs, healthy_weight)[0]
    return FailureReport(names, per_job, healthy, expected, p99, worst, lost, healthy_weight, per_kv, healthy_kv,
                         expected_kv, tuple(seeds or ()), {**healthy_runs, **healthy_kv_runs}, runs)


def degraded_step_times(model: Model, masks) -> jax.Array:
    """The scenario's exact step time under each capacity mask (float[S, L] multipliers in (0, 1]), in
    one ``vmap``; routes stay as planned (a degraded link keeps carrying its traffic, more slowly)."""
    network = model.network
    masks = jnp.asarray(masks)
    if masks.ndim != 2 or masks.shape[1] != network.num_links:
        raise ValueError(f"masks: expected float[S, {network.num_links}], got shape {masks.shape}")
    m = np.asarray(masks)
    if not ((m > 0) & (m <= 1)).all():
        bad = np.argwhere(~((m > 0) & (m <= 1)))[0]
        raise ValueError(f"masks[{bad[0]}, {bad[1]}]: must be in (0, 1], got {m[tuple(bad)]}")
    options = model.options.exact()

    def one(mask):
        return model.step_time(Network(capacity=network.capacity * mask, latency=network.latency), options)

    return jax.jit(jax.vmap(one))(masks)


def carry_groups(model: Model, failed_model: Model, network: Network, groups: Sequence[str] | None = None) -> Network:
    """``failed_model``'s network with the values that ``network`` (one of ``model``'s) gives to
    ``groups`` (default: every group), where its links survive: what makes a failure's step time a
    differentiable function of the healthy fabric's parameters."""
    values = group_values(network, model.info, groups)
    return apply_groups(failed_model.network, failed_model.info,
                        {k: v for k, v in values.items() if k in failed_model.info.groups})


def expected_cases(model: Model, scenarios: Sequence[Failure], *, healthy_weight: float = 1.0):
    """([(weight, model), ...], lost): the healthy model and each failure's model with the weights of
    ``case_weights`` (w_h / W, p_i / W; the same expectation ``evaluate_failures`` reports); failures
    that disconnect a job are left out and their names returned (``lost``)."""
    models, lost = [], []
    for s in scenarios:
        m = failed(model, s)
        if m.lost:
            lost.append(s.name)
        models.append(None if m.lost else m)
    w_h, w = case_weights(healthy_weight, [s.probability if m is not None else 0.0
                                           for s, m in zip(scenarios, models)])
    cases = [(float(w_h), model)] if w_h > 0 else []
    return cases + [(float(wi), m) for wi, m in zip(w, models) if m is not None and wi > 0], lost


def expected_step_time(model: Model, cases, groups: Sequence[str], network: Network, options: Options):
    """The weighted mean step time over ``cases`` (``expected_cases``) with ``network``'s values of
    ``groups`` carried into every failure's fabric; differentiable in ``network``."""
    return sum(w * m.step_time(carry_groups(model, m, network, groups), options) for w, m in cases)


def expected_objective(model: Model, scenarios: Sequence[Failure], groups: Sequence[str], *,
                       healthy_weight: float = 1.0, options: Options | None = None, search: str = "exact"):
    """(objective, exact, disconnected) for ``optimize.minimize``: the probability-weighted mean of the
    scenario's step time over the healthy fabric (weight ``healthy_weight``) and every failure.

    The optimizer moves the healthy fabric's ``groups``; each failure's fabric takes the same group
    values (``fabric.group_values``), so capacity bought once serves in every failure where its links
    survive. Failures that disconnect a job are left out; their names are returned so the caller can
    report them. The search runs on ``options.exact()`` with its subgradients (``search="smooth"``:
    ``options.relaxed()``), the report on ``options.exact()``.
    """
    unknown = [n for n in groups if n not in model.info.groups]
    if unknown:
        raise ValueError(f"groups: unknown link group {unknown[0]!r}")
    options = model.options if options is None else options
    during = options.searched(search)
    cases, lost = expected_cases(model, scenarios, healthy_weight=healthy_weight)

    def objective(net, logits):
        return expected_step_time(model, cases, groups, net, during)

    def exact(net, logits):
        return float(sum(w * m.evaluate(carry_groups(model, m, net, groups), options.exact()).step_time
                         for w, m in cases))

    return objective, exact, lost
