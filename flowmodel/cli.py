"""Command line: ``flowmodel run|optimize|sweep|failures|validate|export-trace CONFIG [--out DIR]
[--set KEY=VALUE]`` and ``flowmodel trace PREFIX --network FILE [--system FILE] [--out DIR]``.

Every command prepares the scenario once (``scenario.prepare``) and evaluates it through the same
function (``Model.fleet``): ``run`` at the scenario's own network, ``optimize`` over its knobs,
``sweep`` over its grid, ``failures`` on each failed fabric; ``validate`` stops after preparing.

Each command writes its own files into ``DIR`` (default ``out/<config name>``), so commands never
overwrite each other: ``run.json``; ``optimize.json``, ``optimize_loss.png``,
``optimize_breakdown.png``; ``sweep.json``, ``sweep.csv``, ``sweep.png``; ``failures.json``,
``failures.png``; ``trace.json``, ``trace_timeline.png``, ``trace_nodes.csv``; ``export-trace.json``
and the traces ``<job>.<rank>.et`` (``run.json`` adds the time to train when the scenario has a ``reliability``
section: ``time_to_train_days``, ``effective_training_time``, ``interruptions_per_day``,
``checkpoint_interval_s``, ...). Keys end in their unit (``_s`` seconds, ``_Bps`` bytes/s,
``_bytes``); every JSON file says so in its ``units`` map, and records how it was made in its
``provenance`` map (``Record``). A command locks its output folder (``results.OutputLock``): a second
one on the same ``--out`` exits with status 2. The output folder is checked before any work, files are
written whole or not at all, and a bad config or argument exits with status 2 and one line naming
the key and the value; so does a scenario estimated not to fit in this machine's memory, before its
fabric is built (the line gives the estimate and what is available). ``trace.json`` counts the trace
nodes that take no time (``zero_time_nodes``: barriers, peerless sends and recvs, memory nodes, ...).
"""

from __future__ import annotations

import argparse
import collections
import contextvars
import copy
import math
import os
import sys
import tempfile
import time
import warnings

import numpy as np

UNITS = {"_s": "seconds", "_Bps": "bytes per second", "_bytes": "bytes", "_ratio": "oversubscription, down : up",
         "efficiency": "bandwidth bound / time (1 = at the bound)", "cost": "the optimize section's cost units"}
_COLLECTIVE_KEYS = {"seconds": "time_s", "bound_seconds": "bound_s", "efficiency": "efficiency", "bytes": "bytes",
                    "ranks": "ranks", "algbw": "algbw_Bps", "busbw": "busbw_Bps"}


class UsageError(ValueError):
    """A bad command-line argument (exit status 2)."""


def _floats(d: dict) -> dict:
    """Floats of a breakdown or the like, residue (-0.0, 5.55e-17) against its largest part as 0."""
    from ._units import tidy

    values = {k: float(v) for k, v in d.items()}
    scale = max((abs(v) for v in values.values() if np.isfinite(v)), default=0.0)
    return {k: tidy(v, scale) if np.isfinite(v) else v for k, v in values.items()}


def _table(breakdown: dict[str, float], title: str) -> None:
    """A breakdown in the order of the step (components that take no time left out)."""
    from .plots import COMPONENT_COLOURS

    total = sum(breakdown.values()) or 1.0
    width = max([12, *map(len, breakdown)])
    print(f"\n{title}")
    for name in sorted(breakdown, key=lambda k: list(COMPONENT_COLOURS).index(k) if k in COMPONENT_COLOURS else 99):
        if breakdown[name] != 0:
            print(f"  {name:<{width}} {breakdown[name]:>10.4f} s  {breakdown[name] / total:>6.1%}")


def fleet_result(model, fleet) -> dict:
    """run.json's figures of an evaluated fleet."""
    plans = {plan.job.name: plan for plan in model.plans}
    jobs = {}
    for name, r in fleet.steps.items():
        collectives = {kind: {**{_COLLECTIVE_KEYS[k]: (int if k == "ranks" else float)(v) for k, v in figures.items()},
                              "domain": plans[name].domains[kind]} for kind, figures in r.collectives.items()}
        jobs[name] = {"step_time_s": float(r.step_time), "breakdown_s": _floats(r.breakdown),
                      "by_domain_s": _floats(r.by_domain), "collectives": collectives,
                      "memory_per_gpu_bytes": _floats(plans[name].job.memory()),
                      "hbm_bytes": float(plans[name].job.hbm)}
    others = {plan.job.name: plan for plan in model.others}
    every = fleet.every
    for name, plan in others.items():  # recommendation, RL, agentic: the iteration (request) and its parts
        r = every[name]
        collectives = {kind: {**{_COLLECTIVE_KEYS[k]: (int if k == "ranks" else float)(v) for k, v in figures.items()},
                              "domain": plan.domains.get(kind)} for kind, figures in r.collectives.items()}
        time_key = "latency_s" if plan.SERVICE else "step_time_s"
        jobs[name] = {"kind": plan.KIND, time_key: float(r.step_time), "breakdown_s": _floats(r.breakdown),
                      "by_domain_s": _floats(r.by_domain), "collectives": collectives, **plan.figures(r)}
    slowest = fleet.critical()
    return {"scenario": model.scenario.name, "units": UNITS,
            "step_time_s": jobs[slowest]["step_time_s"] if slowest else None,
            "breakdown_s": jobs[slowest]["breakdown_s"] if slowest else {},
            "critical_job": slowest, "jobs": jobs, "kv_transfer_s": _floats(fleet.kv_transfer_s),
            "fixed_point": {"iterations": int(fleet.iterations), "converged": bool(fleet.converged),
                            "last_change_s": float(fleet.change)}}


