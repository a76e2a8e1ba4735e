"""Command line: ``flowmodel run|optimize|sweep CONFIG --out DIR``.

``run`` writes ``DIR/result.json`` with ``step_time_s`` (the slowest training job's step), its
``breakdown`` (seconds), every job's figures and the KV transfer time of every inference service.
``optimize`` writes ``baseline_step_time_s``, ``optimized_step_time_s``, ``parameters`` (name ->
value and unit), ``history`` and ``DIR/loss.png`` and ``DIR/breakdown.png``. ``sweep`` writes
``DIR/sweep.csv``, ``DIR/sweep.json`` and ``DIR/sweep.png``. A bad config exits with
status 2 and one line naming the key; outputs are written atomically.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np


def _setup(scenario):
    from . import fabric, routing

    network, info = fabric.compile_fabric(fabric.build(scenario.fleet))
    r = scenario.routing
    router = routing.Router(info, max_paths=r["max_paths"], site_paths=r["site_paths"], seed=r["seed"])
    return network, info, router


def _floats(d: dict) -> dict:
    return {k: float(v) for k, v in d.items()}


def _table(rows: list[tuple[str, float]], title: str, quiet: bool) -> None:
    if quiet:
        return
    total = sum(v for _, v in rows) or 1.0
    print(f"\n{title}")
    for name, value in rows:
        print(f"  {name:<12} {value:>10.4f} s  {value / total:>6.1%}")


def _fleet_result(scenario, network, info, router) -> dict:
    from . import steptime

    policy = scenario.routing["policy"]
    res = steptime.evaluate_fleet(list(scenario.training), network, info, router, inference=scenario.inference,
                                  background=scenario.background, policy=policy, seed=scenario.routing["seed"],
                                  alpha=scenario.alpha, congestion=scenario.congestion)
    jobs = {name: {"step_time_s": float(r.step_time), "breakdown": _floats(r.breakdown),
                   "by_domain": _floats(r.by_domain),
                   "collectives": {k: {key: (val if isinstance(val, str) else float(val)) for key, val in v.items()}
                                   for k, v in r.collectives.items()}}
            for name, r in res.steps.items()}
    slowest = max(jobs, key=lambda n: jobs[n]["step_time_s"]) if jobs else None
    return {"scenario": scenario.name,
            "step_time_s": jobs[slowest]["step_time_s"] if slowest else None,
            "breakdown": jobs[slowest]["breakdown"] if slowest else {},
            "critical_job": slowest, "jobs": jobs, "kv_transfer_s": res.kv_transfer_s,
            "fixed_point": {"iterations": res.iterations, "converged": res.converged}}


def cmd_run(scenario, out: str, quiet: bool) -> dict:
    from ._io import write_json_atomic

    t0 = time.perf_counter()
    network, info, router = _setup(scenario)
    result = _fleet_result(scenario, network, info, router)
    result["seconds"] = time.perf_counter() - t0
    if not quiet:
        print(f"{scenario.name}: {scenario.fleet.num_gpus} GPUs, {info.num_links} links")
        for name, job in result["jobs"].items():
            _table(list(job["breakdown"].items()), f"{name}: step time {job['step_time_s']:.4f} s", quiet)
        for name, seconds in result["kv_transfer_s"].items():
            print(f"\n{name}: KV transfer of one request {seconds * 1e3:.2f} ms")
    write_json_atomic(os.path.join(out, "result.json"), result)
    return result


def cmd_optimize(scenario, out: str, quiet: bool) -> dict:
    import jax.numpy as jnp
    import optax

    from . import optimize, plots, steptime
    from ._io import write_json_atomic

    if scenario.optimize is None:
        raise SystemExit("config: has no optimize section")
    if not scenario.training:
        raise SystemExit("config: optimize needs at least one training job")
    network, info, router = _setup(scenario)
    policy, seed = scenario.routing["policy"], scenario.routing["seed"]
    plans = [steptime.plan_training(job, info, router, policy=policy, seed=seed) for job in scenario.training]
    fixed = steptime.constant_load(router, scenario.inference, scenario.background, policy=policy, seed=seed)
    background = jnp.asarray(fixed) if fixed.any() else None
    objective, exact = optimize.training_objective(plans, sharpness=scenario.sharpness, background=background,
                                                   alpha=scenario.alpha, congestion=scenario.congestion)
    space = optimize.Space(info, scenario.knobs, scenario.cost)
    o = scenario.optimize
    from tqdm import tqdm

    with tqdm(total=o["steps"] * o["restarts"], desc="optimize", disable=quiet, leave=False) as bar:
        res = optimize.minimize(objective, network, space, exact=exact, budget=o["budget"], steps=o["steps"],
                                optimizer=optax.adam(o["learning_rate"]), restarts=o["restarts"], seed=o["seed"],
                                callback=lambda i, v: (bar.update(1), bar.set_postfix(objective=f"{v:.4g}")))
    rounded = any(k.allowed for k in scenario.knobs)
    if rounded:
        res = optimize.round_to_allowed(res, network, space, exact, budget=o["budget"])
    options = dict(background=background, alpha=scenario.alpha, congestion=scenario.congestion)
    before = steptime.step_time(plans[0], network, **options)
    after = steptime.step_time(plans[0], res.network, **options)
    result = {"scenario": scenario.name, "baseline_step_time_s": res.baseline,
              "optimized_step_time_s": res.optimized, "parameters": res.parameters,
              "baseline_parameters": {k.group: {"value": info.groups[k.group].value, "unit": info.groups[k.group].unit}
                                      for k in scenario.knobs},
              "cost": res.cost, "budget": o["budget"], "history": [float(h) for h in res.history],
              "restarts": res.restarts, "rounded": rounded,
              "baseline_breakdown": _floats(before.breakdown), "optimized_breakdown": _floats(after.breakdown)}
    plots.loss_curve(res.history, os.path.join(out, "loss.png"))
    plots.breakdown_bars({"baseline": result["baseline_breakdown"], "optimized": result["optimized_breakdown"]},
                         os.path.join(out, "breakdown.png"))
    write_json_atomic(os.path.join(out, "result.json"), result)
    if not quiet:
        print(f"{scenario.name}: step time {res.baseline:.4f} s -> {res.optimized:.4f} s "
              f"({res.optimized / res.baseline - 1:+.1%}), cost {res.cost:.6g}"
              + (f" of budget {o['budget']:.6g}" if o["budget"] is not None else ""))
        for name, p in res.parameters.items():
            base = result["baseline_parameters"][name]["value"]
            print(f"  {name:<24} {base:>12.5g} -> {p['value']:>12.5g} {p['unit']}")
    return result


def cmd_sweep(scenario, out: str, quiet: bool) -> dict:
    from . import fabric, plots, steptime, sweep

    if scenario.sweep is None:
        raise SystemExit("config: has no sweep section")
    if not scenario.training:
        raise SystemExit("config: sweep needs at least one training job")
    network, info, router = _setup(scenario)
    plan = steptime.plan_training(scenario.training[0], info, router, policy=scenario.routing["policy"],
                                  seed=scenario.routing["seed"])
    for group in scenario.sweep["grid"]:
        if group not in info.groups:
            raise ValueError(f"sweep.grid.{group}: unknown link group; known: {', '.join(sorted(info.groups))}")

    def evaluate(p):
        res = steptime.step_time(plan, fabric.apply_groups(network, info, p), alpha=scenario.alpha,
                                 congestion=scenario.congestion)
        return {"step_time_s": res.step_time, **{f"{k}_s": v for k, v in res.breakdown.items()}}

    points = sweep.grid(**scenario.sweep["grid"])
    table = sweep.sweep(evaluate, points, chunk=scenario.sweep["chunk"], progress=not quiet)
    csv_path, json_path = sweep.write_table(table, out)
    names = list(scenario.sweep["grid"])
    plots.sweep_lines(table, names, "step_time_s", os.path.join(out, "sweep.png"))
    if not quiet:
        best = int(np.argmin(table["step_time_s"]))
        at = ", ".join(f"{n} = {table[n][best]:.5g}" for n in names)
        print(f"{scenario.name}: {len(table['step_time_s'])} points; best step time "
              f"{table['step_time_s'][best]:.4f} s at {at}")
        print(f"wrote {csv_path}, {json_path}")
    return table


def main(argv: list[str] | None = None) -> int:
    from .config import ConfigError, load

    ap = argparse.ArgumentParser(prog="flowmodel", description="Flow-level model of AI fleet networks.")
    sub = ap.add_subparsers(dest="command", required=True)
    for name, text in (("run", "step time of every workload in a scenario"),
                       ("optimize", "minimise step time over the scenario's knobs under its budget"),
                       ("sweep", "step time over the scenario's sweep grid (vmapped, sharded over devices)")):
        p = sub.add_parser(name, help=text)
        p.add_argument("config")
        p.add_argument("--out", default=None, help="output folder (default out/<config name>)")
        p.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    out = args.out or os.path.join("out", os.path.splitext(os.path.basename(args.config))[0])
    import jax

    jax.config.update("jax_enable_x64", True)
    try:
        scenario = load(args.config)
        {"run": cmd_run, "optimize": cmd_optimize, "sweep": cmd_sweep}[args.command](scenario, out, args.quiet)
    except (ConfigError, ValueError) as e:
        print(f"flowmodel: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    if not args.quiet and args.command != "sweep":
        print(f"\nwrote {os.path.join(out, 'result.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
