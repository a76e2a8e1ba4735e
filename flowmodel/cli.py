"""Command line: ``flowmodel run|optimize|sweep|failures CONFIG --out DIR``.

Every command prepares the scenario once (``scenario.prepare``) and evaluates it through the same
function (``Model.fleet``): ``run`` at the scenario's own network, ``optimize`` over its knobs,
``sweep`` over its grid, ``failures`` on each failed fabric.


``run`` writes ``DIR/result.json`` with ``step_time_s`` (the slowest training job's step), its
``breakdown`` (seconds), every job's figures and the KV transfer time of every inference service;
with a ``reliability`` section also ``time_to_train_days``, ``effective_training_time``,
``interruptions_per_day``, ``checkpoint_interval_s`` and the rest of ``reliability.report``.
``optimize`` writes ``baseline_step_time_s``, ``optimized_step_time_s``, ``parameters`` (name ->
value and unit), ``history`` and ``DIR/loss.png`` and ``DIR/breakdown.png``. ``sweep`` writes
``DIR/sweep.csv``, ``DIR/sweep.json`` and ``DIR/sweep.png``. ``failures`` writes every job's healthy,
per-failure, expected, p99 and worst step time and the failures that disconnect it. A bad config exits with
status 2 and one line naming the key; outputs are written atomically.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np


def _floats(d: dict) -> dict:
    return {k: float(v) for k, v in d.items()}


def _table(rows: list[tuple[str, float]], title: str, quiet: bool) -> None:
    if quiet:
        return
    total = sum(v for _, v in rows) or 1.0
    print(f"\n{title}")
    for name, value in rows:
        print(f"  {name:<12} {value:>10.4f} s  {value / total:>6.1%}")


def fleet_result(model, fleet) -> dict:
    """result.json's figures of an evaluated fleet."""
    domains = {plan.job.name: plan.domains for plan in model.plans}
    jobs = {name: {"step_time_s": float(r.step_time), "breakdown": _floats(r.breakdown),
                   "by_domain": _floats(r.by_domain),
                   "collectives": {k: {**_floats(v), "domain": domains[name][k]} for k, v in r.collectives.items()}}
            for name, r in fleet.steps.items()}
    slowest = fleet.critical()
    return {"scenario": model.scenario.name,
            "step_time_s": jobs[slowest]["step_time_s"] if slowest else None,
            "breakdown": jobs[slowest]["breakdown"] if slowest else {},
            "critical_job": slowest, "jobs": jobs, "kv_transfer_s": _floats(fleet.kv_transfer_s),
            "fixed_point": {"iterations": fleet.iterations, "converged": bool(fleet.converged),
                            "last_change": float(fleet.change)}}


def _needs(scenario, section: str):
    """The scenario, if it has the section a command works on and a training job to evaluate."""
    if getattr(scenario, section) is None:
        raise ValueError(f"{section}: the config has no {section} section")
    if not scenario.training:
        raise ValueError(f"workloads.training: {section} needs at least one training job")
    return scenario


def _prepare(scenario, quiet: bool):
    from .scenario import prepare

    model = prepare(scenario, progress=None if quiet else lambda stage: print(f"[{stage}]", flush=True))
    if not quiet:
        print(f"{scenario.name}: {scenario.fleet.num_gpus} GPUs, {model.info.num_links} links, "
              f"{len(model.plans)} training job(s)", flush=True)
    return model


def cmd_run(scenario, out: str, quiet: bool) -> dict:
    from .results import write_json

    t0 = time.perf_counter()
    model = _prepare(scenario, quiet)
    if not quiet:
        print("[compile and evaluate]", flush=True)
    result = fleet_result(model, model.evaluate())
    lines = []
    if scenario.reliability is not None:  # time to train under failures, checkpoints and restarts
        from . import reliability

        figures, lines = reliability.report(model)
        result.update(figures)
    result["seconds"] = time.perf_counter() - t0
    if not quiet:
        for name, job in result["jobs"].items():
            _table(list(job["breakdown"].items()), f"{name}: step time {job['step_time_s']:.4f} s", quiet)
        for name, seconds in result["kv_transfer_s"].items():
            print(f"\n{name}: KV transfer of one request {seconds * 1e3:.2f} ms")
        if lines:
            print("\n" + "\n".join(lines))
    write_json(os.path.join(out, "result.json"), result)
    return result