def seeded_result(model, batch, seeds) -> dict:
    """run.json's figures over the routing seeds (``flowmodel.seeds``): every figure is its mean over
    the seeds (``statistic`` says so), each job's and the fleet's step time also with its spread
    (``step_time_stats_s``: mean, p5, p50, p95, min, max) and its value per seed."""
    from . import seeds as sd

    result = fleet_result(model, sd.mean_fleet(batch))
    for name, r in batch.every.items():  # a service's figure is its request latency, a job's its step time
        t, key = np.asarray(r.step_time, np.float64), "latency" if "latency_s" in result["jobs"][name] else "step_time"
        result["jobs"][name].update({f"{key}_stats_s": sd.statistics(t), f"{key}_per_seed_s": t.tolist()})
    per_seed = {name: np.asarray(r.step_time, np.float64) for name, r in batch.jobs.items()}
    head = {"statistic": sd.describe(model.scenario.routing, seeds), "routing_seeds": list(seeds)}
    if per_seed:  # the fleet's step time under each seed is its slowest job's under that seed
        fleet = np.max(np.stack(list(per_seed.values())), axis=0)
        head.update(step_time_s=float(fleet.mean()), step_time_stats_s=sd.statistics(fleet),
                    step_time_per_seed_s=fleet.tolist())
    result["kv_transfer_stats_s"] = {n: sd.statistics(v) for n, v in batch.kv_transfer_s.items()}
    return {"scenario": result.pop("scenario"), **head, **{k: v for k, v in result.items() if k not in head}}


def spread_text(stats: dict, statistic: str) -> str:
    """``(mean over 8 ECMP seeds 0-7; p5 0.4248, p95 0.4901, min 0.4110, max 0.4901)`` for the console."""
    if not statistic.startswith("mean"):
        return f"({statistic})"
    if stats["max"] - stats["min"] <= 1e-12 * abs(stats["max"]):
        return f"(the same under all {statistic.removeprefix('mean over ')})"
    return (f"({statistic}; p5 {stats['p5']:.4f}, p95 {stats['p95']:.4f}, min {stats['min']:.4f}, "
            f"max {stats['max']:.4f})")


def _needs(scenario, section: str):
    """The scenario, if it has the section a command works on and a training job to evaluate."""
    if getattr(scenario, section) is None:
        raise ValueError(f"{section}: the config has no {section} section (docs/config.md)")
    if not scenario.training:
        raise ValueError(f"workloads.training: {section} needs at least one training job")
    return scenario


def _check_groups(model, groups, where) -> None:
    """Every named link group exists (before any evaluation); ``where(i, group)`` is its key path."""
    for i, group in enumerate(groups):
        if group not in model.info.groups:
            raise ValueError(f"{where(i, group)}: unknown link group {group!r}; known: "
                             f"{', '.join(sorted(model.info.groups))}")


class Record:
    """How one command's results were made, written into each of its result files as ``provenance``:
    the flowmodel, JAX and Python versions, backend and precision, the config file, the overrides, the
    resolved config (the YAML after ``--set``), the seeds, and the wall time of each stage (a stage
    runs from its progress line to the next)."""

    def __init__(self, command: str, overrides=()):
        self.command, self.overrides = command, list(overrides)
        self.path = self.config = self.scenario = None
        self.start = time.perf_counter()
        self.stages: list[tuple[str, float]] = [("read config", self.start)]

    def stage(self, name: str) -> None:
        self.stages.append((name, time.perf_counter()))

    def as_dict(self) -> dict:
        import platform

        import jax

        from . import __version__

        now, spent = time.perf_counter(), {}
        marks = self.stages + [(None, now)]
        for (name, t), (_, t_next) in zip(marks, marks[1:]):
            spent[name] = spent.get(name, 0.0) + t_next - t
        return {"flowmodel_version": __version__, "command": self.command, "config_file": self.path,
                "overrides": self.overrides, "config": self.config, "seeds": seeds(self.scenario),
                "jax_version": jax.__version__, "backend": jax.default_backend(), "devices": jax.device_count(),
                "precision": "float64" if jax.config.jax_enable_x64 else "float32",
                "python_version": platform.python_version(), "stage_wall_time_s": spent,
                "wall_time_s": now - self.start}


_RECORD: contextvars.ContextVar[Record | None] = contextvars.ContextVar("flowmodel_record", default=None)


def seeds(scenario) -> dict:
    """Every seed the scenario's results depend on, by key path."""
    if scenario is None:
        return {}
    out = {"fabric.routing.seed": scenario.routing.seed, "fabric.routing.seeds": scenario.routing.seeds}
    if scenario.optimize is not None:
        out["optimize.seed"] = scenario.optimize.seed
    if scenario.failures is not None and scenario.failures.sample_count is not None:
        out["failures.sample.seed"] = scenario.failures.sample_seed
    if scenario.reliability is not None:
        out["reliability.monte_carlo.seed"] = scenario.reliability.seed
    return out


def provenance() -> dict:
    """The running command's ``Record`` (empty outside ``main``)."""
    record = _RECORD.get()
    return {} if record is None else record.as_dict()


def _write_json(path: str, payload: dict) -> None:
    """A result file with the command's provenance (``Record``)."""
    from .results import write_json


    write_json(path, {**payload, "provenance": provenance()})


def _say(quiet: bool):
    """A progress line: starts a stage of the running command's ``Record``; printed unless quiet."""
    def say(message: str) -> None:
        record = _RECORD.get()
        if record is not None:
            record.stage(message)
        if not quiet:
            print(f"[{message}]", flush=True)

    return say


def _prepare(scenario, quiet: bool, gradients: bool = False, seeds: int = 1):
    from ._memory import check_fits
    from .scenario import prepare

    # a fabric too large for this machine is refused before it is built (``seeds``: evaluated at once)
    check_fits(scenario, gradients=gradients, seeds=seeds)
    model = prepare(scenario, progress=_say(quiet))
    if not quiet:
        print(f"{scenario.name}: {scenario.fleet.num_gpus} GPUs, {model.info.num_links} links, "
              f"{len(model.plans)} training job(s)"
              + "".join(f", {n} {kind} workload(s)" for kind, n in
                        collections.Counter(p.KIND for p in model.others).items()), flush=True)
    return model


