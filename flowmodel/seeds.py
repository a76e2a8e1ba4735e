"""Hash-routed figures over several seeds: one prepared model, its routings under seeds s, s+1, ...,
evaluated as one batch.

ECMP and QP scaling (``routing.HASHED``) pin each flow to one equal-cost path by a hash of the
seed, so one seed's step time is one draw of the hash collisions: on ``configs/dsf_vs_ecmp.yaml``
seeds 0-3 give 0.4505, 0.4901, 0.4110 and 0.4901 s. ``over_seeds(model, seeds)`` routes the
prepared model again under every seed, reusing everything that does not depend on it: placement,
traffic, schedules, the router's path tables (``Router.reseeded``) and, where no pair has more
paths than ``max_paths`` (``Candidates.sampled``), the candidate paths themselves; only the hash
draw is redone. Per routed phase, the seeds' routes are stacked (int32[S, N, H], -1 padded to the
widest; the sub-flows, their parents and fractions are the same under every seed) and the fleet is
evaluated in one ``jax.vmap`` over them: one compiled program, whose host-engine solves run the
seeds on every core. Spray and WCMP draw nothing from the seed (one value).

>>> import jax; jax.config.update("jax_enable_x64", True)
>>> from flowmodel import config, scenario as sc, seeds
>>> model = sc.prepare(config.load("configs/dsf_vs_ecmp.yaml"))
>>> batch = seeds.over_seeds(model, range(4))
>>> [f"{t:.4f}" for t in batch.evaluate().step_time]
['0.4505', '0.4901', '0.4110', '0.4901']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np

from ._programs import Program
from .fabric import Network
from .kernels import HopPairs, Incidence, incidence, stacked_hop_pairs
from .routing import HASHED, split
from .scenario import Model, Routing
from .steptime import (
    KINDS,
    FleetResult,
    Options,
    RoutedPhase,
    TrainingPlan,
    constant_load,
    coupling_groups,
    evaluate_fleet,
    map_training_phases,
    plan_phases,
    residual_capacity,
)

DEFAULT_SEEDS = 8  # what `run` and `failures` evaluate a hash-routed scenario over unless told


def hashed(routing: Routing) -> bool:
    """Whether the routing's paths depend on its seed (ECMP and QP scaling hash it)."""
    return routing.policy in HASHED


def routing_seeds(routing: Routing, default: int = DEFAULT_SEEDS) -> tuple[int, ...]:
    """The seeds a figure is evaluated over: ``seed, seed + 1, ..., seed + n - 1`` with n =
    ``routing.seeds`` (``default`` when unset) for a hashed policy, ``(seed,)`` for one that draws
    nothing from it."""
    if not hashed(routing):
        return (routing.seed,)
    n = default if routing.seeds is None else routing.seeds
    return tuple(range(routing.seed, routing.seed + n))


def describe(routing: Routing, seeds) -> str:
    """How a figure was obtained, for the console and the result files."""
    if not hashed(routing):
        return f"{routing.policy} routing is deterministic: one value"
    seeds, name = list(seeds), {"ecmp": "ECMP", "qp_scaling": "QP-scaling"}[routing.policy]
    if len(seeds) == 1:
        return f"one {name} seed ({seeds[0]}); --seeds N gives the spread"
    consecutive = seeds == list(range(seeds[0], seeds[0] + len(seeds)))
    listed = f"{seeds[0]}-{seeds[-1]}" if consecutive else ", ".join(map(str, seeds))
    return f"mean over {len(seeds)} {name} seeds {listed}"


