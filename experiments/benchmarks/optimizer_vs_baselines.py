"""flowmodel's optimizer against the optimizers users would pick, on the same exact step time.

    pip install -e ".[bench]"   # optuna and cma
    PYTHONPATH=. python3 experiments/benchmarks/optimizer_vs_baselines.py [--evaluations 300] [--json FILE]

Scenarios: the shipped configs with an ``optimize`` section (quickstart: two spine ratios from
allowed values and a long-haul link; gw_regional_ring: four long-haul segments) and ``nine-knob``:
gw_regional_ring with every segment, the hall's spine tier and every site's leaf tier free, each
tier priced, the budget at the fabric's own cost (re-allocate, not buy more).

Every method minimises the same function: the scenario's exact step time over knob positions in
[0, 1]^K under the linear budget. flowmodel: ``minimize`` on the smooth step time (the config's
steps) then ``finish`` (roundings, compass refinement on the exact model). SciPy SLSQP: bounds, the
budget as a linear constraint, exact gradients (``jax.grad`` of the exact step time). Optuna (TPE),
CMA-ES (``cma``) and random search: black boxes; a point over budget is projected onto it before it
is evaluated, and discrete knobs go to their nearest allowed value (categorical for Optuna), so every
evaluated point is buildable. SLSQP searches the continuous relaxation (its relaxed evaluations are
counted but are not results); its end point is rounded, projected and evaluated. Evaluations count exact
forward evaluations; a gradient counts as its measured cost in forward evaluations (median time of
a gradient / median time of a forward evaluation, measured here). "to best" is the evaluation at
which a method first came within 0.1% of its own final best. Wall time includes compilation.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, os.path.dirname(__file__))
from common import median_time, print_table, write_json  # noqa: E402

from flowmodel import config, optimize  # noqa: E402
from flowmodel import scenario as sc  # noqa: E402

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "configs")


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


class Problem:
    """The exact step time of positions z, with a count and the best-so-far trace."""

    def __init__(self, model: sc.Model):
        self.model = model
        o = model.scenario.optimize
        self.space = optimize.Space(model.info, o.knobs, o.cost)
        self.budget = o.budget
        self.a, self.b = self.space.cost_line()
        self.slack = np.inf if o.budget is None else o.budget - self.a
        _, exact = model.objective()
        self.exact = exact
        options = model.options.exact()
        self._forward = jax.jit(lambda z: model.step_time(self.space.network(model.network, z), options))
        self._grad = jax.jit(jax.value_and_grad(lambda z: model.step_time(self.space.network(model.network, z),
                                                                            options)))
        self.z0 = self.space.positions({k.group: model.info.groups[k.group].value for k in o.knobs})
        self.reset()

    def reset(self):
        self.evaluations, self.trace = 0.0, []

    def project(self, z):
        return np.asarray(optimize.project_budget(jnp.asarray(np.clip(z, 0, 1)), jnp.asarray(self.b),
                                                  min(self.slack, 1e300)))

    def f(self, z, cost: float = 1.0) -> float:
        """The exact step time at ``z`` made feasible: discrete knobs at their nearest allowed values,
        then projected onto the budget (every evaluated point is one a planner could build)."""
        z = self.rounded(z)
        value = 1e3 if z is None else float(self._forward(jnp.asarray(z)))  # over budget: a penalty
        self.evaluations += cost
        self.trace.append((self.evaluations, value))
        return value

    def rounded(self, z) -> np.ndarray | None:
        """z with every discrete knob at its nearest allowed value and the continuous knobs projected
        onto the budget left; None when the discrete knobs alone are over budget."""
        z = np.clip(np.asarray(z, float), 0, 1)
        discrete = [i for i, k in enumerate(self.space.knobs) if k.allowed]
        values = self.space.values(z)
        for i in discrete:
            k = self.space.knobs[i]
            values[k.group] = min(k.allowed, key=lambda v: abs(self.space.positions({**values, k.group: v})[i] - z[i]))
        z = self.space.positions(values)
        rest = [i for i in range(len(z)) if i not in discrete]
        left = self.slack - float(self.b[discrete] @ z[discrete])
        if left < 0:
            return None
        if rest:
            z[rest] = np.asarray(optimize.project_budget(jnp.asarray(z[rest]), jnp.asarray(self.b[rest]),
                                                         min(left, 1e300)))
        return z

    def to_best(self) -> float:
        best = min(v for _, v in self.trace)
        return next(e for e, v in self.trace if v <= best * (1 + 1e-3))


def run_flowmodel(p: Problem, grad_cost: float, exact_grad_cost: float) -> dict:
    o = p.model.scenario.optimize
    objective, exact = p.model.objective()
    res = optimize.minimize(objective, p.model.network, p.space, exact=exact, budget=o.budget, steps=o.steps,
                            optimizer=optax.adam(o.learning_rate), restarts=o.restarts, seed=o.seed)
    options = p.model.options.exact()
    done = optimize.finish(res, p.model.network, p.space, exact, budget=o.budget,
                           gradient=lambda net, lg: p.model.step_time(net, options, lg))
    evaluations = o.steps * o.restarts * grad_cost + o.restarts + done.evaluations + done.gradients * exact_grad_cost
    return {"best": done.result.optimized, "evaluations": evaluations, "to_best": evaluations,
            "check": "passed" if done.check.passed else "failed"}


def run_slsqp(p: Problem, grad_cost: float, evaluations: int) -> dict:
    from scipy.optimize import minimize as sp_minimize

    def relaxed(z):  # SLSQP needs the continuous relaxation; its end point is rounded and evaluated below
        p.evaluations += 1
        return float(p._forward(jnp.asarray(np.clip(z, 0, 1))))

    def jac(z):
        p.evaluations += grad_cost
        return np.asarray(p._grad(jnp.asarray(np.clip(z, 0, 1)))[1])

    constraints = [] if not np.isfinite(p.slack) else [
        {"type": "ineq", "fun": lambda z: p.slack - p.b @ z, "jac": lambda z: -p.b}]
    out = sp_minimize(relaxed, p.z0, jac=jac, method="SLSQP", bounds=[(0, 1)] * len(p.z0), constraints=constraints,
                      options={"maxiter": evaluations, "ftol": 1e-12})
    p.f(out.x)
    return {"best": min(v for _, v in p.trace), "evaluations": p.evaluations, "to_best": p.to_best()}


def run_optuna(p: Problem, evaluations: int, seed: int) -> dict:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    knobs = p.space.knobs

    def trial_value(trial):
        z = np.empty(len(knobs))
        values = p.space.values(p.z0)
        for i, k in enumerate(knobs):
            if k.allowed:
                values[k.group] = trial.suggest_categorical(k.group, list(k.allowed))
                z[i] = p.space.positions(values)[i]
            else:
                z[i] = trial.suggest_float(k.group, 0.0, 1.0)
        return p.f(z)

    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    study.enqueue_trial({k.group: (p.space.values(p.z0)[k.group] if k.allowed else float(p.z0[i]))
                         for i, k in enumerate(knobs)})
    study.optimize(trial_value, n_trials=evaluations)
    return {"best": min(v for _, v in p.trace), "evaluations": p.evaluations, "to_best": p.to_best()}


def run_cma(p: Problem, evaluations: int, seed: int) -> dict:
    import cma

    es = cma.CMAEvolutionStrategy(p.z0, 0.3, {"bounds": [0, 1], "maxfevals": evaluations, "seed": seed + 1,
                                              "verbose": -9})
    while not es.stop():
        xs = es.ask()
        es.tell(xs, [p.f(x) for x in xs])
    return {"best": min(v for _, v in p.trace), "evaluations": p.evaluations, "to_best": p.to_best()}


def run_random(p: Problem, evaluations: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    for _ in range(evaluations):
        p.f(rng.uniform(0, 1, len(p.z0)))
    return {"best": min(v for _, v in p.trace), "evaluations": p.evaluations, "to_best": p.to_best()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evaluations", type=int, default=300, help="evaluations for each black-box baseline")
    ap.add_argument("--scenarios", default="quickstart,gw_regional_ring,nine-knob")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    rows = []
    for name in args.scenarios.split(","):
        scenario = nine_knobs() if name == "nine-knob" else config.load(os.path.join(CONFIGS, f"{name}.yaml"))
        model = sc.prepare(scenario)
        p = Problem(model)
        z = jnp.asarray(p.z0)
        _, forward = median_time(lambda: p._forward(z), 20)
        _, gradient = median_time(lambda: p._grad(z), 20)
        objective, _ = model.objective()
        smooth = jax.jit(jax.value_and_grad(lambda z: objective(p.space.network(model.network, z), {})))
        _, smooth_gradient = median_time(lambda: smooth(z), 20)
        baseline = p.f(p.z0)
        print(f"\n{name}: {len(p.z0)} knobs, baseline {baseline:.4f} s; forward {forward * 1e3:.2f} ms, exact gradient "
              f"{gradient / forward:.1f} forwards, smooth gradient {smooth_gradient / forward:.1f} forwards")
        methods = [("flowmodel", lambda: run_flowmodel(p, smooth_gradient / forward, gradient / forward)),
                   ("SLSQP", lambda: run_slsqp(p, gradient / forward, args.evaluations)),
                   ("Optuna TPE", lambda: run_optuna(p, args.evaluations, args.seed)),
                   ("CMA-ES", lambda: run_cma(p, args.evaluations, args.seed)),
                   ("random", lambda: run_random(p, args.evaluations, args.seed))]
        results = {}
        for method, run in methods:
            p.reset()
            t0 = time.perf_counter()
            row = run()
            row.update(scenario=name, method=method, wall_s=time.perf_counter() - t0, baseline=baseline)
            results[method] = row
            rows.append(row)
        box = min((r for m, r in results.items() if m in ("Optuna TPE", "CMA-ES", "random")), key=lambda r: r["best"])
        ours = results["flowmodel"]
        for row in results.values():
            row["vs_flowmodel"] = row["best"] / ours["best"] - 1
        ours["evals_vs_best_blackbox"] = ours["to_best"] / box["to_best"]
        print_table(list(results.values()), [("method", "method", ""), ("best s", "best", ".5f"),
                                             ("vs ours", "vs_flowmodel", ".2%"), ("evals", "evaluations", ".0f"),
                                             ("to best", "to_best", ".0f"), ("wall s", "wall_s", ".1f")])
        print(f"flowmodel <= every baseline: {all(ours['best'] <= r['best'] * (1 + 1e-9) for r in results.values())}; "
              f"its evaluations / best black-box's ({box['method']}) to its best: {ours['evals_vs_best_blackbox']:.2f}")
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