def cmd_run(scenario, out: str, quiet: bool, links: bool = False) -> dict:

    from .seeds import SeedSet, routing_seeds

    t0 = time.perf_counter()
    seeds = routing_seeds(scenario.routing)
    model = _prepare(scenario, quiet, seeds=len(seeds))
    jobs = None
    if scenario.reliability is not None:  # checked (storage, paths) before any evaluation
        from . import reliability

        _say(quiet)("plan reliability: fail each kind of element the jobs cross")
        jobs = reliability.plan(model)
    if len(seeds) > 1:
        _say(quiet)(f"route under {len(seeds)} {scenario.routing.policy} seeds")
    batch = SeedSet(model, seeds)
    _say(quiet)("compile and evaluate")
    result = seeded_result(model, batch.evaluate(), seeds)
    lines = []
    if links:  # the link view: links.csv, links.png, run.json's "links"; of the file's seed (routes differ by seed)
        from . import links as link_view

        _say(quiet)("link view: replay every phase, per-link loads"
                    + (f" (routing seed {seeds[0]})" if len(seeds) > 1 else ""))
        result["links"], table = link_view.report(model, model.evaluate(), out)
        result["links"]["routing_seed"] = seeds[0]
        result["units"] = {**result["units"], **link_view.UNITS}
        lines.append(table)
    if jobs is not None:  # time to train under failures, checkpoints and restarts
        _say(quiet)("time to train: checkpoint traffic, expectation and Monte Carlo")
        figures, lines = reliability.report(model, jobs)
        result.update(figures, units={**result["units"], **reliability.UNITS}, time_to_train_routing_seed=seeds[0])
    result["wall_time_s"] = time.perf_counter() - t0
    if not quiet:
        for name, job in result["jobs"].items():
            key, what = ("latency", "latency of one request") if "latency_s" in job else ("step_time", "step time")
            _table(job["breakdown_s"], f"{name}: {what} {job[f'{key}_s']:.4f} s "
                                       f"{spread_text(job[f'{key}_stats_s'], result['statistic'])}")
        for name, job in result["jobs"].items():  # an open-loop service asked for more than its latency allows
            allowed = job.get("max_requests_per_s")
            rate = getattr(next((p.job for p in model.others if p.job.name == name), None), "requests_per_s", None)
            if allowed is not None and rate is not None and rate > allowed:
                print(f"\n{name}: warning: requests_per_s = {rate:g}, but {job['instances']} instances decoding "
                      f"{job['batch']} requests each at this latency serve at most {allowed:.3g} per second")
        for name, seconds in result["kv_transfer_s"].items():
            kv = result["kv_transfer_stats_s"][name]
            print(f"\n{name}: KV transfer of one request {seconds * 1e3:.2f} ms"
                  + (f" (min {kv['min'] * 1e3:.2f}, max {kv['max'] * 1e3:.2f} ms)" if len(seeds) > 1 else ""))
        if lines:
            print("\n" + "\n".join(lines))
    _write_json(os.path.join(out, "run.json"), result)
    return result


OBJECTIVE_LABELS = {"step_time": "step time", "throughput": "GPU-weighted mean step time",
                    "expected": "expected step time", "time_to_train": "expected time to train"}


