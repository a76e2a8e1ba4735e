"""flowmodel's optimizer against the optimizers users would pick: the same exact objective, at 1x and 5x its time.

    pip install -e ".[bench]"   # optuna and cma
    PYTHONPATH=. python experiments/benchmarks/optimizer_vs_baselines.py [--json FILE]   # the shipped scenarios
    PYTHONPATH=. python experiments/benchmarks/optimizer_vs_baselines.py --scenarios region_plan,uniform:1,uniform:2 \\
        --seeds 0,1,2 --json out/planning_baselines.json                                  # the planning regions

Scenarios (``--scenarios``, comma-separated; default quickstart,gw_regional_ring,nine-knob):

- ``<name>``: ``configs/<name>.yaml``, which needs an ``optimize`` section. quickstart: two spine ratios
  from allowed values and a long-haul link; gw_regional_ring: four long-haul segments; region_plan: the
  planning config (11 heterogeneous sites, 69 knobs, the GPU-weighted mean step time, as-built budget).
- ``nine-knob``: gw_regional_ring with every segment, the hall's spine tier and every site's leaf tier
  free, each tier priced, the budget at the fabric's own cost (re-allocate, not buy more).
- ``uniform:<seed>``: the ``uniform`` recipe of ``experiments/region_plan.py`` (12 sites at random points
  in a 1,500 km square, full-mesh long haul, 2-tier 2:1 sites of 64 GPUs, four TP8 x DP24 tree all-reduce
  jobs on site triples; knobs: every segment and every leaf tier, 78; budget: as built), the document
  ``region_plan.uniform(seed)`` parsed with ``flowmodel.config.parse`` (as experiments/benchmarks/planning.py).

Every method minimises the same function: the scenario's own ``optimize.objective`` on the exact model
(step_time or throughput: ``model.score(model.fleet(net, exact options), objective, kv_weight)``; the
``differentiable`` function of ``flowmodel.objectives.planning_objective``, over the searched routing
seeds as ``flowmodel optimize`` does) over knob positions in [0, 1]^K under the linear budget.

- flowmodel: what ``flowmodel optimize`` runs (``cli.cmd_optimize``): ``planning_objective`` with the
  config's objective, kv_weight and search rates (smooth or exact), ``minimize`` (Adam, the config's steps,
  learning rate, restarts and seed), then ``finish`` (roundings, SLSQP polish on the exact gradient,
  compass refinement and its optimality check). Deterministic: run once per scenario, first, cold (its wall
  time includes compiling its search and its exact program). Its value is ``finish``'s exact value.
- SciPy SLSQP on exact gradients (``jax.grad`` of the exact objective): bounds, the budget as a linear
  constraint, from the as-built point; it searches the continuous relaxation (its relaxed evaluations and
  gradients are counted but are not results). After every iteration its point is made buildable (below) and
  evaluated: its best-so-far trace. Deterministic: run once; ``maxiter`` unbounded, stopped when out of time.
- Optuna TPE, CMA-ES (``cma``) and random search: black boxes, one run per seed in ``--seeds``.

Every point a method reports is made buildable before it is evaluated: discrete knobs at their nearest
allowed value (categorical for Optuna), then the continuous knobs projected onto the budget left.

Time: flowmodel's wall time T is measured; every other method runs until its wall time reaches
``--time-factor`` x T (default 5; the clock is checked between evaluations, or ``--evaluations`` caps it
first). The result at 5x is the best value of its best-so-far trace (wall time, evaluations, value per
evaluation) within 5T; the result at equal time is read off the same run's trace at T. The black boxes'
exact forward function is compiled before their clocks start (it is shared), which favours them.

Fixed settings (printed in the header and written to the JSON): the time factor; the as-built point is
the first trial of every black box (Optuna: ``enqueue_trial``; CMA-ES: its mean and first evaluation;
random: the first evaluation); CMA-ES sigma0 = 0.2 (no restarts: it ends early when it meets its own
stopping criteria); seeds 0, 1, 2; the budget and the number of knobs.

Evaluations count exact forward evaluations; a gradient counts as its measured cost in forward
evaluations (median time of a gradient / median time of a forward evaluation, measured here). Per scenario
a table (method, seed, best exact value at 5x, best at equal time, evaluations, wall time, vs flowmodel at
both) and a summary: does flowmodel beat every black-box run by >= 1% at equal time and at 5x time, and
tie (within 0.1%) or beat SLSQP. ``--json``: the settings, and per scenario its figures, every run with its
best-so-far trace, and the summary.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

import cma
import jax
import jax.numpy as jnp
import numpy as np
import optax
import optuna

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, os.path.dirname(__file__))
from common import median_time, print_table, write_json  # noqa: E402

from flowmodel import config, optimize  # noqa: E402
from flowmodel import scenario as sc  # noqa: E402
from flowmodel.objectives import planning_objective  # noqa: E402
from flowmodel.seeds import routing_seeds  # noqa: E402

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "configs")
SIGMA0 = 0.2  # CMA-ES's initial step size, in positions ([0, 1] per knob)
BEAT = 0.01  # flowmodel beats a black box when the black box's best is at least 1% worse
TIE = 1e-3  # flowmodel ties SLSQP within 0.1%
BLACK_BOXES = ("Optuna TPE", "CMA-ES", "random")


def nine_knobs() -> sc.Scenario:
    ring = config.load(os.path.join(CONFIGS, "gw_regional_ring.yaml"))
    model = sc.prepare(ring)
    leaf = [g for g in sorted(model.info.groups) if g.endswith("/leaf_up")]
    knobs = list(ring.optimize.knobs) + [optimize.Knob("hall/spine_up", 1.0, 8.0)] + \
        [optimize.Knob(g, 1.0, 4.0) for g in leaf]
    cost = optimize.CostModel(per_gbps={"leaf_spine": 1.0, "spine_aggregation": 1.0}, per_gbps_km=0.01)
    space = optimize.Space(model.info, tuple(knobs), cost)
    budget = space.cost_at({k.group: model.info.groups[k.group].value for k in knobs})
    search = sc.Search(knobs=tuple(knobs), cost=cost, budget=budget, steps=ring.optimize.steps,
                       learning_rate=ring.optimize.learning_rate)
    return sc.Scenario("nine-knob", ring.fleet, routing=ring.routing, training=ring.training, options=ring.options,
                       optimize=search)


def load(name: str) -> sc.Scenario:
    """The scenario called ``name``: nine-knob, uniform:<seed> (experiments/region_plan.py's recipe, loaded
    as experiments/benchmarks/planning.py does) or configs/<name>.yaml."""
    if name == "nine-knob":
        return nine_knobs()
    if name.startswith("uniform:"):
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
        import region_plan

        return config.parse(region_plan.uniform(int(name.split(":")[1])))
    return config.load(os.path.join(CONFIGS, f"{name}.yaml"))


def search_seeds(scenario: sc.Scenario) -> tuple[int, ...]:
    """The routing seeds ``flowmodel optimize`` searches on (``cli.cmd_optimize``)."""
    if scenario.optimize.objective in ("step_time", "throughput"):
        return routing_seeds(scenario.routing, default=1)
    return (scenario.routing.seed,)


class OutOfTime(Exception):
    """Raised inside SLSQP's functions when its time (or evaluation cap) is spent."""


