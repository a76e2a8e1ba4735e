"""What a long-haul cut costs a regional-ring job, and a capacity plan that expects it.

    PYTHONPATH=. python experiments/resilience.py [--config configs/gw_regional_ring.yaml]
        [--out out/resilience]

Prepares the scenario and evaluates its job healthy and under each failure of the config's
``failures`` section (the scenario prepared again on each failed fabric: re-routed with its routing
section), and reports the expected and p99 step time and the worst scenario. Then plans the
``optimize`` section's knobs under its budget twice: for the healthy fabric only (the model's
objective), and for the expected step time over healthy (weight ``failures.healthy_weight``) +
failure scenarios. Writes OUT/result.json and OUT/resilience.png.
"""

from __future__ import annotations

import argparse
import os

import jax
import numpy as np
import optax

jax.config.update("jax_enable_x64", True)

from flowmodel import config, optimize, resilience, scenario  # noqa: E402
from flowmodel.plots import new_figure, save_figure  # noqa: E402
from flowmodel.results import write_json  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/gw_regional_ring.yaml")
    ap.add_argument("--out", default="out/resilience")
    args = ap.parse_args()

    sc = config.load(args.config)
    if sc.failures is None or sc.optimize is None or not sc.training:
        raise SystemExit(f"{args.config}: needs a training job and failures and optimize sections")
    f, o = sc.failures, sc.optimize
    model = scenario.prepare(sc)
    scenarios = resilience.failure_scenarios(model)
    report = resilience.evaluate_failures(model, scenarios, healthy_weight=f.weight_of_healthy)
    job = sc.training[0].name
    t = report.step_times[job]
    print(f"\n{sc.name}: {job}, healthy {report.healthy[job]:.4f} s")
    for name, value in zip(report.scenarios, t):
        print(f"  {name:<28} {value:>8.4f} s  ({value / report.healthy[job] - 1:+.1%})")
    print(f"  healthy and failures weighed: expected {report.expected[job]:.4f} s, p99 {report.p99[job]:.4f} s, "
          f"worst {report.worst[job][0]}")

    space = optimize.Space(model.info, o.knobs, o.cost)
    groups = [k.group for k in o.knobs]
    plain = model.objective()
    aware_objective, aware_exact, lost = resilience.expected_objective(model, scenarios, groups,
                                                                       healthy_weight=f.weight_of_healthy)
    if lost:
        print(f"  left out of the expectation (they disconnect a job): {', '.join(lost)}")
    runs = {}
    for label, (objective, exact) in (("failure-free plan", plain), ("resilience-aware plan",
                                                                      (aware_objective, aware_exact))):
        res = optimize.minimize(objective, model.network, space, exact=exact, budget=o.budget, steps=o.steps,
                                optimizer=optax.adam(o.learning_rate), restarts=o.restarts, seed=o.seed)
        runs[label] = {"parameters": {k: v["value"] for k, v in res.parameters.items()},
                       "healthy_s": plain[1](res.network, {}), "expected_s": aware_exact(res.network, {})}
    budget = "no budget" if o.budget is None else f"budget {o.budget:.6g}"
    print(f"\nplans under {budget}; E = expected over the healthy fabric (weight "
          f"{f.weight_of_healthy:g}) and each failure (weight {f.probability:g})")
    print(f"{'plan':<24} {'healthy s':>10} {'E step s':>11}  " + "  ".join(n.split("/")[1] for n in groups))
    for label, r in runs.items():
        caps = "  ".join(f"{r['parameters'][n] * 8 / 1e12:>{len(n.split('/')[1])}.2f}" for n in groups)
        print(f"{label:<24} {r['healthy_s']:>10.4f} {r['expected_s']:>11.4f}  {caps}  (Tbps)")
    write_json(os.path.join(args.out, "result.json"), {
        "scenario": sc.name, "healthy_s": report.healthy[job], "failures": dict(zip(report.scenarios, t.tolist())),
        "expected_s": report.expected[job], "p99_s": report.p99[job], "worst": report.worst[job],
        "disconnected": report.disconnected[job], "plans": runs})
    plt = new_figure()
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    x = np.arange(len(groups))
    for i, (label, r) in enumerate(runs.items()):
        ax.bar(x + 0.4 * i - 0.2, [r["parameters"][n] * 8 / 1e12 for n in groups], 0.4, label=label)
    ax.set_xticks(x, [n.split("/")[1] for n in groups], fontsize=7)
    ax.set_ylabel("long-haul capacity (Tbps)")
    ax.legend(fontsize=7)
    save_figure(fig, os.path.join(args.out, "resilience.png"))


if __name__ == "__main__":
    main()