def cmd_optimize(scenario, out: str, quiet: bool, pareto: int | None = None) -> dict:
    import optax
    from tqdm import tqdm

    from . import optimize, plots
    from ._units import show
    from .objectives import planning_objective
    from .seeds import SeedSet, describe, mean_fleet, routing_seeds, statistics

    o = _needs(scenario, "optimize").optimize
    # the search runs on fabric.routing.seeds (default: its one seed); the report adds the spread over 8
    search_seeds = routing_seeds(scenario.routing, default=1) if o.objective in ("step_time", "throughput") \
        else (scenario.routing.seed,)
    report_seeds = max(search_seeds, routing_seeds(scenario.routing), key=len)
    model = _prepare(scenario, quiet, gradients=True, seeds=len(search_seeds))
    _check_groups(model, [k.group for k in o.knobs], lambda i, g: f"optimize.knobs[{i}].group")
    space = optimize.Space(model.info, o.knobs, o.cost)
    baseline_values = {k.group: model.info.groups[k.group].value for k in o.knobs}
    objective, exact, gradient = planning_objective(model, o.objective, kv_weight=o.kv_weight, search=o.search,
                                                    seeds=search_seeds)
    _say(quiet)(f"compile the search ({o.objective}, {o.search} rates)")
    with tqdm(total=o.steps * o.restarts, desc="optimize", disable=quiet, leave=False) as bar:
        res = optimize.minimize(objective, model.network, space, exact=exact, budget=o.budget, steps=o.steps,
                                logits=model.split_logits() if o.routing == "wcmp" else None,
                                optimizer=optax.adam(o.learning_rate), restarts=o.restarts, seed=o.seed,
                                callback=lambda i, v: (bar.update(1), bar.set_postfix(objective=f"{v:.4g}")))
    searched = res.optimized
    _say(quiet)("round to allowed values, polish and certify on the exact model")
    done = optimize.finish(res, model.network, space, exact, budget=o.budget, gradient=gradient, progress=not quiet)
    res = done.result
    # the searched seeds' figures (their mean), then every reported seed's (default 8) for the spread
    _say(quiet)(f"evaluate baseline and result under {len(report_seeds)} routing seed(s)")
    searched_set = SeedSet(model, search_seeds)
    runs = [searched_set.evaluate(net, logits=lg) for net, lg in ((None, None), (res.network, res.logits))]
    before, after = (mean_fleet(r) for r in runs)
    mean_step = [float(np.mean(np.asarray(r.step_time))) for r in runs]  # the fleet's: its slowest job per seed
    if report_seeds != search_seeds:
        reported = SeedSet(model, report_seeds)
        runs = [reported.evaluate(net, logits=lg) for net, lg in ((None, None), (res.network, res.logits))]
    spread = {"statistic": describe(scenario.routing, report_seeds), "routing_seeds": list(report_seeds)}
    for k, r in zip(("baseline", "optimized"), runs):
        spread[f"{k}_step_time_stats_s"] = statistics(np.asarray(r.step_time))
        spread[f"{k}_job_step_time_stats_s"] = {n: statistics(np.asarray(j.step_time)) for n, j in r.jobs.items()}
    result = {"scenario": scenario.name, "units": UNITS, "objective": o.objective, "search_rates": o.search,
              "search_seeds": list(search_seeds), "search_statistic": describe(scenario.routing, search_seeds),
              "baseline_objective": res.baseline, "optimized_objective": res.optimized,
              "searched_objective": searched,
              "baseline_step_time_s": mean_step[0], "optimized_step_time_s": mean_step[1],
              "over_seeds": spread,
              "baseline_job_step_times_s": {n: float(r.step_time) for n, r in before.jobs.items()},
              "optimized_job_step_times_s": {n: float(r.step_time) for n, r in after.jobs.items()},
              "parameters": res.parameters,
              "baseline_parameters": {g: {"value": v, "unit": model.info.groups[g].unit}
                                      for g, v in baseline_values.items()},
              "baseline_cost": space.cost_at(baseline_values), "optimized_cost": res.cost, "budget": o.budget,
              "optimality_check": done.check.as_dict(), "roundings": done.roundings,
              "refine_evaluations": done.evaluations, "polish_gradients": done.gradients,
              "more_budget_buys_nothing": done.buys_nothing, "least_cost_saved": done.saved,
              "history": [float(h) for h in res.history], "restarts": res.restarts,
              "baseline_breakdown_s": _floats(before.jobs[before.critical()].breakdown),
              "optimized_breakdown_s": _floats(after.jobs[after.critical()].breakdown)}
    plots.loss_curve(res.history, os.path.join(out, "optimize_loss.png"),
                     exact={"baseline (exact)": res.baseline, "search end (exact)": searched,
                            "refined (exact)": res.optimized}, rates=o.search)
    plots.breakdown_bars({"baseline": result["baseline_breakdown_s"], "optimized": result["optimized_breakdown_s"]},
                         os.path.join(out, "optimize_breakdown.png"),
                         spread=None if len(report_seeds) == 1 else
                         {k: spread[f"{k}_step_time_stats_s"] for k in ("baseline", "optimized")},
                         spread_label=f"min-max, {spread['statistic'].removeprefix('mean over ')}")
    _write_json(os.path.join(out, "optimize.json"), result)
    front = None
    if pareto:
        span = optimize.budget_range(space, pareto)
        extra = [c for c in (result["baseline_cost"], o.budget) if c is not None and span[0] <= c <= span[-1]]
        budgets = np.unique(np.concatenate([span, extra]))
        _say(quiet)(f"pareto front over {len(budgets)} budgets, {budgets[0]:.6g} to {budgets[-1]:.6g}")
        points = optimize.pareto(res, model.network, space, exact, budgets, gradient=gradient, progress=not quiet)
        front = {"scenario": scenario.name, "units": UNITS,
                 "points": [{"budget": p.budget, "cost": p.result.cost, "step_time_s": p.result.optimized,
                             "parameters": p.result.parameters, "optimality_check": p.check.as_dict()}
                            for p in points]}
        plots.pareto_front(front["points"], os.path.join(out, "optimize_pareto.png"),
                           chosen=(res.cost, res.optimized), baseline=(result["baseline_cost"], res.baseline))
        _write_json(os.path.join(out, "optimize_pareto.json"), front)
    if not quiet:
        print(f"{scenario.name}: {OBJECTIVE_LABELS[o.objective]} {res.baseline:.4f} s -> {res.optimized:.4f} s "
              f"({res.optimized / res.baseline - 1:+.1%}), cost {res.cost:.6g}"
              + (f" of budget {o.budget:.6g}" if o.budget is not None else ""))
        if len(report_seeds) > 1:
            b, a = spread["baseline_step_time_stats_s"], spread["optimized_step_time_stats_s"]
            print(f"  step time over {spread['statistic'].removeprefix('mean over ')}: {b['mean']:.4f} s (min "
                  f"{b['min']:.4f}, max {b['max']:.4f}) -> {a['mean']:.4f} s (min {a['min']:.4f}, max {a['max']:.4f});"
                  + (f" searched on seed {search_seeds[0]} only (--seeds N searches the mean over N)"
                     if len(search_seeds) == 1 else " searched on their mean"))
        if len(before.jobs) > 1:
            print("  jobs: " + ", ".join(f"{n} {result['baseline_job_step_times_s'][n]:.4f} -> {t:.4f} s"
                                         for n, t in result["optimized_job_step_times_s"].items()))
        for name, p in res.parameters.items():
            base = result["baseline_parameters"][name]["value"]
            print(f"  {name:<24} {show(base, p['unit']):>12} -> {show(p['value'], p['unit']):>12}"
                  + (" (ratio)" if p["unit"] == "ratio" else ""))
        check = done.check
        print(f"  optimality check: {'passed' if check.passed else 'FAILED'} (first order: {check.moves} exact "
              f"evaluations, best gain {max(check.best_gain, 0.0):.2%} per unit move"
              + (f" ({check.best_move})" if not check.passed and check.best_move else "")
              + f", budget multiplier {check.multiplier:.3g}; {done.roundings} rounding(s), {done.evaluations} exact "
              f"evaluations, {done.gradients} gradients)")
        if done.buys_nothing and o.budget is not None:
            print(f"  used {res.cost:,.0f} of {o.budget:,.0f}: more buys nothing"
                  + (f" (the cheapest point found at this step time; {done.saved:,.0f} less than the refined one)"
                     if done.saved > 0 else ""))
        if front is not None:
            for p in front["points"]:
                print(f"  budget {p['budget']:>12.6g}: step time {p['step_time_s']:.4f} s at cost {p['cost']:.6g}")
    return result