class Problem:
    """The scenario's exact objective at positions z, with the evaluations, the clock and the trace."""

    def __init__(self, model: sc.Model):
        self.model = model
        o = model.scenario.optimize
        if o.routing != "none":
            raise ValueError(f"{model.scenario.name}: optimize.routing {o.routing!r}: the baselines search knobs only")
        self.space = optimize.Space(model.info, o.knobs, o.cost)
        self.budget = o.budget
        self.a, self.b = self.space.cost_line()
        self.slack = np.inf if o.budget is None else o.budget - self.a
        self.seeds = search_seeds(model.scenario)
        # the exact objective as a differentiable function (for step_time and throughput on one seed:
        # model.score(model.fleet(net, exact options), objective, kv_weight))
        exact = planning_objective(model, o.objective, kv_weight=o.kv_weight, search=o.search,
                                   seeds=self.seeds).differentiable
        value = lambda z: exact(self.space.network(model.network, z), {})
        self._forward = jax.jit(value)
        self._grad = jax.jit(jax.value_and_grad(value))
        self._project = jax.jit(optimize.project_budget)  # eager, it would trace its loop on every call
        built = {k.group: model.info.groups[k.group].value for k in o.knobs}
        self.z0 = self.space.positions(built)
        self.discrete = [i for i, k in enumerate(o.knobs) if k.allowed]
        self.position = {i: {v: float(self.space.positions({**built, o.knobs[i].group: v})[i])
                             for v in o.knobs[i].allowed} for i in self.discrete}  # allowed value -> position
        self.reset()

    def reset(self, limit: float = np.inf, cap: float | None = None):
        """Start a method's run: no evaluations, an empty trace, its clock at zero, ``limit`` seconds."""
        self.evaluations, self.trace = 0.0, []
        self.t0, self.limit, self.cap = time.perf_counter(), limit, cap

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def done(self) -> bool:
        """Out of time, or at the evaluation cap: checked between evaluations."""
        return self.elapsed() >= self.limit or (self.cap is not None and self.evaluations >= self.cap)

    def f(self, z, cost: float = 1.0) -> float:
        """The exact objective at ``z`` made feasible: discrete knobs at their nearest allowed values,
        then projected onto the budget (every evaluated point is one a planner could build)."""
        z = self.rounded(z)
        value = 1e3 if z is None else float(self._forward(jnp.asarray(z)))  # over budget: a penalty
        self.evaluations += cost
        self.trace.append((self.elapsed(), self.evaluations, value))
        return value

    def rounded(self, z) -> np.ndarray | None:
        """z with every discrete knob at its nearest allowed value and the continuous knobs projected
        onto the budget left; None when the discrete knobs alone are over budget."""
        z = np.clip(np.asarray(z, float), 0, 1)
        for i in self.discrete:
            z[i] = min(self.position[i].values(), key=lambda p: abs(p - z[i]))
        rest = [i for i in range(len(z)) if i not in self.discrete]
        left = self.slack - float(self.b[self.discrete] @ z[self.discrete])
        if left < 0:
            return None
        if rest:
            z[rest] = np.asarray(self._project(jnp.asarray(z[rest]), jnp.asarray(self.b[rest]), min(left, 1e300)))
        return z

    def best(self, seconds: float = np.inf) -> tuple[float, float]:
        """(best value, evaluations so far) of the best-so-far trace at ``seconds`` into the run."""
        within = [(v, e) for t, e, v in self.trace if t <= seconds]
        if not within:
            return float("nan"), 0.0
        return min(v for v, _ in within), within[-1][1]

    def best_so_far(self) -> list[tuple[float, float, float]]:
        """The trace where the best value improves, and its last entry: (wall s, evaluations, best)."""
        out, best = [], np.inf
        for t, e, v in self.trace:
            if v < best:
                best = v
                out.append((t, e, v))
        if self.trace and out[-1][:2] != self.trace[-1][:2]:
            out.append((*self.trace[-1][:2], best))
        return out


