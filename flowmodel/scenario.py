"""A scenario and its prepared model: the one assembly of fabric, routing, workloads and options.

A :class:`Scenario` is typed: a fleet, a :class:`Routing` section, the workloads (training jobs,
inference services, background classes), the model :class:`~flowmodel.steptime.Options`, and the
optional ``optimize`` (:class:`Search`), ``sweep`` (:class:`SweepGrid`), ``failures``
(:class:`FailureSet`) and ``reliability`` (:class:`~flowmodel.steptime.Reliability`) sections.
``config.load`` reads one from YAML; Python code builds one directly. ``prepare(scenario)`` turns
it into a :class:`Model`: the compiled network, fabric info, router, the routed plan of every job,
the constant load of inference and background classes, and the routed KV transfer of every
inference service. Every command (``run``, ``optimize``, ``sweep``, ``failures``), the optimizer's
objective, sweeps, failure analysis and the experiments evaluate a scenario through
``Model.fleet`` / ``Model.step_time``: one function of (prepared model, network).

>>> import jax; jax.config.update("jax_enable_x64", True)
>>> from flowmodel import fabric as fb, scenario as sc, traffic as tr
>>> site = fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=4, spines_per_pod=4)
>>> job = tr.Training(tr.Model("small", layers=4, hidden=1024, ffn_hidden=4096, heads=8, kv_heads=8,
...                            vocab=32000, seq_len=2048), tr.Parallelism(tp=8, dp=4), global_batch=8)
>>> model = sc.prepare(sc.Scenario("demo", fb.Fleet(sites=(fb.Site("a", scale_out=site),)), training=(job,)))
>>> seconds = float(model.step_time())             # the exact model, differentiable in the network
>>> seconds == float(model.evaluate().step_time)   # the compiled program: the same number
True
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable

import networkx as nx
import numpy as np

from ._checks import check_number
from ._programs import Program
from .fabric import FabricInfo, Fleet, Network, build, build_table, compile_fabric, compile_table
from .optimize import CostModel, Knob
from .routing import POLICIES, Router, Unreachable
from .steptime import (
    EXACT,
    FleetResult,
    Options,
    Reliability,
    RoutedPhase,
    TrainingPlan,
    check_workloads,
    constant_load,
    coupling_groups,
    evaluate_fleet,
    plan_agentic,
    plan_recommendation,
    plan_rl,
    plan_training,
    residual_capacity,
    route_phase,
    routed_phases,
)
from .traffic import RL, Agentic, Background, Inference, Recommendation, Training

# scenario key -> planner(job, info, router, policy=, seed=, qps=) of the workloads beside training, in the
# order of steptime.KINDS
PLANNERS = {"recommendation": plan_recommendation, "rl": plan_rl, "agentic": plan_agentic}


@dataclasses.dataclass(frozen=True)
class Routing:
    """How every workload is routed: the policy (``ecmp``, ``spray``, ``qp_scaling``, ``wcmp``), the
    candidate paths per pair (``max_paths``, ``site_paths`` between sites), the hash ``seed``, and
    ``qps`` queue pairs per flow under ``qp_scaling`` (it has no effect under other policies).
    ``seeds``: how many seeds (``seed``, ``seed + 1``, ...) a hash-routed figure is evaluated over
    (``flowmodel.seeds``); None: the command's default (8 for ``run`` and ``failures``)."""

    policy: str = "ecmp"
    max_paths: int = 16
    site_paths: int = 2
    seed: int = 0
    qps: int = 4
    seeds: int | None = None

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"routing.policy: unknown policy {self.policy!r}; known: {', '.join(POLICIES)}")
        for key in ("max_paths", "site_paths", "qps"):
            check_number(f"routing.{key}", getattr(self, key), minimum=1, integer=True)
        check_number("routing.seed", self.seed, integer=True)
        if self.seeds is not None:
            check_number("routing.seeds", self.seeds, minimum=1, integer=True)