def sweep_evaluation(model, batch=None):
    """The sweep's function of one point (link group -> value): the scenario's exact step time and
    the slowest job's breakdown, on the network with those groups set. With ``batch`` (a
    ``seeds.SeedSet`` of several seeds) each is the mean over the seeds (the slowest job under each),
    beside the step time's min and max over them."""
    import jax.numpy as jnp

    from . import fabric

    options = model.options.exact()
    seeded = batch is not None and len(batch) > 1

    def evaluate(point):
        net = fabric.apply_groups(model.network, model.info, point)
        fleet = batch.fleet(net, options) if seeded else model.fleet(net, options)
        steps = list(fleet.jobs.values())  # every closed-loop job: training, recommendation, RL
        times = jnp.stack([r.step_time for r in steps])  # [jobs] or [jobs, seeds]
        keys = list(dict.fromkeys(k for r in steps for k in r.breakdown))  # kinds differ in their parts
        slowest = jnp.argmax(times, axis=0)

        def pick(values):  # the slowest job's value (under each seed)
            return jnp.take_along_axis(values, slowest[None], axis=0)[0] if seeded else values[slowest]

        parts = {k: pick(jnp.stack([jnp.zeros_like(r.step_time) + r.breakdown.get(k, 0.0) for r in steps]))
                 for k in keys}
        out = {"step_time_s": pick(times), **{f"{k}_s": v for k, v in parts.items()}}
        if not seeded:  # with a batch of one seed, its range is the value (every sweep.csv has the columns)
            return out if batch is None else {"step_time_s": out["step_time_s"], "step_time_min_s": out["step_time_s"],
                                              "step_time_max_s": out["step_time_s"], **out}
        t = out.pop("step_time_s")
        return {"step_time_s": t.mean(), "step_time_min_s": t.min(), "step_time_max_s": t.max(),
                **{k: v.mean() for k, v in out.items()}}

    return evaluate


COLUMN_SUFFIX = {"bytes/s": "_Bps", "ratio": "_ratio"}  # sweep.csv / sweep.json columns of link groups


def cmd_sweep(scenario, out: str, quiet: bool) -> dict:
    import jax
    from tqdm import tqdm

    from . import plots, sweep
    from ._units import show
    from .seeds import SeedSet, describe, routing_seeds

    spec = _needs(scenario, "sweep").sweep
    settings = [path for path, _ in spec.settings]
    variants = spec.variants or (((), scenario),)
    names = list(spec.axes)
    # each point over its routing seeds (default 8 when hash-routed; one when the sweep sets the seed itself)
    seed_default = 1 if "fabric.routing.seed" in settings else int(SEEDED["sweep"])
    counts: set[int] = set()
    seed_lists: list[list[int]] = []  # per scenario of the sweep
    if len(variants) > 1:
        _say(quiet)(f"prepare and evaluate {len(variants)} scenarios (every combination of "
                    f"{', '.join(settings)})" + (f", each over {_grid_size(spec)} link-group points" if names else ""))
    tables, how, units = [], {}, {}
    with tqdm(total=len(variants), desc="sweep", unit="scenario", disable=quiet or len(variants) == 1) as bar:
        for assignment, variant in variants:
            bar.set_postfix_str(", ".join(f"{p.rsplit('.', 1)[-1]}={v}" for p, v in assignment))
            seeds = routing_seeds(variant.routing, default=seed_default)
            counts.add(len(seeds))
            seed_lists.append(list(seeds))
            try:
                model = _prepare(variant, quiet or len(variants) > 1, seeds=len(seeds))
                _check_groups(model, names, lambda i, g: f"sweep.grid.{g}")
            except ValueError as e:
                if not assignment:
                    raise
                at = ", ".join(f"{p} = {v!r}" for p, v in assignment)
                raise type(e)(f"sweep.grid: at {at}: {e}") from None
            units = {n: model.info.groups[n].unit for n in names}
            evaluate = sweep_evaluation(model, SeedSet(model, seeds))
            if names:
                if len(variants) == 1:
                    _say(quiet)(f"compile and evaluate {_grid_size(spec)} points"
                                + (f", each under {len(seeds)} {variant.routing.policy} seeds" if len(seeds) > 1
                                   else ""))
                table = sweep.sweep(evaluate, sweep.grid(**spec.axes), chunk=spec.chunk, batching=spec.batching,
                                    progress=not quiet and len(variants) == 1, info=how)
            else:  # settings only: one exact evaluation of this scenario
                table = {k: np.asarray([float(v)]) for k, v in jax.jit(evaluate)({}).items()}
            rows = len(table["step_time_s"])
            tables.append({**{p: np.asarray([_cell(v)] * rows, dtype=object) for p, v in assignment}, **table})
            bar.update(1)
    table = {k: np.concatenate([t[k] for t in tables]) for k in tables[0]}
    axes = settings + names
    plots.sweep_lines(table, axes, "step_time_s", os.path.join(out, "sweep.png"), units=units,
                      band=("step_time_min_s", "step_time_max_s") if max(counts) > 1 else None)
    columns = {f"{n}{COLUMN_SUFFIX.get(units[n], '')}" if n in units else n: v for n, v in table.items()}
    csv_path, json_path = sweep.write_table(columns, out, meta={"scenario": scenario.name, "units": UNITS,
                                                                "parameter_units": units, "settings": settings,
                                                                "batching": how, "statistic": _sweep_statistic(
                                                                    scenario, counts, seed_default),
                                                                "routing_seeds": seed_lists[0] if len(seed_lists) == 1
                                                                else seed_lists, "provenance": provenance()})
    if not quiet:
        best = int(np.argmin(table["step_time_s"]))
        at = ", ".join([f"{p} = {table[p][best]}" for p in settings] + [f"{n} = {show(table[n][best], units[n])}"
                                                                         for n in names])
        lo, hi = table["step_time_min_s"][best], table["step_time_max_s"][best]
        how_seeded = describe(scenario.routing, seeds) if len(variants) == 1 else "over its routing seeds"
        print(f"{scenario.name}: {len(table['step_time_s'])} points; best step time "
              f"{table['step_time_s'][best]:.4f} s at {at} ({how_seeded}"
              + (f": min {lo:.4f}, max {hi:.4f})" if max(counts) > 1 else ")"))
        if "vmap_s_per_point" in how:
            print(f"  batching: {how['batching']} (measured on {how['probe_points']} points: vmap "
                  f"{how['vmap_s_per_point']:.3g} s, loop {how['loop_s_per_point']:.3g} s per point)")
    return table


def _sweep_statistic(scenario, counts: set[int], default: int) -> str:
    """What sweep.csv's step time columns are, over routing seeds."""
    from .seeds import describe, routing_seeds

    if len(scenario.sweep.variants or ()) <= 1:
        what = describe(scenario.routing, routing_seeds(scenario.routing, default))
    else:
        what = (f"each point over its scenario's routing seeds (fabric.routing.seeds; default {default} for ecmp and "
                f"qp_scaling, one value for spray and wcmp)")
    return (f"step_time_s and the breakdown columns: {what}; step_time_min_s / step_time_max_s: the range of the "
            f"step time over the seeds" + ("" if max(counts) > 1 else " (one seed: the value)"))