def run_flowmodel(p: Problem) -> dict:
    """``flowmodel optimize``'s search on the scenario (``cli.cmd_optimize``), without its report."""
    o = p.model.scenario.optimize
    objective, exact, gradient = planning_objective(p.model, o.objective, kv_weight=o.kv_weight, search=o.search,
                                                    seeds=p.seeds)
    res = optimize.minimize(objective, p.model.network, p.space, exact=exact, budget=o.budget, steps=o.steps,
                            optimizer=optax.adam(o.learning_rate), restarts=o.restarts, seed=o.seed)
    done = optimize.finish(res, p.model.network, p.space, exact, budget=o.budget, gradient=gradient)
    return {"best": done.result.optimized, "z": p.space.positions({g: v["value"] for g, v in
                                                                    done.result.parameters.items()}),
            "searched": res.optimized, "finish_evaluations": done.evaluations, "finish_gradients": done.gradients,
            "check": "passed" if done.check.passed else "failed"}


def run_slsqp(p: Problem, grad_cost: float) -> dict:
    from scipy.optimize import minimize as sp_minimize

    def out_of_time():
        if p.done():
            raise OutOfTime

    def relaxed(z):  # SLSQP needs the continuous relaxation; its iterates are made buildable in `iterate`
        out_of_time()
        p.evaluations += 1
        return float(p._forward(jnp.asarray(np.clip(z, 0, 1))))

    def jac(z):
        out_of_time()
        p.evaluations += grad_cost
        return np.asarray(p._grad(jnp.asarray(np.clip(z, 0, 1)))[1])

    def iterate(z):  # after every iteration: its point, rounded and projected, evaluated exactly
        p.f(z)
        out_of_time()

    constraints = [] if not np.isfinite(p.slack) else [
        {"type": "ineq", "fun": lambda z: p.slack - p.b @ z, "jac": lambda z: -p.b}]
    p.f(p.z0)
    try:
        out = sp_minimize(relaxed, p.z0, jac=jac, method="SLSQP", bounds=[(0, 1)] * len(p.z0), constraints=constraints,
                          callback=iterate, options={"maxiter": 10**9, "ftol": 1e-12})
        p.f(out.x)
        stop = out.message
    except OutOfTime:
        stop = "out of time"
    return {"stop": stop}


