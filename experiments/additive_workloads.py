"""Additive workloads: what each workload class of 2022-2026 does to the others on one fabric.

    PYTHONPATH=. python experiments/additive_workloads.py [--config configs/additive_workloads.yaml]
        [--out out/additive_workloads]

The config is the final mix on one heterogeneous two-building fabric. The experiment adds its
workloads in the order they arrived: pre-training (the first training job), disaggregated inference,
MoE training (the other training jobs), RL post-training, agentic inference. After each addition it
prepares the scenario with the workloads so far and reports every workload's step time (a request's
latency for the services), and the mean utilisation of every link tier by traffic class (each
workload's average load: bytes per step over its step time, a service's bytes per request times its
rate). Writes OUT/result.json, OUT/additive_workloads.png and prints both tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from flowmodel import config, scenario  # noqa: E402
from flowmodel.plots import new_figure, save_figure  # noqa: E402
from flowmodel.results import write_json  # noqa: E402
from flowmodel.steptime import average_load, constant_load, plan_bytes  # noqa: E402

LABELS = ("pre-training", "+ disaggregated inference", "+ MoE training", "+ RL post-training", "+ agentic inference")


def stages(sc: scenario.Scenario) -> list[tuple[str, scenario.Scenario]]:
    """The scenario with its workloads added in turn (one stage per workload class)."""
    if len(sc.training) < 2 or not sc.inference:
        raise SystemExit(f"{sc.name}: needs a pre-training job and an MoE job (training[0], training[1:]) "
                         "and an inference service")
    sections = [{"training": sc.training[:1]}, {"inference": sc.inference}, {"training": sc.training},
                {"rl": sc.rl}, {"agentic": sc.agentic}]
    empty = {"training": (), "inference": (), "background": (), "recommendation": (), "rl": (), "agentic": ()}
    out, so_far = [], dict(empty)
    for label, section in zip(LABELS, sections):
        if not any(section.values()):
            raise SystemExit(f"{sc.name}: the {label.lstrip('+ ')} stage has no workload in the config")
        so_far.update(section)
        out.append((label, dataclasses.replace(sc, **so_far)))
    return out


def class_loads(model: scenario.Model, fleet) -> dict[str, np.ndarray]:
    """float64[L] average bytes/s per traffic class (training, moe, inference, rl, agentic)."""
    L = model.info.num_links
    r = model.scenario.routing
    loads = {}
    times = fleet.every
    for plan in model.all_plans:
        kind = plan.KIND if hasattr(plan, "KIND") else ("moe" if plan.job.model.experts else "training")
        load = np.asarray(average_load(plan, plan_bytes(plan, L), times[plan.job.name].step_time), np.float64)
        loads[kind] = loads.get(kind, np.zeros(L)) + load
    if model.scenario.inference:
        loads["inference"] = constant_load(model.router, model.scenario.inference, policy=r.policy, seed=r.seed,
                                           qps=r.qps)
    return loads


def utilisation(model: scenario.Model, loads: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """tier -> class -> the tier's mean utilisation by that class (its load over the tier's capacity)."""
    capacity = np.asarray(model.network.capacity, np.float64)
    tiers = np.asarray(model.info.tier)
    out = {}
    for tier in dict.fromkeys(tiers.tolist()):
        m = tiers == tier
        out[tier] = {kind: float(load[m].sum() / capacity[m].sum()) for kind, load in loads.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/additive_workloads.yaml")
    ap.add_argument("--out", default="out/additive_workloads")
    args = ap.parse_args()

    sc = config.load(args.config)
    rows = []
    for label, staged in stages(sc):
        model = scenario.prepare(staged)
        fleet = model.evaluate()
        times = {name: float(r.step_time) for name, r in fleet.every.items()}
        util = utilisation(model, class_loads(model, fleet))
        rows.append({"stage": label, "times_s": times, "kv_transfer_s": {k: float(v) for k, v in
                                                                        fleet.kv_transfer_s.items()},
                     "utilisation": util})
        print(f"{label}: " + ", ".join(f"{n} {1e3 * t:.1f} ms" for n, t in times.items()), flush=True)

    names = list(rows[-1]["times_s"])
    kv = list(rows[-1]["kv_transfer_s"])
    print(f"\n{sc.name}: each workload's step time (services: one request's latency), ms")
    print(f"{'stage':<28}" + "".join(f"{n:>14}" for n in names + [f"{k} KV" for k in kv]))
    for r in rows:
        cells = [r["times_s"].get(n) for n in names] + [r["kv_transfer_s"].get(k) for k in kv]
        print(f"{r['stage']:<28}" + "".join(f"{'-' if c is None else f'{1e3 * c:.1f}':>14}" for c in cells))
    final = rows[-1]["utilisation"]
    classes = sorted({k for u in final.values() for k in u})
    print("\nmean utilisation by tier and traffic class, final mix (%)")
    print(f"{'tier':<20}" + "".join(f"{k:>11}" for k in classes) + f"{'total':>9}")
    for tier, u in final.items():
        print(f"{tier:<20}" + "".join(f"{100 * u.get(k, 0.0):>11.2f}" for k in classes)
              + f"{100 * sum(u.values()):>9.2f}")
    write_json(os.path.join(args.out, "result.json"), {"scenario": sc.name, "stages": rows})

    plt = new_figure()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    x = np.arange(len(rows))
    for n in names:
        first = next(i for i, r in enumerate(rows) if n in r["times_s"])
        base = rows[first]["times_s"][n]
        left.plot(x[first:], [100 * (r["times_s"][n] / base - 1) for r in rows[first:]], marker="o", label=n)
    left.set_xticks(x, [r["stage"].lstrip("+ ") for r in rows], rotation=25, ha="right", fontsize=7)
    left.set_ylabel("slowdown since it was added (%)")
    left.legend(fontsize=7)
    left.grid(alpha=0.3)
    bottom = np.zeros(len(final))
    for k in classes:
        v = np.array([100 * u.get(k, 0.0) for u in final.values()])
        right.bar(list(final), v, bottom=bottom, label=k)
        bottom += v
    right.set_ylabel("mean utilisation, final mix (%)")
    right.tick_params(axis="x", labelsize=7, rotation=25)
    right.legend(fontsize=7)
    save_figure(fig, os.path.join(args.out, "additive_workloads.png"))


if __name__ == "__main__":
    main()