def _grid_size(spec) -> int:
    return math.prod(len(v) for v in spec.axes.values())


def _cell(value):
    """A config value as a sweep.csv cell: numbers stay numbers, anything else its YAML text."""
    import yaml

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def cmd_failures(scenario, out: str, quiet: bool) -> dict:
    from tqdm import tqdm

    from . import plots, resilience
    from .seeds import describe, routing_seeds, statistics

    seeds = routing_seeds(scenario.routing)
    model = _prepare(_needs(scenario, "failures"), quiet, seeds=len(seeds))
    scenarios = resilience.failure_scenarios(model)
    weight = scenario.failures.weight_of_healthy
    _say(quiet)(f"route and evaluate {len(scenarios)} failure scenarios"
                + (f", each under {len(seeds)} {scenario.routing.policy} seeds" if len(seeds) > 1 else ""))
    with tqdm(total=len(scenarios), desc="failures", disable=quiet, leave=False) as bar:
        report = resilience.evaluate_failures(model, scenarios, healthy_weight=weight,
                                              progress=lambda name: bar.update(1), seeds=seeds)

    def spread(name):  # each failure's spread over the seeds, the healthy one's, and the failures inside it
        inside = report.within_seed_spread(name)
        return {"healthy_stats_s": statistics(report.healthy_samples[name]),
                "stats_s": {k: statistics(v) for k, v in zip(report.scenarios, report.samples[name])},
                "within_seed_spread": [k for k, flag in zip(report.scenarios, inside) if flag]}

    jobs = {name: {"healthy_step_time_s": report.healthy[name],
                   "step_time_s": dict(zip(report.scenarios, (float(t) for t in report.step_times[name]))),
                   "expected_step_time_s": report.expected[name], "p99_step_time_s": report.p99[name],
                   "worst": {"scenario": report.worst[name][0], "step_time_s": report.worst[name][1]},
                   "disconnected": report.disconnected[name], **spread(name)} for name in report.step_times}
    services = {name: {"healthy_kv_transfer_s": report.healthy_kv[name],
                       "kv_transfer_s": dict(zip(report.scenarios, (float(t) for t in report.kv_transfer[name]))),
                       "expected_kv_transfer_s": report.expected_kv[name],
                       "disconnected": report.disconnected[name], **spread(name),
                       "measure": "request_latency" if any(a.name == name for a in scenario.agentic) else
                       "kv_transfer"} for name in report.kv_transfer}
    statistic = describe(scenario.routing, seeds)
    result = {"scenario": scenario.name, "units": UNITS, "statistic": statistic, "routing_seeds": list(seeds),
              "seed_spread": "within_seed_spread lists the failures whose mean lies within the healthy fabric's "
                             "min..max over the same seeds: a new hash draw alone moves the step time that much",
              "failures": report.scenarios,
              "probability": {s.name: s.probability for s in scenarios}, "healthy_weight": weight,
              "expected": "(healthy_weight x healthy + sum_i probability_i x t_i) / (healthy_weight + sum_i "
                          "probability_i), over the failures that keep the job connected",
              "sampled": scenario.failures.sample_count is not None, "jobs": jobs, "inference": services}
    plots.failure_bars(jobs, os.path.join(out, "failures.png"))
    _write_json(os.path.join(out, "failures.json"), result)
    if not quiet:
        for name, job in jobs.items():
            worst = job["worst"]["scenario"]
            print(f"\n{name}: healthy {job['healthy_step_time_s']:.4f} s "
                  f"{spread_text(job['healthy_stats_s'], statistic)}, expected {job['expected_step_time_s']:.4f} s,"
                  f" p99 {job['p99_step_time_s']:.4f} s, worst {worst}"
                  + (f" ({job['worst']['step_time_s']:.4f} s, min {job['stats_s'][worst]['min']:.4f}, max "
                     f"{job['stats_s'][worst]['max']:.4f})" if len(seeds) > 1 and worst in job["stats_s"] else "")
                  + f"; {len(job['disconnected'])} scenario(s) disconnect it")
            if len(seeds) > 1:
                inside = job["within_seed_spread"]
                print(f"  {len(inside)} of {len(report.scenarios)} failure(s) within the healthy seed spread (no "
                      f"effect beyond a new hash draw)" + (": " + ", ".join(inside[:4]) + (", ..." if len(inside) > 4
                                                                                         else "") if inside else ""))
        agentic = {a.name for a in scenario.agentic}
        for name, service in services.items():
            times = [t for t in service["kv_transfer_s"].values() if np.isfinite(t)]
            what = "request latency" if name in agentic else "KV transfer"
            print(f"\n{name}: {what} healthy {service['healthy_kv_transfer_s'] * 1e3:.2f} ms, expected "
                  f"{service['expected_kv_transfer_s'] * 1e3:.2f} ms"
                  + (f", worst {max(times) * 1e3:.2f} ms" if times else "")
                  + f"; {len(service['disconnected'])} scenario(s) disconnect it")
    return result


def cmd_validate(scenario, out: str | None, quiet: bool) -> dict:
    """Parse, build, route and plan; no evaluation and no files."""
    model = _prepare(scenario, quiet)
    if scenario.optimize is not None:
        _check_groups(model, [k.group for k in scenario.optimize.knobs], lambda i, g: f"optimize.knobs[{i}].group")
    if scenario.sweep is not None:
        _check_groups(model, list(scenario.sweep.axes), lambda i, g: f"sweep.grid.{g}")
    if scenario.failures is not None:
        from . import resilience

        resilience.failure_scenarios(model)
    if scenario.reliability is not None:
        from . import reliability

        reliability.plan(model)
    if not quiet:
        for plan in model.plans:
            job, par = plan.job, plan.job.parallelism
            memory = job.memory()
            print(f"  {job.name}: {par.size} GPUs (tp {par.tp} x cp {par.cp} x pp {par.pp} x dp {par.dp}), "
                  f"{job.micro_batches} micro-batches, ~{sum(memory.values()) / 1e9:.1f} GB per GPU of "
                  f"{job.hbm / 1e9:.0f} GB")
        for plan in model.others:  # recommendation, RL, agentic: their GPUs and what moves on the fabric
            ranks = plan.job.job_ranks(model.info.num_gpus)
            phases = ", ".join(n for n in plan.phases() if not n.startswith("train/")) or "none on the fabric"
            print(f"  {plan.job.name} ({plan.KIND}): {ranks.size} GPUs; phases: {phases}")
        print(f"  link groups: {', '.join(sorted(model.info.groups))}")
        print(f"{scenario.name}: valid")
    return {"scenario": scenario.name, "valid": True}