def run_optuna(p: Problem, seed: int) -> dict:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    knobs = p.space.knobs

    def trial_value(trial):
        z = np.array([p.position[i][trial.suggest_categorical(k.group, list(k.allowed))] if k.allowed
                      else trial.suggest_float(k.group, 0.0, 1.0) for i, k in enumerate(knobs)])
        return p.f(z)

    def stop(study, _trial):
        if p.done():
            study.stop()

    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    as_built = p.rounded(p.z0)
    study.enqueue_trial({k.group: (min(k.allowed, key=lambda v: abs(p.position[i][v] - as_built[i])) if k.allowed
                                   else float(as_built[i])) for i, k in enumerate(knobs)})
    study.optimize(trial_value, callbacks=[stop])
    return {}


def run_cma(p: Problem, seed: int) -> dict:
    es = cma.CMAEvolutionStrategy(p.z0, SIGMA0, {"bounds": [0, 1], "seed": seed + 1, "verbose": -9})
    p.f(p.z0)
    while not es.stop() and not p.done():
        xs = es.ask()
        values = [p.f(x) for x in itertools.takewhile(lambda _: not p.done(), xs)]
        if len(values) == len(xs):
            es.tell(xs, values)
    return {"stop": ", ".join(es.stop()) or "out of time (or at the cap)"}


