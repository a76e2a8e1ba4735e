"""Llama 3 405B training step on Meta's 24K-GPU cluster layout (docs/sources.md).

    PYTHONPATH=. python experiments/llama3_step.py [--config configs/llama3_24k.yaml] [--efficiency 0.6]
        [--virtual-stages 4] [--policy ecmp] [--aggregation 7.0] [--out out/llama3_step]

The scenario of ``configs/llama3_24k.yaml`` (the layout of ``fabric.meta_24k()``: 8 GPUs per
NVSwitch domain, 16 per rack, 192 racks per zone, 1:2 rack uplinks, 7:1 at the aggregation tier;
TP8 x PP16 x DP128 on the first 16,384 GPUs, 16M tokens per step). Each flag overrides the
scenario: the job's matmul efficiency and model chunks per pipeline rank, the routing policy, and
the aggregation tier's oversubscription (the second ratio of the site's scale-out Clos); without it
the scenario's own value stays. Prints the step time, its breakdown and the achieved model TFLOP/s
per GPU (6 x parameters x tokens / GPUs / step time), and writes ``OUT/result.json``. On a 2-core
CPU the first evaluation (which compiles the model's program) takes ~40 s and a warm one ~2 s:
every DP ring flow of every stage is simulated.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import jax

jax.config.update("jax_enable_x64", True)

from flowmodel import config, scenario  # noqa: E402
from flowmodel.results import write_json  # noqa: E402

PUBLIC_STEP_S = 6 * 405e9 * 2048 * 8192 / (16_384 * 400e12)  # docs/sources.md: ~6.2 s at ~400 TFLOP/s per GPU


def with_aggregation(site, ratio: float):
    """``site`` with its scale-out Clos's aggregation tier (second ratio) at ``ratio``:1."""
    clos = site.scale_out
    if clos is None or clos.tiers != 3:
        raise SystemExit(f"--aggregation: site {site.name!r} has no 3-tier scale-out Clos")
    over = clos.oversubscription
    first = 1.0 if over is None else over if isinstance(over, (int, float)) else over[0]
    rest = () if over is None or isinstance(over, (int, float)) else tuple(over[2:])
    return dataclasses.replace(site, scale_out=dataclasses.replace(clos, oversubscription=(first, ratio, *rest)))


def overridden(sc: scenario.Scenario, args) -> scenario.Scenario:
    """The scenario with the command line's overrides applied."""
    job = sc.training[0]
    if args.efficiency is not None:
        job = dataclasses.replace(job, efficiency=args.efficiency)
    if args.virtual_stages is not None:
        job = dataclasses.replace(job, parallelism=dataclasses.replace(job.parallelism,
                                                                       virtual_stages=args.virtual_stages))
    sc = dataclasses.replace(sc, training=(job, *sc.training[1:]))
    if args.policy is not None:
        sc = dataclasses.replace(sc, routing=dataclasses.replace(sc.routing, policy=args.policy))
    if args.aggregation is not None:
        sites = tuple(with_aggregation(s, args.aggregation) for s in sc.fleet.sites)
        sc = dataclasses.replace(sc, fleet=dataclasses.replace(sc.fleet, sites=sites))
    return sc


def aggregation_of(sc: scenario.Scenario):
    over = sc.fleet.sites[0].scale_out.oversubscription
    return over if over is None or isinstance(over, (int, float)) else over[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/llama3_24k.yaml")
    ap.add_argument("--efficiency", type=float, default=None, help="matmul efficiency (scenario: 0.6)")
    ap.add_argument("--virtual-stages", type=int, default=None, help="model chunks per pipeline rank (scenario: 4)")
    ap.add_argument("--policy", default=None, choices=["ecmp", "spray", "qp_scaling"], help="(scenario: ecmp)")
    ap.add_argument("--aggregation", type=float, default=None,
                    help="cluster -> aggregation oversubscription (scenario: 7.0)")
    ap.add_argument("--out", default="out/llama3_step")
    args = ap.parse_args()

    sc = overridden(config.load(args.config), args)
    t0 = time.perf_counter()
    model = scenario.prepare(sc)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fleet = jax.block_until_ready(model.evaluate())
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fleet = jax.block_until_ready(model.evaluate())  # the model's compiled program, already built
    warm_s = time.perf_counter() - t0

    plan = model.plans[0]
    job, par = plan.job, plan.job.parallelism
    res = fleet.steps[job.name]
    step = float(res.step_time)
    model_flops = 6 * job.model.params * job.global_batch * job.model.seq_len
    achieved = model_flops / par.size / step / 1e12
    policy, aggregation = sc.routing.policy, aggregation_of(sc)
    print(f"\nLlama 3 405B, TP{par.tp} x PP{par.pp} x DP{par.dp}, {job.micro_batches} micro-batches, "
          f"v={par.virtual_stages}, efficiency {job.efficiency}, {policy}, aggregation {aggregation}:1")
    print(f"step time {step:.3f} s (public ~{PUBLIC_STEP_S:.1f} s); achieved {achieved:.0f} TFLOP/s per GPU (6N)")
    print(f"{'part':<10} {'seconds':>9} {'share':>7}")
    for part, value in res.breakdown.items():
        print(f"{part:<10} {float(value):>9.3f} {float(value) / step:>7.1%}")
    print(f"{'collective':<20} {'ms/call':>9} {'bound ms':>9} {'eff':>6} domain")
    for kind, rep in res.collectives.items():
        print(f"{kind:<20} {1e3 * float(rep['seconds']):>9.3f} {1e3 * float(rep['bound_seconds']):>9.3f} "
              f"{float(rep['efficiency']):>6.3f} {plan.domains[kind]}")
    print(f"(build + plan {build_s:.1f} s, first evaluation {first_s:.1f} s with compilation, warm {warm_s:.2f} s)")
    write_json(os.path.join(args.out, "result.json"), {
        "step_time_s": step, "achieved_tflops_per_gpu": achieved, "public_step_time_s": PUBLIC_STEP_S,
        "breakdown": {k: float(v) for k, v in res.breakdown.items()},
        "by_domain": {k: float(v) for k, v in res.by_domain.items()},
        "collectives": {k: {"seconds": float(v["seconds"]), "bound_seconds": float(v["bound_seconds"]),
                            "domain": plan.domains[k]} for k, v in res.collectives.items()},
        "assumptions": {"efficiency": job.efficiency, "peak_flops": job.peak_flops,
                        "virtual_stages": par.virtual_stages, "policy": policy,
                        "aggregation_oversubscription": aggregation},
    })


if __name__ == "__main__":
    main()