def cmd_export_trace(scenario, out: str, quiet: bool) -> dict:
    """Every training job of the scenario as a Chakra trace in ``out``."""
    from . import trace

    if not scenario.training:
        raise ValueError("workloads.training: export-trace needs at least one training job")
    model = _prepare(scenario, quiet)
    result = {**trace.export(model, out, progress=_say(quiet)), "units": UNITS}
    _write_json(os.path.join(out, "export-trace.json"), result)
    if not quiet:
        for name, job in result["jobs"].items():
            print(f"  {name}: {job['ranks']} ranks, {job['nodes']} nodes -> {job['prefix']}.<rank>.et "
                  f"(step time {job['step_time_s']:.6g} s)")
    return result


def cmd_trace(args, out: str, quiet: bool) -> dict:
    """Run a Chakra trace on an ASTRA-sim network or a scenario's fabric."""
    from . import trace
    from .plots import trace_timeline
    from .results import write_text

    record = _RECORD.get()
    if record is not None:
        record.path = args.network
    if trace.is_astra_network(args.network):
        if args.overrides:
            raise UsageError(f"--set: applies to a scenario file, but {args.network} is an ASTRA-sim network")
        fabric = trace.Fabric.from_astra(args.network)
    else:
        fabric = trace.Fabric.from_model(_prepare(_load_scenario(args.network, args.overrides), quiet))
    result = trace.run(args.prefix, fabric, system=args.system, comm_groups=args.comm_groups, progress=_say(quiet))
    prepared, timed = result.pop("_prepared"), result.pop("_result")
    result["units"] = UNITS
    _say(quiet)("write results")
    _write_json(os.path.join(out, "trace.json"), result)
    write_text(os.path.join(out, "trace_nodes.csv"), trace.nodes_csv(prepared, timed))
    spans, makespan, critical = trace.timeline_spans(prepared, timed)
    trace_timeline(spans, makespan, os.path.join(out, "trace_timeline.png"), critical=critical)
    if not quiet:
        print(f"\n{result['ranks']} ranks, {result['nodes']} nodes: makespan {result['makespan_s']:.6g} s "
              f"(ranks finish {min(result['finish_s']):.6g} .. {max(result['finish_s']):.6g} s)")
        for c in result["classes"]:
            per_call = f"{c['time_per_call_s']:.6g} s per call" if "time_per_call_s" in c else c["timing"]
            print(f"  {c['name']:<28} {per_call}")
        if result["system"]["ignored"]:
            print(f"  system keys not modelled: {', '.join(result['system']['ignored'])}")
        for kind, note in result["zero_time_nodes"].items():
            print(f"  took no time: {note['count']} {kind.replace('_', ' ')} node(s) ({note['why']})")
    return result


COMMANDS = {"run": (cmd_run, "step time of every workload in a scenario"),
            "optimize": (cmd_optimize, "minimise step time over the scenario's knobs under its budget"),
            "sweep": (cmd_sweep, "step time over the scenario's sweep grid (vmapped, sharded over devices)"),
            "failures": (cmd_failures, "step time under each failure of the scenario's failures section"),
            "validate": (cmd_validate, "check a scenario: parse, build, route and plan, without evaluating"),
            "export-trace": (cmd_export_trace, "write every training job of a scenario as a Chakra execution trace")}


# the commands with --seeds, and their default when fabric.routing.seeds is unset
SEEDED = {"run": "8", "failures": "8", "sweep": "8",
          "optimize": "1 in the search, 8 for the reported baseline and result"}


OUTPUTS = {"run": ("run.json",), "optimize": ("optimize.json", "optimize_loss.png", "optimize_breakdown.png"),
           "pareto": ("optimize_pareto.json", "optimize_pareto.png"), "links": ("links.csv", "links.png"),
           "sweep": ("sweep.json", "sweep.csv", "sweep.png"), "failures": ("failures.json", "failures.png"),
           "trace": ("trace.json", "trace_timeline.png", "trace_nodes.csv"),
           "export-trace": ("export-trace.json", "<job>.<rank>.et", "<job>.comm_group.json", "<job>.system.json")}