@dataclasses.dataclass(frozen=True)
class Search:
    """The optimize section: knobs, their cost and the budget, what to minimise (``objective``, see
    ``flowmodel.objectives``; ``kv_weight`` for inference under ``throughput``), whether the search
    runs on smooth or exact rates (``search``), and the gradient search's settings."""

    knobs: tuple[Knob, ...]
    cost: CostModel = dataclasses.field(default_factory=CostModel)
    budget: float | None = None
    steps: int = 100
    learning_rate: float = 0.05
    restarts: int = 1
    seed: int = 0
    objective: str = "step_time"
    kv_weight: float = 0.0
    search: str = "exact"
    routing: str = "none"

    def __post_init__(self):
        if not self.knobs:
            raise ValueError("optimize.knobs: needs at least one knob")
        check_number("optimize.steps", self.steps, minimum=1, integer=True)
        check_number("optimize.restarts", self.restarts, minimum=1, integer=True)
        check_number("optimize.seed", self.seed, integer=True)
        check_number("optimize.learning_rate", self.learning_rate, strict=True)
        if self.budget is not None:
            check_number("optimize.budget", self.budget, strict=True)
        if self.objective not in ("step_time", "throughput", "expected", "time_to_train"):
            raise ValueError(f"optimize.objective: unknown objective {self.objective!r}; known: step_time, "
                             f"throughput, expected, time_to_train")
        check_number("optimize.kv_weight", self.kv_weight)
        if self.search not in ("smooth", "exact"):
            raise ValueError(f"optimize.search: must be smooth or exact, got {self.search!r}")
        if self.routing not in ("none", "wcmp"):
            raise ValueError(f"optimize.routing: must be none or wcmp, got {self.routing!r}")
        if self.routing == "wcmp" and self.objective not in ("step_time", "throughput"):
            raise ValueError(f"optimize.routing: wcmp splits are searched with the step_time or throughput "
                             f"objective, got objective {self.objective!r}")


@dataclasses.dataclass(frozen=True)
class SweepGrid:
    """The sweep section: link group -> values, and config key path -> values (``settings``); the grid
    is every combination. Points per call, and how the link-group points are batched (``auto``:
    measured; ``vmap``; ``loop``).

    A key with a ``/`` is a link group (``b0/spine_up``): its points change only link capacities and
    are evaluated batched on one prepared model. Any other key is a config key path, as ``--set``
    takes it (``fabric.routing.policy``, ``workloads.training[0].parallelism.tp``): each of its values
    changes what is built, routed or planned, so every combination of settings is a scenario of its
    own (``variants``, parsed and checked when the config is loaded) and is prepared again."""

    grid: tuple[tuple[str, tuple], ...]
    chunk: int | None = None
    batching: str = "auto"
    settings: tuple[tuple[str, tuple], ...] = ()
    # (assignment, scenario) per combination of settings: ((key path, value), ...) and what it parses to
    variants: tuple = dataclasses.field(default=(), compare=False, repr=False)

    def __post_init__(self):
        axes = dict(self.grid)
        for path, values in self.settings:
            axes.setdefault(path, values)
        groups = tuple((str(g), tuple(float(v) for v in vs)) for g, vs in axes.items() if is_link_group(g))
        settings = tuple((str(k), tuple(vs)) for k, vs in axes.items() if not is_link_group(k))
        object.__setattr__(self, "grid", groups)
        object.__setattr__(self, "settings", settings)
        if not groups and not settings:
            raise ValueError("sweep.grid: needs at least one link group or config key")
        for group, values in groups:
            if not values or min(values) <= 0 or not all(math.isfinite(v) for v in values):
                raise ValueError(f"sweep.grid.{group}: needs positive values, got {list(values)}")
        for path, values in settings:
            if not values:
                raise ValueError(f"sweep.grid.{path}: needs at least one value")
            if len(set(map(repr, values))) != len(values):
                raise ValueError(f"sweep.grid.{path}: a value is listed twice, got {list(values)}")
        if self.chunk is not None:
            check_number("sweep.chunk", self.chunk, minimum=1, integer=True)
        if self.batching not in ("auto", "vmap", "loop"):
            raise ValueError(f"sweep.batching: must be auto, vmap or loop, got {self.batching!r}")

    @property
    def axes(self) -> dict[str, tuple[float, ...]]:
        """The link-group axes (batched on one prepared model)."""
        return dict(self.grid)


def is_link_group(key: str) -> bool:
    """A sweep key names a link group (``site/tier``, ``long_haul/a-b``), not a config key path."""
    return "/" in str(key)


