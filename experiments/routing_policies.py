"""ECMP hashing vs E-ECMP with QP scaling vs packet spraying (DSF) on an oversubscribed Clos.

    PYTHONPATH=. python experiments/routing_policies.py [--config configs/dsf_vs_ecmp.yaml] [--out out/routing]
    PYTHONPATH=. python experiments/routing_policies.py --config configs/llama3_24k.yaml --out out/routing_24k

The second runs the study on the 24K preset (Llama 3 405B; ~11 min on 2 CPU cores: every policy
plans and compiles the whole training step, and spray splits each DP flow over every path).

For each policy: the training job's step time (exact) and the bus bandwidth of a 1 GiB ring
all-reduce over the job's DP groups, all groups at once (nccl-tests' busbw = algbw x 2(n-1)/n).
Writes OUT/result.json and OUT/routing.png and prints a table.
"""

from __future__ import annotations

import argparse
import os

import jax

jax.config.update("jax_enable_x64", True)

from flowmodel import config, fabric, routing, steptime, traffic  # noqa: E402
from flowmodel._io import write_json_atomic  # noqa: E402
from flowmodel.plots import breakdown_bars  # noqa: E402

POLICIES = ("ecmp", "qp_scaling", "spray")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/dsf_vs_ecmp.yaml")
    ap.add_argument("--out", default="out/routing")
    args = ap.parse_args()

    scenario = config.load(args.config)
    network, info = fabric.compile_fabric(fabric.build(scenario.fleet))
    router = routing.Router(info, max_paths=scenario.routing["max_paths"])
    job = scenario.training[0]
    grid = job.parallelism.grid(job.job_ranks(info.num_gpus))
    dp_groups = grid.transpose(1, 2, 3, 0).reshape(-1, job.parallelism.dp)
    size = float(2**30)
    rows, breakdowns = [], {}
    for policy in POLICIES:
        plan = steptime.plan_training(job, info, router, policy=policy, qps=scenario.routing["qps"])
        res = steptime.step_time(plan, network, alpha=scenario.alpha, congestion=scenario.congestion)
        coll = traffic.all_reduce(dp_groups, size)
        seconds = sum(float(steptime.phase_time(steptime.route_phase(ph, router, policy, qps=scenario.routing["qps"]),
                                                network.capacity, network.latency)) for ph in coll.phases)
        algbw, busbw = coll.bus_bandwidth(seconds)
        rows.append({"policy": policy, "step_time_s": float(res.step_time), "allreduce_s": seconds,
                     "busbw_GBps": busbw / 1e9, "dp_exposed_s": float(res.breakdown["dp"])})
        breakdowns[policy] = {k: float(v) for k, v in res.breakdown.items()}
    base = rows[0]
    print(f"\n{scenario.name}: {job.name}, DP groups of {job.parallelism.dp}, 1 GiB all-reduce")
    print(f"{'policy':<12} {'step s':>8} {'vs ecmp':>8} {'AR ms':>8} {'busbw GB/s':>11}")
    for r in rows:
        print(f"{r['policy']:<12} {r['step_time_s']:>8.4f} {r['step_time_s'] / base['step_time_s']:>8.3f} "
              f"{1e3 * r['allreduce_s']:>8.2f} {r['busbw_GBps']:>11.2f}")
    write_json_atomic(os.path.join(args.out, "result.json"), {"scenario": scenario.name, "rows": rows,
                                                              "breakdowns": breakdowns})
    breakdown_bars(breakdowns, os.path.join(args.out, "routing.png"))


if __name__ == "__main__":
    main()