def statistics(values) -> dict[str, float]:
    """mean, p5, p50, p95, min and max of ``values`` (percentiles interpolated linearly; a lost
    workload's ``inf`` makes every figure from it ``inf``; NaN or no values is an error)."""
    v = np.asarray(values, np.float64).ravel()
    if v.size == 0 or np.isnan(v).any():
        raise ValueError(f"statistics: needs values that are numbers, got {v.size} value(s) "
                         f"with {int(np.isnan(v).sum())} NaN")
    p5, p50, p95 = np.percentile(v, [5, 50, 95]) if np.isfinite(v).all() else (np.inf,) * 3
    return {"mean": float(v.mean()), "p5": float(p5), "p50": float(p50), "p95": float(p95),
            "min": float(v.min()), "max": float(v.max())}


def _map_phases(plan, fn: Callable[[str, RoutedPhase], RoutedPhase]):
    """``plan`` (training or any other plan) with every routed phase replaced by ``fn(name, phase)``
    (the names of ``steptime.plan_phases``)."""
    return map_training_phases(plan, fn) if isinstance(plan, TrainingPlan) else plan.map_phases(fn)


def _with_routes(rp: RoutedPhase, routes, tables: dict | None = None) -> RoutedPhase:
    """``rp`` with other routes for the same sub-flows (and the tables of them the options read:
    ``SeedSet._phase_tables``)."""
    if rp.sub is None or routes is None:
        return rp
    out = dataclasses.replace(rp, sub=dataclasses.replace(rp.sub, routes=routes))
    for name, table in (tables or {}).items():
        out.__dict__[name] = table  # the cached_property's slot: a traced table inside the vmap
    return out


def _plan_with(plan, routes: dict, tables: dict | None = None):
    """``plan`` with the phases named in ``routes`` routed as given (the others as they are)."""
    return _map_phases(plan, lambda n, ph: _with_routes(ph, routes.get(n), None if tables is None else tables.get(n)))


def _stack(blocks: list[np.ndarray]) -> np.ndarray:
    """int32[S, N, H] of the seeds' int[N, H_s] routes, -1 padded to the widest."""
    width = max(b.shape[1] for b in blocks)
    out = np.full((len(blocks), blocks[0].shape[0], width), -1, np.int32)
    for s, b in enumerate(blocks):
        out[s, :, :b.shape[1]] = b
    return out


def _stacked_incidence(routes: np.ndarray, num_links: int) -> Incidence:
    """The incidences of every seed's routes, their tables padded to the widest (padding: F, as built)."""
    with jax.ensure_compile_time_eval():  # first use may be inside a trace: keep the tables concrete
        return _stack_tables([incidence(r, num_links) for r in routes], routes.shape[1], num_links)


def _stack_tables(tables: list[Incidence], F: int, num_links: int) -> Incidence:
    width = max(t.members.shape[1] for t in tables)
    members = np.stack([np.pad(np.asarray(t.members), ((0, 0), (0, width - t.members.shape[1])), constant_values=F)
                        for t in tables])
    return Incidence(jnp.asarray(members), jnp.stack([t.degree for t in tables]), F, num_links)