@dataclasses.dataclass(frozen=True)
class FailureSet:
    """The failures section: one scenario per cable of ``tiers`` (or that cable at ``fraction`` of its
    capacity), per switch of ``switch_kinds`` and per site if ``sites``, each of weight
    ``probability`` against the healthy fabric's ``healthy_weight`` (default 1). With
    ``sample_count``, instead ``sample_count`` seeded draws in which every element of ``tiers`` and
    ``switch_kinds`` fails independently (``resilience.sampled_failures``) with ``probability`` (or its
    tier's entry of ``sample_probabilities``); the draws in which nothing fails are the healthy cases,
    so ``healthy_weight`` is 0 there and may not be set."""

    tiers: tuple[str, ...] = ()
    switch_kinds: tuple[str, ...] = ()
    sites: bool = False
    fraction: float | None = None
    probability: float = 0.01
    healthy_weight: float | None = None
    sample_count: int | None = None
    sample_seed: int = 0
    sample_probabilities: tuple[tuple[str, float], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "tiers", tuple(self.tiers or ()))
        object.__setattr__(self, "switch_kinds", tuple(self.switch_kinds or ()))
        probabilities = self.sample_probabilities
        object.__setattr__(self, "sample_probabilities", tuple(sorted(
            (probabilities.items() if isinstance(probabilities, dict) else probabilities) or ())))
        if not (0 < self.probability <= 1):
            raise ValueError(f"failures.probability: must be in (0, 1], got {self.probability!r}")
        if self.fraction is not None and not (0 < self.fraction <= 1):
            raise ValueError(f"failures.fraction: must be in (0, 1], got {self.fraction!r}")
        if self.healthy_weight is not None:
            check_number("failures.healthy_weight", self.healthy_weight)
        if not (self.tiers or self.switch_kinds or self.sites):
            raise ValueError("failures: names nothing to fail (tiers, switch_kinds or sites)")
        check_number("failures.sample.seed", self.sample_seed, integer=True)
        if self.sample_count is None:
            if self.sample_probabilities:
                raise ValueError("failures.sample.probabilities: needs failures.sample.count")
            return
        check_number("failures.sample.count", self.sample_count, minimum=1, integer=True)
        if self.healthy_weight is not None:
            raise ValueError(f"failures.healthy_weight: not with failures.sample (the draws in which nothing fails "
                             f"are the healthy cases), got {self.healthy_weight!r}")
        if self.sites:
            raise ValueError("failures.sites: not with failures.sample (it draws cables and switches)")
        for name, p in self.sample_probabilities:
            if name not in self.tiers + self.switch_kinds:
                raise ValueError(f"failures.sample.probabilities.{name}: not one of failures.tiers or "
                                 f"failures.switch_kinds ({', '.join(self.tiers + self.switch_kinds)})")
            if not (0 <= p <= 1):
                raise ValueError(f"failures.sample.probabilities.{name}: must be in [0, 1], got {p!r}")

    @property
    def weight_of_healthy(self) -> float:
        """w_h of the expectation: ``healthy_weight``, by default 1 (0 with ``sample_count``)."""
        if self.healthy_weight is not None:
            return self.healthy_weight
        return 0.0 if self.sample_count is not None else 1.0

    def sampled(self) -> dict[str, float]:
        """Tier or switch kind -> the probability each of its elements fails in a draw."""
        given = dict(self.sample_probabilities)
        return {name: given.get(name, self.probability) for name in self.tiers + self.switch_kinds}


