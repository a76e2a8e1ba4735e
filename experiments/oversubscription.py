"""Aggregation-tier oversubscription 1:1 ... 16:1: step time against cost, with the optimizer's choice.

    PYTHONPATH=. python experiments/oversubscription.py [--config configs/dsf_vs_ecmp.yaml]
        [--group hall/spine_up] [--price 1.0] [--budget-ratio 3.0] [--out out/oversubscription]

Prepares the scenario once and sweeps the group's ratio over its step time (one vmapped call over
every point, exact rates, the scenario's other model options), prices the uplinks at ``--price``
per Gbit/s, then lets the optimizer (the model's objective: smooth search, exact report) choose the
ratio within the budget that ratio ``--budget-ratio`` would cost. Writes OUT/result.json and
OUT/oversubscription.png.
"""

from __future__ import annotations

import argparse
import os

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from flowmodel import config, fabric, optimize, scenario, sweep  # noqa: E402
from flowmodel.plots import new_figure, save_figure  # noqa: E402
from flowmodel.results import write_json  # noqa: E402

RATIOS = [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/dsf_vs_ecmp.yaml")
    ap.add_argument("--group", default="hall/spine_up")
    ap.add_argument("--price", type=float, default=1.0)
    ap.add_argument("--budget-ratio", type=float, default=3.0)
    ap.add_argument("--out", default="out/oversubscription")
    args = ap.parse_args()

    model = scenario.prepare(config.load(args.config))
    info = model.info
    if args.group not in info.groups:
        raise SystemExit(f"--group: unknown link group {args.group!r}; known: {', '.join(sorted(info.groups))}")
    tier = str(info.tier[info.groups[args.group].links[0]])
    space = optimize.Space(info, (optimize.Knob(args.group, 1.0, 16.0),), optimize.CostModel({tier: args.price}))
    a, b = space.cost_line()

    def cost(ratio):
        return a + float(b[0] * space.positions({args.group: ratio})[0])

    exact_options = model.options.exact()
    table = sweep.sweep(lambda p: {"step_time_s": model.step_time(
        fabric.apply_groups(model.network, info, {args.group: p["ratio"]}), exact_options)},
        {"ratio": np.array(RATIOS)})
    costs = [cost(r) for r in RATIOS]
    budget = cost(args.budget_ratio)
    objective, exact = model.objective()
    res = optimize.minimize(objective, model.network, space, exact=exact, budget=budget, steps=60)
    chosen = res.parameters[args.group]["value"]

    print(f"\n{model.scenario.name}: {args.group} ({tier}), price {args.price} per Gbit/s")
    print(f"{'ratio':>6} {'cost':>12} {'step s':>8}")
    for r, c, t in zip(RATIOS, costs, table["step_time_s"]):
        print(f"{r:>6.1f} {c:>12.6g} {t:>8.4f}")
    print(f"optimizer, budget {budget:.6g} (= {args.budget_ratio}:1): ratio {chosen:.3f}, step {res.optimized:.4f} s")
    write_json(os.path.join(args.out, "result.json"), {
        "group": args.group, "ratios": RATIOS, "costs": costs, "step_time_s": table["step_time_s"].tolist(),
        "budget": budget, "optimizer": {"ratio": chosen, "step_time_s": res.optimized, "cost": res.cost}})
    plt = new_figure()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(costs, table["step_time_s"], marker="o")
    for r, c, t in zip(RATIOS, costs, table["step_time_s"]):
        ax.annotate(f"{r:g}:1", (c, t), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.plot([res.cost], [res.optimized], marker="*", markersize=14, color="C3", label="optimizer (budget)")
    ax.set_xlabel("uplink cost")
    ax.set_ylabel("step time (s)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    save_figure(fig, os.path.join(args.out, "oversubscription.png"))


if __name__ == "__main__":
    main()