class SeedSet:
    """A prepared model's routings under several seeds, stacked for one batched evaluation.

    ``fleet(network, options)`` is a pure function of the network (jit, vmap, differentiate it) whose
    results carry a leading seed axis: ``fleet.step_time`` is float[S], ``fleet.steps[job].breakdown``
    holds float[S] values. ``evaluate`` runs it through a compiled program this object holds. With one
    seed, the model's own (``Model.fleet``, ``Model.evaluate``) with a seed axis of 1.
    """

    def __init__(self, model: Model, seeds: Iterable[int]):
        self.model, self.seeds = model, tuple(int(s) for s in seeds)
        if not self.seeds:
            raise ValueError("fabric.routing.seeds: needs at least one seed")
        r = model.scenario.routing
        self._programs: dict[Options, Callable] = {}
        self._tables: dict[tuple, tuple] = {}  # the tables of the seeds' routes, by the kinds the options read
        self.groups, self._alike = model.groups, False
        self._plans = model.all_plans  # in Model.fleet's order
        if self.single:
            return
        if not hashed(r):
            raise ValueError(f"fabric.routing.seeds: {r.policy} routing draws nothing from the seed; it has one "
                             f"value (seeds {list(self.seeds)} asked)")
        routers = {s: model.router if s == r.seed else model.router.reseeded(s) for s in self.seeds}

        def reroute(rp: RoutedPhase) -> np.ndarray | None:
            """int32[S, N, H] routes of every seed; None where every seed routes the phase alike."""
            if rp.sub is None or rp.attached is not None:  # pinned routes (host, storage): no seed changes them
                return None
            blocks, c = [], None
            for s in self.seeds:
                if s == r.seed:
                    blocks.append(np.asarray(rp.sub.routes))
                    continue
                if c is None or c.sampled:  # candidates the seed did not pick serve every seed
                    c = routers[s].candidates(rp.phase.src, rp.phase.dst)
                sub = split(c, r.policy, seed=s, qps=r.qps)
                if sub.parent.shape != rp.sub.parent.shape or not np.array_equal(sub.parent, rp.sub.parent):
                    raise AssertionError("seeds: the sub-flows of a phase differ between seeds")
                blocks.append(sub.routes)
            base = blocks[0]
            if all(b.shape == base.shape and np.array_equal(b, base) for b in blocks[1:]):
                return None  # one path per flow (inside a scale-up domain, say): evaluated once, not per seed
            return _stack(blocks)

        # only what differs between seeds is batched; the rest is evaluated once for all of them
        self._routes = tuple({name: st for name, ph in plan_phases(plan).items()
                              if (st := reroute(ph)) is not None} for plan in self._plans)
        self._transfer_routes = tuple(reroute(rp) for _, rp in model.transfers)
        sc = model.scenario
        self._fixed = None  # every seed's constant load, where it has one (reachability is the same under all)
        if sc.inference or sc.background:
            self._fixed = np.stack([model.fixed_load if s == r.seed else
                                    constant_load(routers[s], sc.inference, sc.background, policy=r.policy, seed=s,
                                                  qps=r.qps, unreachable="report") for s in self.seeds])
        self._alike = not any(self._routes) and all(t is None for t in self._transfer_routes) and self._fixed is None
        # the jobs coupled under any seed; jobs coupled under one seed only share no link under the others,
        # and their sweeps then leave each as it would be alone
        self.groups = model.groups if len(self._plans) < 2 else coupling_groups(
            [_plan_with(p, rs) for p, rs in zip(self._plans, self._routes)], model.network.num_links)

    @property
    def single(self) -> bool:
        """One seed, the model's own: evaluated as the model is."""
        return self.seeds == (self.model.scenario.routing.seed,)

    def __len__(self) -> int:
        return len(self.seeds)

    def _phase_tables(self, options: Options):
        """Per phase, the stacked tables of its seeds' routes that ``options`` read (None: none): the
        incidences the xla engine needs (the host engine reads routes), and the hop pairs a transport
        profile's contention reads."""
        kinds = (() if options.engine.on_host else ("incidence",)) + (
            ("hop_pairs",) if options.transport is not None and options.transport.contention else ())
        if not kinds:
            return None
        if kinds not in self._tables:
            L = self.model.network.num_links

            def tables(r):
                if r is None:
                    return None
                out = {}
                if "incidence" in kinds:
                    out["incidence"] = _stacked_incidence(r, L)
                if "hop_pairs" in kinds:
                    with jax.ensure_compile_time_eval():  # first use may be inside a trace: keep them concrete
                        out["hop_pairs"] = HopPairs(*map(jnp.asarray, stacked_hop_pairs(r)))
                return out

            self._tables[kinds] = (tuple({n: tables(r) for n, r in rs.items()} for rs in self._routes),
                                   tuple(tables(r) for r in self._transfer_routes))
        return self._tables[kinds]

    def _fleet_at(self, routes, transfer_routes, fixed, tables, network: Network, options: Options, logits):
        m = self.model
        job_tables, transfer_tables = tables if tables is not None else ((None,) * len(routes), None)
        plans = [_plan_with(p, rs, ts) for p, rs, ts in zip(self._plans, routes, job_tables)]
        transfers = tuple((name, _with_routes(rp, r, None if transfer_tables is None else transfer_tables[i]))
                          for i, ((name, rp), r) in enumerate(zip(m.transfers, transfer_routes)))
        fixed = m.fixed_load if fixed is None else fixed
        return evaluate_fleet(plans, network, options, fixed_load=fixed, transfers=transfers, info=m.info,
                              logits=logits, groups=self.groups)

    def fleet(self, network: Network | None = None, options: Options | None = None, logits=None) -> FleetResult:
        """Every seed's ``Model.fleet`` at once: each leaf of the result has a leading seed axis."""
        m = self.model
        network = m.network if network is None else network
        options = m.options if options is None else options
        if self.single or self._alike:  # every seed routes every phase alike: one evaluation, S copies
            S = len(self.seeds)
            return jax.tree.map(lambda x: jnp.broadcast_to(x, (S,) + jnp.shape(x)), m.fleet(network, options, logits))
        tables = self._phase_tables(options)
        stacked = jax.tree.map(jnp.asarray, (self._routes, self._transfer_routes, self._fixed))  # canonical arrays
        return jax.vmap(lambda r, t, f, tb: self._fleet_at(r, t, f, tb, network, options, logits))(*stacked, tables)

    def evaluate(self, network: Network | None = None, options: Options | None = None, logits=None) -> FleetResult:
        """``fleet`` through this set's compiled program for ``options`` (compiled on first use)."""
        m = self.model
        if self.single:
            return jax.tree.map(lambda x: np.asarray(x)[None], m.evaluate(network, options, logits))
        network = m.network if network is None else network
        options = m.options if options is None else options
        fixed = m.fixed_load if self._fixed is None else self._fixed.max(axis=0)
        residual_capacity(network.capacity, fixed, m.info)  # names an overfull link
        if options not in self._programs:
            self._programs[options] = Program(lambda net, lg: self.fleet(net, options, lg))
        return self._programs[options](network, logits)

    def objective(self, options: Options | None = None, *, objective: str = "step_time", kv_weight: float = 0.0,
                  search: str = "exact") -> tuple[Callable, Callable, Callable]:
        """``Model.objective`` over the seeds: (search, exact, differentiable exact) functions of
        (network, logits), each the mean over the seeds of ``Model.score``."""
        m = self.model
        options = m.options if options is None else options
        during, exact = options.searched(search), options.exact()

        def mean(fleet):
            return jnp.mean(m.score(fleet, objective, kv_weight))

        return (lambda net, lg: mean(self.fleet(net, during, lg)),
                lambda net, lg: float(mean(self.evaluate(net, exact, lg))),
                lambda net, lg: mean(self.fleet(net, exact, lg)))


def over_seeds(model: Model, seeds: Iterable[int] | None = None) -> SeedSet:
    """``model``'s routings under ``seeds`` (default: ``routing_seeds`` of its scenario), stacked."""
    return SeedSet(model, routing_seeds(model.scenario.routing) if seeds is None else seeds)


def mean_fleet(batch: FleetResult) -> FleetResult:
    """A seed-batched result reduced to one: every figure its mean over the seeds; the coupling's
    iterations and last change their largest, converged only if every seed converged."""
    mean = jax.tree.map(lambda x: np.mean(np.asarray(x, np.float64), axis=0),
                        {kind: getattr(batch, kind) for kind in ("steps", "kv_transfer_s", *KINDS)})
    return FleetResult(iterations=np.max(np.asarray(batch.iterations)), change=np.max(np.asarray(batch.change)),
                       converged=np.all(np.asarray(batch.converged)), **mean)