@dataclasses.dataclass(frozen=True)
class Scenario:
    """Everything a study needs, typed: fabric, routing, workloads, model options, and what to do."""

    name: str
    fleet: Fleet
    routing: Routing = Routing()
    training: tuple[Training, ...] = ()
    inference: tuple[Inference, ...] = ()
    background: tuple[Background, ...] = ()
    recommendation: tuple[Recommendation, ...] = ()
    rl: tuple[RL, ...] = ()
    agentic: tuple[Agentic, ...] = ()
    options: Options = EXACT
    optimize: Search | None = None
    sweep: SweepGrid | None = None
    failures: FailureSet | None = None
    reliability: Reliability | None = None

    def __post_init__(self):
        for key in ("training", "inference", "background", *PLANNERS):
            object.__setattr__(self, key, tuple(getattr(self, key)))
        if not self.training and not self.inference and not any(getattr(self, key) for key in PLANNERS):
            raise ValueError("workloads: needs at least one training job or inference service "
                             "(or a recommendation, rl or agentic workload)")
        if self.reliability is not None and all(job.training_steps is None for job in self.training):
            raise ValueError("workloads.training: the reliability section needs a training job with tokens or steps")
        if self.optimize is not None and self.optimize.routing == "wcmp" and self.routing.policy != "wcmp":
            raise ValueError(f"optimize.routing: wcmp knobs need split weights, but fabric.routing.policy is "
                             f"{self.routing.policy!r}, which has none; set fabric.routing.policy: wcmp")
        needs = {"expected": ("failures", self.failures), "time_to_train": ("reliability", self.reliability)}
        if self.optimize is not None and self.optimize.objective in needs:
            section, value = needs[self.optimize.objective]
            if value is None:
                raise ValueError(f"optimize.objective: {self.optimize.objective} needs a {section} section")

    @property
    def jobs(self) -> tuple:
        """Every workload that owns its GPUs: training jobs, then the planned kinds (``PLANNERS``)."""
        return (*self.training, *(job for key in PLANNERS for job in getattr(self, key)))

    def warnings(self) -> list[str]:
        """What is legal but probably not meant: GPUs no workload uses, a job whose estimated memory
        per GPU (``Training.memory``) exceeds its ``hbm``. ``prepare`` issues them as
        :class:`ScenarioWarning`."""
        out = []
        total = self.fleet.num_gpus
        busy = set()
        for job in self.jobs:
            busy.update(job.job_ranks(total).tolist())
        for inf in self.inference:
            busy.update(r for instance in (*inf.prefill, *inf.decode) for r in instance)
        idle = sorted(set(range(total)) - busy)
        if idle:
            out.append(f"workloads: {len(idle)} of the fabric's {total} GPUs run no training job or inference "
                       f"service (ranks {_spans(idle)})")
        trainers = [(f"workloads.training[{i}]", job) for i, job in enumerate(self.training)]
        trainers += [(f"workloads.rl[{i}].trainer", rl.trainer) for i, rl in enumerate(self.rl)]
        for where, job in trainers:
            memory = job.memory()
            need = sum(memory.values())
            if need > job.hbm:
                hint = ("a wider model-parallel layout or offloading, which the step time does not include"
                        if job.recomputes else "recompute: full (the step time counts its extra forward pass) or "
                        "offloading")
                out.append(f"{where}.hbm: {job.name!r} needs about {need / 1e9:.1f} GB per GPU "
                           f"(weights {memory['weights'] / 1e9:.1f}, gradients {memory['gradients'] / 1e9:.1f}, "
                           f"optimizer {memory['optimizer'] / 1e9:.1f}, activations {memory['activations'] / 1e9:.1f} "
                           f"GB with recompute: {job.recompute}, zero_stage {job.zero_stage}), more than hbm = "
                           f"{job.hbm / 1e9:.0f} GB: it would need {hint}")
        return out


class ScenarioWarning(UserWarning):
    """A scenario that is legal but probably not what was meant (``Scenario.warnings``)."""