def cmd_optimize(scenario, out: str, quiet: bool) -> dict:
    import optax

    from . import optimize, plots
    from .results import write_json

    model = _prepare(_needs(scenario, "optimize"), quiet)
    o = scenario.optimize
    space = optimize.Space(model.info, o.knobs, o.cost)
    objective, exact = model.objective()
    from tqdm import tqdm

    with tqdm(total=o.steps * o.restarts, desc="optimize", disable=quiet, leave=False) as bar:
        res = optimize.minimize(objective, model.network, space, exact=exact, budget=o.budget, steps=o.steps,
                                optimizer=optax.adam(o.learning_rate), restarts=o.restarts, seed=o.seed,
                                callback=lambda i, v: (bar.update(1), bar.set_postfix(objective=f"{v:.4g}")))
    rounded = any(k.allowed for k in o.knobs)
    if rounded:
        res = optimize.round_to_allowed(res, model.network, space, exact, budget=o.budget)
    before, after = model.evaluate(), model.evaluate(res.network, logits=res.logits)
    result = {"scenario": scenario.name, "baseline_step_time_s": res.baseline,
              "optimized_step_time_s": res.optimized, "parameters": res.parameters,
              "baseline_parameters": {k.group: {"value": model.info.groups[k.group].value,
                                                "unit": model.info.groups[k.group].unit} for k in o.knobs},
              "cost": res.cost, "budget": o.budget, "history": [float(h) for h in res.history],
              "restarts": res.restarts, "rounded": rounded,
              "baseline_breakdown": _floats(before.steps[before.critical()].breakdown),
              "optimized_breakdown": _floats(after.steps[after.critical()].breakdown)}
    plots.loss_curve(res.history, os.path.join(out, "loss.png"))
    plots.breakdown_bars({"baseline": result["baseline_breakdown"], "optimized": result["optimized_breakdown"]},
                         os.path.join(out, "breakdown.png"))
    write_json(os.path.join(out, "result.json"), result)
    if not quiet:
        print(f"{scenario.name}: step time {res.baseline:.4f} s -> {res.optimized:.4f} s "
              f"({res.optimized / res.baseline - 1:+.1%}), cost {res.cost:.6g}"
              + (f" of budget {o.budget:.6g}" if o.budget is not None else ""))
        for name, p in res.parameters.items():
            base = result["baseline_parameters"][name]["value"]
            print(f"  {name:<24} {base:>12.5g} -> {p['value']:>12.5g} {p['unit']}")
    return result


def sweep_evaluation(model):
    """The sweep's function of one point (link group -> value): the scenario's exact step time and
    the slowest job's breakdown, on the network with those groups set."""
    import jax.numpy as jnp

    from . import fabric

    options = model.options.exact()

    def evaluate(point):
        fleet = model.fleet(fabric.apply_groups(model.network, model.info, point), options)
        steps = list(fleet.steps.values())
        times = jnp.stack([r.step_time for r in steps])
        slowest = jnp.argmax(times)
        parts = {k: jnp.stack([jnp.asarray(r.breakdown[k]) for r in steps])[slowest] for k in steps[0].breakdown}
        return {"step_time_s": times[slowest], **{f"{k}_s": v for k, v in parts.items()}}

    return evaluate


def cmd_sweep(scenario, out: str, quiet: bool) -> dict:
    from . import plots, sweep

    model = _prepare(_needs(scenario, "sweep"), quiet)
    axes = scenario.sweep.axes
    for group in axes:
        if group not in model.info.groups:
            raise ValueError(f"sweep.grid.{group}: unknown link group; known: {', '.join(sorted(model.info.groups))}")
    points = sweep.grid(**axes)
    table = sweep.sweep(sweep_evaluation(model), points, chunk=scenario.sweep.chunk, progress=not quiet)
    csv_path, json_path = sweep.write_table(table, out)
    names = list(axes)
    plots.sweep_lines(table, names, "step_time_s", os.path.join(out, "sweep.png"))
    if not quiet:
        best = int(np.argmin(table["step_time_s"]))
        at = ", ".join(f"{n} = {table[n][best]:.5g}" for n in names)
        print(f"{scenario.name}: {len(table['step_time_s'])} points; best step time "
              f"{table['step_time_s'][best]:.4f} s at {at}")
        print(f"wrote {csv_path}, {json_path}")
    return table


def cmd_failures(scenario, out: str, quiet: bool) -> dict:
    from . import resilience
    from .results import write_json

    model = _prepare(_needs(scenario, "failures"), quiet)
    scenarios = resilience.failure_scenarios(model)
    if not quiet:
        print(f"[evaluate {len(scenarios)} failure scenarios]", flush=True)
    report = resilience.evaluate_failures(model, scenarios)
    jobs = {name: {"healthy_step_time_s": report.healthy[name],
                   "step_time_s": dict(zip(report.scenarios, (float(t) for t in report.step_times[name]))),
                   "expected_step_time_s": report.expected[name], "p99_step_time_s": report.p99[name],
                   "worst": {"scenario": report.worst[name][0], "step_time_s": report.worst[name][1]},
                   "disconnected": report.disconnected[name]} for name in report.step_times}
    result = {"scenario": scenario.name, "failures": report.scenarios, "jobs": jobs}
    write_json(os.path.join(out, "result.json"), result)
    if not quiet:
        for name, job in jobs.items():
            print(f"\n{name}: healthy {job['healthy_step_time_s']:.4f} s, expected {job['expected_step_time_s']:.4f} s,"
                  f" p99 {job['p99_step_time_s']:.4f} s, worst {job['worst']['scenario']}; "
                  f"{len(job['disconnected'])} scenario(s) disconnect it")
    return result


COMMANDS = {"run": (cmd_run, "step time of every workload in a scenario"),
            "optimize": (cmd_optimize, "minimise step time over the scenario's knobs under its budget"),
            "sweep": (cmd_sweep, "step time over the scenario's sweep grid (vmapped, sharded over devices)"),
            "failures": (cmd_failures, "step time under each failure of the scenario's failures section")}


def main(argv: list[str] | None = None) -> int:
    from .config import ConfigError, load

    ap = argparse.ArgumentParser(prog="flowmodel", description="Flow-level model of AI fleet networks.")
    sub = ap.add_subparsers(dest="command", required=True)
    for name, (_, text) in COMMANDS.items():
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
        COMMANDS[args.command][0](scenario, out, args.quiet)
    except (ConfigError, ValueError) as e:
        print(f"flowmodel: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    if not args.quiet and args.command != "sweep":
        print(f"\nwrote {os.path.join(out, 'result.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