def run_random(p: Problem, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    p.f(p.z0)
    while not p.done():
        p.f(rng.uniform(0, 1, len(p.z0)))
    return {}


def run_scenario(name: str, args, seeds: list[int]) -> dict:
    scenario = load(name)
    o = scenario.optimize
    model = sc.prepare(scenario)
    p = Problem(model)
    print(f"\n{name}: {len(o.knobs)} knobs, objective {o.objective} ({o.search} search, kv_weight {o.kv_weight:g}), "
          f"budget {o.budget if o.budget is None else format(o.budget, '.6g')}, routing seeds {list(p.seeds)}; "
          f"time factor {args.time_factor:g}, CMA-ES sigma0 {SIGMA0}, seeds {seeds}, evaluations cap "
          f"{args.evaluations}", flush=True)

    p.reset()  # flowmodel first and cold: its wall time sets every other method's
    t0 = time.perf_counter()
    ours = run_flowmodel(p)
    wall = time.perf_counter() - t0
    recheck = float(p._forward(jnp.asarray(ours.pop("z"))))  # its point on the black boxes' function

    z = jnp.asarray(p.z0)
    _, forward = median_time(lambda: p._forward(z), args.repeat)
    _, gradient = median_time(lambda: p._grad(z), args.repeat)
    search = planning_objective(model, o.objective, kv_weight=o.kv_weight, search=o.search, seeds=p.seeds).search
    searched = jax.jit(jax.value_and_grad(lambda z: search(p.space.network(model.network, z), {})))
    _, search_gradient = median_time(lambda: searched(z), args.repeat)
    grad_cost, search_cost = gradient / forward, search_gradient / forward
    p.reset()
    baseline = p.f(p.z0)
    ours.update(method="flowmodel", seed=None, best_equal_time=ours["best"], wall_s=wall, recheck=recheck,
                evaluations=o.steps * o.restarts * search_cost + 1 + o.restarts + ours["finish_evaluations"]
                + ours["finish_gradients"] * grad_cost)
    print(f"as built {baseline:.5f} s; flowmodel {ours['best']:.5f} s in {wall:.1f} s (check {ours['check']}; "
          f"on the baselines' function {recheck:.5f} s); forward {forward * 1e3:.2f} ms, exact gradient "
          f"{grad_cost:.1f} forwards, {o.search} search gradient {search_cost:.1f} forwards", flush=True)

    runs = [("SLSQP", None, lambda seed: run_slsqp(p, grad_cost))]
    runs += [(m, seed, run) for m, run in (("Optuna TPE", lambda seed: run_optuna(p, seed)),
                                           ("CMA-ES", lambda seed: run_cma(p, seed)),
                                           ("random", lambda seed: run_random(p, seed))) for seed in seeds]
    rows = [ours]
    for method, seed, run in runs:
        p.reset(limit=args.time_factor * wall, cap=args.evaluations)
        row = run(seed)
        best, evaluations = p.best(args.time_factor * wall)
        row.update(method=method, seed=seed, best=best, evaluations=evaluations, wall_s=p.elapsed(),
                   best_equal_time=p.best(wall)[0], evaluations_equal_time=p.best(wall)[1],
                   trace=p.best_so_far())
        rows.append(row)
        print(f"  {method} seed {seed}: {best:.5f} s at {args.time_factor:g}x, {row['best_equal_time']:.5f} s at 1x, "
              f"{evaluations:.0f} evaluations, {row['wall_s']:.1f} s", flush=True)
    for row in rows:
        row.update(scenario=name, baseline=baseline, vs_flowmodel=row["best"] / ours["best"] - 1,
                   vs_flowmodel_equal_time=row["best_equal_time"] / ours["best"] - 1)
    table = [{**r, "seed": "" if r["seed"] is None else str(r["seed"])} for r in rows]
    print_table(table, [("method", "method", ""), ("seed", "seed", ""), (f"best {args.time_factor:g}x", "best", ".5f"),
                        ("best 1x", "best_equal_time", ".5f"), ("evals", "evaluations", ".0f"),
                        ("wall s", "wall_s", ".1f"), (f"vs ours {args.time_factor:g}x", "vs_flowmodel", ".2%"),
                        ("vs ours 1x", "vs_flowmodel_equal_time", ".2%")])
    boxes = [r for r in rows if r["method"] in BLACK_BOXES]
    slsqp = next(r for r in rows if r["method"] == "SLSQP")
    summary = {"beats_black_boxes_equal_time": all(r["vs_flowmodel_equal_time"] >= BEAT for r in boxes),
               "beats_black_boxes": all(r["vs_flowmodel"] >= BEAT for r in boxes),
               "ties_or_beats_slsqp": bool(ours["best"] <= slsqp["best"] * (1 + TIE)),
               "closest_black_box_equal_time": min((r["vs_flowmodel_equal_time"] for r in boxes), default=np.nan),
               "closest_black_box": min((r["vs_flowmodel"] for r in boxes), default=np.nan),
               "slsqp_vs_flowmodel": slsqp["vs_flowmodel"]}
    print(f"flowmodel beats every black box by >= {BEAT:.0%}: at equal time {summary['beats_black_boxes_equal_time']} "
          f"(closest {summary['closest_black_box_equal_time']:+.2%}), at {args.time_factor:g}x time "
          f"{summary['beats_black_boxes']} (closest {summary['closest_black_box']:+.2%}); ties (within {TIE:.1%}) or "
          f"beats SLSQP: {summary['ties_or_beats_slsqp']} (SLSQP {summary['slsqp_vs_flowmodel']:+.2%})", flush=True)
    for row in rows:
        row.pop("scenario")
    return {"scenario": name, "knobs": len(o.knobs), "budget": o.budget, "objective": o.objective,
            "search": o.search, "kv_weight": o.kv_weight, "routing_seeds": list(p.seeds), "as_built": baseline,
            "flowmodel_wall_s": wall, "forward_s": forward, "exact_gradient_forwards": grad_cost,
            "search_gradient_forwards": search_cost, "runs": rows, "summary": summary}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="quickstart,gw_regional_ring,nine-knob",
                    help="comma-separated: configs/<name>.yaml, nine-knob, uniform:<seed>")
    ap.add_argument("--time-factor", type=float, default=5.0,
                    help="every other method runs for this multiple of flowmodel's wall time")
    ap.add_argument("--seeds", default="0,1,2", help="seeds of the stochastic methods (Optuna TPE, CMA-ES, random)")
    ap.add_argument("--evaluations", type=float, default=None, help="optional cap on each other method's evaluations")
    ap.add_argument("--repeat", type=int, default=10, help="warm calls timed for the cost of a gradient")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    settings = {"time_factor": args.time_factor, "cma_sigma0": SIGMA0, "seeds": seeds,
                "evaluations_cap": args.evaluations, "first_trial": "as built", "budget_projection": True,
                "beat": BEAT, "tie": TIE}
    print(f"settings: time factor {args.time_factor:g} x flowmodel's wall time, CMA-ES sigma0 {SIGMA0}, seeds {seeds}, "
          f"as-built point first, every point projected onto the budget, evaluations cap {args.evaluations}")
    results = [run_scenario(name, args, seeds) for name in args.scenarios.split(",")]
    write_json(args.json, {"settings": settings, "scenarios": results})


if __name__ == "__main__":
    main()
