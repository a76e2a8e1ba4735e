"""ECMP hashing vs E-ECMP with QP scaling vs packet spraying (DSF) on an oversubscribed Clos.

    PYTHONPATH=. python experiments/routing_policies.py [--config configs/dsf_vs_ecmp.yaml] [--out out/routing]
    PYTHONPATH=. python experiments/routing_policies.py --config configs/llama3_24k.yaml --out out/routing_24k

The second runs the study on the 24K preset (Llama 3 405B; ~11 min on 2 CPU cores: every policy
plans and compiles the whole training step, and spray splits each DP flow over every path).

For each policy, the scenario is prepared with that routing policy (the rest of its routing section
- qps, max_paths, site_paths, seed - and its model options as they are): the training job's step
time (exact) and the bus bandwidth of a 1 GiB ring all-reduce over the job's DP groups, all groups
at once, routed by that model's router and timed on the capacity the scenario's constant load
(inference, background) leaves (nccl-tests' busbw = algbw x 2(n-1)/n).
Writes OUT/result.json and OUT/routing.png and prints a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

import jax

jax.config.update("jax_enable_x64", True)

from flowmodel import config, scenario, steptime, traffic  # noqa: E402
from flowmodel.plots import breakdown_bars  # noqa: E402
from flowmodel.results import write_json  # noqa: E402

POLICIES = ("ecmp", "qp_scaling", "spray")
SIZE = float(2**30)


def dp_all_reduce(model: scenario.Model) -> tuple[float, float]:
    """(seconds, busbw) of a 1 GiB ring all-reduce over the first job's DP groups, all at once."""
    job, r = model.plans[0].job, model.scenario.routing
    grid = job.parallelism.grid(job.job_ranks(model.info.num_gpus))  # [dp, pp, cp, tp]
    coll = traffic.all_reduce(grid.transpose(1, 2, 3, 0).reshape(-1, job.parallelism.dp), SIZE)
    options = model.options.exact()
    capacity = steptime.residual_capacity(model.network.capacity, model.fixed_load, model.info)
    seconds = 0.0
    for ph in coll.phases:
        rp = steptime.route_phase(ph, model.router, r.policy, seed=r.seed, qps=r.qps)
        seconds += float(jax.jit(lambda c, lat: steptime.phase_time(rp, c, lat, options))(capacity,
                                                                                          model.network.latency))
    return seconds, coll.bus_bandwidth(seconds)[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/dsf_vs_ecmp.yaml")
    ap.add_argument("--out", default="out/routing")
    args = ap.parse_args()

    base = config.load(args.config)
    rows, breakdowns = [], {}
    for policy in POLICIES:
        model = scenario.prepare(dataclasses.replace(base, routing=dataclasses.replace(base.routing, policy=policy)))
        res = model.evaluate().steps[model.plans[0].job.name]
        seconds, busbw = dp_all_reduce(model)
        rows.append({"policy": policy, "step_time_s": float(res.step_time), "allreduce_s": seconds,
                     "busbw_GBps": busbw / 1e9, "dp_exposed_s": float(res.breakdown["dp"])})
        breakdowns[policy] = {k: float(v) for k, v in res.breakdown.items()}
    job = base.training[0]
    first = rows[0]
    print(f"\n{base.name}: {job.name}, DP groups of {job.parallelism.dp}, 1 GiB all-reduce")
    print(f"{'policy':<12} {'step s':>8} {'vs ecmp':>8} {'AR ms':>8} {'busbw GB/s':>11}")
    for r in rows:
        print(f"{r['policy']:<12} {r['step_time_s']:>8.4f} {r['step_time_s'] / first['step_time_s']:>8.3f} "
              f"{1e3 * r['allreduce_s']:>8.2f} {r['busbw_GBps']:>11.2f}")
    write_json(os.path.join(args.out, "result.json"), {"scenario": base.name, "rows": rows,
                                                       "breakdowns": breakdowns})
    breakdown_bars(breakdowns, os.path.join(args.out, "routing.png"))


if __name__ == "__main__":
    main()