def _spans(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    spans, start = [], ranks[0]
    for a, b in zip(ranks, ranks[1:] + [None]):
        if b != a + 1:
            spans.append(str(start) if start == a else f"{start}-{a}")
            start = b
    return ", ".join(spans)




class Model:
    """A prepared scenario: built and routed once, evaluated many times (``prepare`` makes one).

    Attributes:
      scenario: what it was prepared from; graph, network, info, router: the fabric as built,
      compiled and routed; plans: one per training job still connected; others: the plans of every
      other workload with phases of its own (recommendation, RL, agentic: ``steptime/_fleet.py``'s
      plan protocol), coupled with the training jobs in ``groups`` at indices past ``plans``
      (``all_plans`` is both, in that order); lost: workload name -> why
      it could not be planned (only with ``prepare(..., drop_lost=True)``); fixed_load: float[L] bytes/s
      of inference and background traffic; transfers: (service name, routed KV transfer) pairs;
      groups: the jobs (indices into plans) coupled through shared links (``steptime.coupling_groups``).

    ``fleet`` and ``step_time`` are pure functions of the network (and WCMP logits): jit, vmap and
    differentiate them. ``evaluate`` runs the same function through a compiled program that this
    object holds, one per :class:`Options` value (its routes and sizes are arguments of the program,
    not constants folded into it: see ``flowmodel._programs``).
    """

    def __init__(self, scenario: Scenario, graph: nx.DiGraph | None, network: Network, info: FabricInfo,
                 router: Router, plans: tuple[TrainingPlan, ...], fixed_load: np.ndarray,
                 transfers: tuple[tuple[str, RoutedPhase], ...], lost: dict[str, str], others: tuple = ()):
        self.scenario, self._graph, self.network, self.info, self.router = scenario, graph, network, info, router
        self.plans, self.fixed_load, self.transfers, self.lost = plans, fixed_load, transfers, lost
        self.others = tuple(others)
        self.groups = coupling_groups(self.all_plans, network.num_links)
        self._programs: dict[Options, Callable] = {}

    @property
    def all_plans(self) -> tuple:
        """The training plans, then the other workloads' plans: the order of ``groups`` and ``fleet``."""
        return (*self.plans, *self.others)

    @property
    def recommendation(self) -> tuple:
        """The recommendation jobs' plans."""
        return tuple(p for p in self.others if p.KIND == "recommendation")

    @property
    def graph(self) -> nx.DiGraph:
        """The fabric graph (``graph=None`` at construction: the scenario's fleet, built on first use;
        ``prepare`` compiles a fleet without building its graph)."""
        if self._graph is None:
            self._graph = build(self.scenario.fleet)
        return self._graph

    @property
    def options(self) -> Options:
        return self.scenario.options

    def fleet(self, network: Network | None = None, options: Options | None = None, logits=None) -> FleetResult:
        """Every job's step and every service's KV transfer time on ``network`` (default: the scenario's)."""
        return evaluate_fleet(list(self.all_plans), self.network if network is None else network,
                              self.options if options is None else options, fixed_load=self.fixed_load,
                              transfers=self.transfers, info=self.info, logits=logits, groups=self.groups)

    def step_time(self, network: Network | None = None, options: Options | None = None, logits=None):
        """The scenario's step time: its slowest training job's (a scalar; differentiable)."""
        return self.fleet(network, options, logits).step_time

    def evaluate(self, network: Network | None = None, options: Options | None = None, logits=None) -> FleetResult:
        """``fleet`` through this model's compiled program for ``options`` (compiled on first use)."""
        network = self.network if network is None else network
        options = self.options if options is None else options
        residual_capacity(network.capacity, self.fixed_load, self.info)  # names an overfull link, concretely
        if options not in self._programs:
            self._programs[options] = Program(lambda net, lg: self.fleet(net, options, lg))
        return self._programs[options](network, logits)

    def links(self, fleet: FleetResult | None = None, network: Network | None = None, options: Options | None = None,
              logits=None):
        """The link view (``flowmodel.links.LinkView``: per-link bytes, utilisation and collectives,
        hot links, utilisation by tier, flow-completion times) of ``fleet``, an ``evaluate`` of this
        model with the same network, options and logits (evaluated here when None)."""
        from . import links

        if fleet is None:
            fleet = self.evaluate(network, options, logits)
        return links.build(self, fleet, network=network, options=options, logits=logits)

    def split_logits(self) -> dict:
        """Zero WCMP logits (an even split, the routing the scenario is evaluated with) for every routed
        phase of every job with more than one candidate path, keyed ``"<job index>/<phase name>"``
        (``steptime.routed_phases``); empty unless the routing policy is ``wcmp``."""
        return {f"{j}/{name}": np.zeros(ph.num_candidates) for j, plan in enumerate(self.plans)
                for name, ph in routed_phases(plan).items() if ph.num_candidates > 1}

    def score(self, fleet: FleetResult, objective: str = "step_time", kv_weight: float = 0.0):
        """One number of a fleet result (differentiable): ``step_time``, the slowest job's; or
        ``throughput``, the GPU-weighted mean step time of the jobs (training, recommendation, RL),
        sum_j G_j t_j / sum_j G_j,
        plus ``kv_weight`` x each inference service's KV transfer time (every job's bottleneck has a
        gradient, not only the slowest one's)."""
        if objective == "step_time":
            return fleet.step_time
        if objective != "throughput":
            raise ValueError(f"optimize.objective: must be step_time or throughput here, got {objective!r}")
        gpus = {plan.job.name: plan.job.job_ranks(self.info.num_gpus).size for plan in self.all_plans
                if not getattr(plan, "SERVICE", False)}
        if not gpus:
            raise ValueError("optimize.objective: throughput needs a training job")
        mean = sum(gpus[name] * r.step_time for name, r in fleet.jobs.items()) / sum(gpus.values())
        return mean + kv_weight * sum(fleet.kv_transfer_s.values())

    def objective(self, options: Options | None = None, *, objective: str = "step_time", kv_weight: float = 0.0,
                  search: str = "exact") -> tuple[Callable, Callable]:
        """(search, exact) functions of (network, logits) for ``optimize.minimize``: ``score`` of the fleet,
        searched on the exact model with its (sub)gradients (``search="exact"``, as ``optimize.search``) or
        on smooth rates (``"smooth"``: ``options.relaxed()``), and exact for reporting."""
        options = self.options if options is None else options
        during, exact = options.searched(search), options.exact()
        if objective not in ("step_time", "throughput"):
            raise ValueError(f"optimize.objective: must be step_time or throughput here, got {objective!r}")
        return (lambda net, logits: self.score(self.fleet(net, during, logits), objective, kv_weight),
                lambda net, logits: float(self.score(self.evaluate(net, exact, logits), objective, kv_weight)))


def prepare(scenario: Scenario, *, graph: nx.DiGraph | None = None, drop_lost: bool = False,
            progress: Callable[[str], None] | None = None) -> Model:
    """Build, compile and route ``scenario``: the one assembly every command and study uses.

    Args:
      graph: the fabric graph to use instead of building the fleet (a failure scenario's).
      drop_lost: leave out jobs that lost a GPU or a path (they go to ``Model.lost``) instead of
        raising ``routing.Unreachable``.
      progress: called with a short message as each stage starts.
    """
    say = progress or (lambda message: None)
    for message in scenario.warnings():
        warnings.warn(message, ScenarioWarning, stacklevel=2)
    r = scenario.routing
    say("build fabric")
    network, info = compile_table(build_table(scenario.fleet)) if graph is None else compile_fabric(graph)
    router = Router(info, max_paths=r.max_paths, site_paths=r.site_paths, seed=r.seed)
    check_workloads(scenario.jobs, scenario.inference, scenario.background, num_gpus=info.num_gpus)
    say("route workloads")
    plans, lost = [], {}
    for job in scenario.training:
        if (info.gpus[job.job_ranks(info.num_gpus)] < 0).any():
            if not drop_lost:
                raise Unreachable(f"workloads.training[{job.name}]: some of its GPUs failed")
            lost[job.name] = "lost GPUs"
            continue
        try:
            plans.append(plan_training(job, info, router, policy=r.policy, seed=r.seed, qps=r.qps))
        except Unreachable as e:
            if not drop_lost:
                raise
            lost[job.name] = str(e)
    others = []
    for key, plan_job in PLANNERS.items():  # every other workload with phases of its own, in KINDS' order
        for job in getattr(scenario, key):
            if (info.gpus[job.job_ranks(info.num_gpus)] < 0).any():
                if not drop_lost:
                    raise Unreachable(f"workloads.{key}[{job.name}]: some of its GPUs failed")
                lost[job.name] = "lost GPUs"
                continue
            try:
                others.append(plan_job(job, info, router, policy=r.policy, seed=r.seed, qps=r.qps))
            except Unreachable as e:
                if not drop_lost:
                    raise
                lost[job.name] = str(e)
    fixed = constant_load(router, scenario.inference, scenario.background, policy=r.policy, seed=r.seed, qps=r.qps,
                          unreachable="report" if drop_lost else "raise")
    transfers = []
    for inf in scenario.inference:
        try:
            transfers.append((inf.name, route_phase(inf.transfer(), router, r.policy, seed=r.seed, qps=r.qps)))
        except Unreachable as e:
            if not drop_lost:
                raise
            lost[inf.name] = str(e)
    transfers = tuple(transfers)
    return Model(scenario, graph, network, info, router, tuple(plans), fixed, transfers, lost, tuple(others))
