"""Llama 3 405B training step on Meta's 24K-GPU cluster layout (DOMAIN.md).

    PYTHONPATH=. python experiments/llama3_step.py [--efficiency 0.6] [--virtual-stages 4]
        [--policy ecmp] [--aggregation 7.0] [--out out/llama3_step]

TP8 x PP16 x DP128 on the first 16,384 GPUs of ``fabric.meta_24k()`` (8 GPUs per NVSwitch domain,
16 per rack, 192 racks per zone, 1:2 rack uplinks, 7:1 at the aggregation tier), 16M tokens per step.
Prints the step time, its breakdown and the achieved model TFLOP/s per GPU (6 x parameters x tokens
/ GPUs / step time), and writes ``OUT/result.json``. On a 2-core CPU the first evaluation (which
compiles the plan) takes ~40 s and a warm one ~2 s: every DP ring flow of every stage is simulated.
"""

from __future__ import annotations

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)

from flowmodel import fabric as fb  # noqa: E402
from flowmodel import routing as rt  # noqa: E402
from flowmodel import steptime as st  # noqa: E402
from flowmodel import traffic as tr  # noqa: E402
from flowmodel._io import write_json_atomic  # noqa: E402

PUBLIC_STEP_S = 6 * 405e9 * 2048 * 8192 / (16_384 * 400e12)  # DOMAIN.md: ~6.2 s at ~400 TFLOP/s per GPU


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--efficiency", type=float, default=0.6)
    ap.add_argument("--virtual-stages", type=int, default=4)
    ap.add_argument("--policy", default="ecmp", choices=["ecmp", "spray", "qp_scaling"])
    ap.add_argument("--aggregation", type=float, default=7.0, help="cluster -> aggregation oversubscription")
    ap.add_argument("--out", default="out/llama3_step")
    args = ap.parse_args()

    t0 = time.perf_counter()
    network, info = fb.compile_fabric(fb.build(fb.meta_24k(aggregation_oversubscription=args.aggregation)))
    job = tr.llama3_405b_training(efficiency=args.efficiency, virtual_stages=args.virtual_stages)
    plan = st.plan_training(job, info, rt.Router(info), policy=args.policy)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = st.step_time(plan, network, info=info)
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = st.step_time(plan, network, info=info)  # compiled: the plan's program is cached
    warm_s = time.perf_counter() - t0

    step = float(res.step_time)
    model_flops = 6 * job.model.params * job.global_batch * job.model.seq_len
    achieved = model_flops / job.parallelism.size / step / 1e12
    print(f"\nLlama 3 405B, TP8 x PP16 x DP128, {job.micro_batches} micro-batches, v={args.virtual_stages}, "
          f"efficiency {args.efficiency}, {args.policy}, aggregation {args.aggregation}:1")
    print(f"step time {step:.3f} s (public ~{PUBLIC_STEP_S:.1f} s); achieved {achieved:.0f} TFLOP/s per GPU (6N)")
    print(f"{'part':<10} {'seconds':>9} {'share':>7}")
    for part, value in res.breakdown.items():
        print(f"{part:<10} {float(value):>9.3f} {float(value) / step:>7.1%}")
    print(f"{'collective':<20} {'ms/call':>9} {'bound ms':>9} {'eff':>6} domain")
    for kind, rep in res.collectives.items():
        print(f"{kind:<20} {1e3 * float(rep['seconds']):>9.3f} {1e3 * float(rep['bound_seconds']):>9.3f} "
              f"{float(rep['efficiency']):>6.3f} {rep['domain']}")
    print(f"(build + plan {build_s:.1f} s, first evaluation {first_s:.1f} s with compilation, warm {warm_s:.2f} s)")
    write_json_atomic(os.path.join(args.out, "result.json"), {
        "step_time_s": step, "achieved_tflops_per_gpu": achieved, "public_step_time_s": PUBLIC_STEP_S,
        "breakdown": {k: float(v) for k, v in res.breakdown.items()},
        "by_domain": {k: float(v) for k, v in res.by_domain.items()},
        "collectives": {k: {"seconds": float(v["seconds"]), "bound_seconds": float(v["bound_seconds"]),
                            "domain": v["domain"]} for k, v in res.collectives.items()},
        "assumptions": {"efficiency": args.efficiency, "peak_flops": job.peak_flops,
                        "virtual_stages": args.virtual_stages, "policy": args.policy,
                        "aggregation_oversubscription": args.aggregation},
    })


if __name__ == "__main__":
    main()