def check_out(out: str) -> list[str]:
    """Make ``out`` a folder that exists and can be written, or raise a ``UsageError`` naming it;
    returns the folders it created (so a command that then fails can leave nothing behind)."""
    created, path = [], os.path.abspath(out)
    while not os.path.exists(path):
        created.append(path)
        path = os.path.dirname(path)
    try:
        os.makedirs(out, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except FileExistsError:
        raise UsageError(f"--out {out}: is a file, not a folder") from None
    except OSError as e:
        raise UsageError(f"--out {out}: cannot write there ({e.strerror})") from None
    return created


def _remove_empty(folders: list[str]) -> None:
    for folder in folders:  # deepest first
        try:
            os.rmdir(folder)
        except OSError:
            return


def _release(lock) -> None:
    if lock is not None:
        lock.release()  # before an empty folder it made is removed


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    ap = argparse.ArgumentParser(prog="flowmodel", description="Flow-level model of AI fleet networks.")
    ap.add_argument("--version", action="version", version=f"flowmodel {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    for name, (_, text) in COMMANDS.items():
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("config", help="scenario file (YAML; keys in docs/config.md)")
        if name != "validate":
            p.add_argument("--out", default=None, help="output folder (default out/<config name>)")
        p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", dest="overrides",
                       help="override one key of the file, e.g. workloads.training[0].global_batch=128 "
                            "(repeatable; same units and checks as the file)")
        if name in SEEDED:
            p.add_argument("--seeds", default=None, metavar="N",
                           help="evaluate hash-routed figures (ecmp, qp_scaling) over the N routing seeds seed, "
                                "seed + 1, ... in one batch and report their mean and spread (fabric.routing.seeds; "
                                f"default {SEEDED[name]})")
        if name == "run":
            p.add_argument("--links", action="store_true", help="also write links.csv (every link: tier, capacity, "
                           "bytes, mean and peak utilisation per phase, collectives) and links.png, and name the hot "
                           "links, utilisation by tier and flow-completion times in run.json (of the file's "
                           "routing seed)")
        if name == "optimize":
            p.add_argument("--pareto", type=int, nargs="?", const=17, default=None, metavar="N",
                           help="also write the cost / step-time front: a refined optimum at N budgets (default 17) "
                                "from the knobs' cheapest to their dearest setting, and at the baseline's cost "
                                "and the budget")
        p.add_argument("--quiet", action="store_true", help="print nothing but errors")
        p.add_argument("--verbose", action="store_true", help="also show JAX/XLA log messages")
    text = "run a Chakra execution trace (<prefix>.<rank>.et) on an ASTRA-sim network or a scenario's fabric"
    p = sub.add_parser("trace", help=text, description=text)
    p.add_argument("prefix", help="trace prefix: the files are PREFIX.0.et, PREFIX.1.et, ...")
    p.add_argument("--network", metavar="FILE", required=True, help="ASTRA-sim network.yml (rank r = NPU r) or a "
                   "flowmodel scenario file (rank r = the GPU the trace records for it, else GPU r)")
    p.add_argument("--system", metavar="FILE", default=None, help="ASTRA-sim system.json: collective algorithms, "
                   "endpoint-delay (per-step latency), preferred-dataset-splits (chunks) and local-mem-bw (the memory "
                   "time of reductions); other keys are listed as not modelled")
    p.add_argument("--comm-groups", metavar="FILE", default=None, help="comm-group file (name -> ranks) for the "
                   "nodes' pg_name (default PREFIX.comm_group.json when it exists)")
    p.add_argument("--out", default=None, help="output folder (default out/<prefix name>)")
    p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", dest="overrides",
                   help="override one key of a scenario --network file")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.add_argument("--verbose", action="store_true", help="also show JAX/XLA log messages")
    sub.add_parser("reference", help="print the scenario file reference (docs/config.md)")
    return ap


def _load_scenario(path: str, overrides):
    """The scenario file (recorded, with its resolved config, in the command's ``Record``); an
    ASTRA-sim network file given in its place is named as such."""
    from . import trace
    from .config import ConfigError, parse, read

    try:
        data = read(path, overrides)
        scenario = parse(copy.deepcopy(data))
    except ConfigError:
        if trace.is_astra_network(path):
            raise UsageError(f"{path}: this looks like an ASTRA-sim network file (topology, npus_count, bandwidth, "
                             f"latency), not a scenario; run a Chakra trace on it with "
                             f"`flowmodel trace PREFIX --network {path}`") from None
        raise
    record = _RECORD.get()
    if record is not None:
        record.path, record.scenario = path, scenario
        record.config = _plain(data)
    return scenario


def _plain(data):
    """YAML data as JSON can hold it (YAML dates and the like as strings)."""
    import json

    return json.loads(json.dumps(data, default=str))


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"flowmodel: warning: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "seeds", None) is not None:  # one key, so the file's checks and its error apply
        args.overrides = [*args.overrides, f"fabric.routing.seeds={args.seeds}"]
    import jax

    from .config import ConfigError, reference

    if args.command == "reference":
        print(reference(), end="")
        return 0
    if not args.verbose:
        jax.config.update("jax_logging_level", "CRITICAL")  # XLA's slow-compile alarms and the like
    jax.config.update("jax_enable_x64", True)
    out = getattr(args, "out", None)
    if args.command == "trace":
        out = out or os.path.join("out", os.path.basename(args.prefix.rstrip("/")) or "trace")
    elif args.command != "validate":
        out = out or os.path.join("out", os.path.splitext(os.path.basename(args.config))[0])
    from .results import OutputLock, OutputLocked

    token = _RECORD.set(Record(args.command, args.overrides))
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        if args.quiet:
            warnings.simplefilter("ignore")
        created, lock = [], None
        try:
            if args.command == "trace":  # its scenario, if any, is the --network file
                created = check_out(out)
                lock = OutputLock(out).acquire()
                cmd_trace(args, out, args.quiet)
            else:
                scenario = _load_scenario(args.config, args.overrides)
                if out is not None:
                    created = check_out(out)
                    lock = OutputLock(out).acquire()  # a second command on the same --out is refused
                if getattr(args, "pareto", None) is not None and args.pareto < 2:
                    raise UsageError(f"--pareto: needs at least 2 budgets, got {args.pareto}")
                extra = {"pareto": args.pareto} if args.command == "optimize" else {}
                extra.update({"links": args.links} if args.command == "run" else {})
                COMMANDS[args.command][0](scenario, out, args.quiet, **extra)
        except OutputLocked as e:
            print(f"flowmodel: {e}", file=sys.stderr)
            return 2
        except (ConfigError, ValueError) as e:
            _release(lock)
            _remove_empty(created)
            print(f"flowmodel: {str(e).splitlines()[0]}", file=sys.stderr)
            return 2
        except MemoryError:
            _release(lock)
            _remove_empty(created)
            print("flowmodel: out of memory: the scenario is too large for this machine", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            _release(lock)
            _remove_empty(created)
            print("flowmodel: interrupted", file=sys.stderr)
            return 130
        finally:
            _release(lock)
            _RECORD.reset(token)
    if not args.quiet and out is not None:
        files = OUTPUTS[args.command] + (OUTPUTS["pareto"] if getattr(args, "pareto", None) else ())
        files += OUTPUTS["links"] if getattr(args, "links", False) else ()
        print(f"\nwrote {', '.join(files)} in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
