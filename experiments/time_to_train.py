"""Effective training time and time to train vs cluster size, checkpoint bandwidth and restart time.

    PYTHONPATH=. python experiments/time_to_train.py [--config configs/time_to_train.yaml]
        [--step-time 6.31] [--out out/time_to_train]

First the shipped scenario through ``flowmodel.reliability`` (its fabric, its checkpoint written over
the fabric into each building's storage, its exposures re-routed). Then Llama 3 405B at 16K, 128K and
1M GPUs at the per-GPU interruption rate the Llama 3 run implies (docs/sources.md, "Failures at
scale"), with the analytic model of ``flowmodel.steptime``: the step time is the one flowmodel gives
for the job on the 24K layout (``configs/llama3_24k.yaml``, 6.31 s; README), held fixed as the job
grows by data parallelism (weak scaling: the global batch grows with the GPUs, so the healthy time to
train falls as 1 / GPUs); every GPU interrupts the job; the 5.7 TB checkpoint (14 bytes per parameter)
is written and read at the storage bandwidth (the NICs, 50 GB/s each, are never the bottleneck at
these sizes); a restart is detection + rescheduling + the read. The interval is the exact optimum.
Writes OUT/sizes.csv, OUT/result.json and OUT/time_to_train.png.
"""

from __future__ import annotations

import argparse
import csv
import io
import os

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from flowmodel import config, reliability, scenario  # noqa: E402
from flowmodel import steptime as st  # noqa: E402
from flowmodel.plots import new_figure, save_figure  # noqa: E402
from flowmodel.results import write_bytes, write_json  # noqa: E402
from flowmodel.traffic import llama3_405b  # noqa: E402

DAY = 86400.0
RATE_PER_GPU_DAY = 419 / (16_384 * 54)  # Llama 3: 419 unexpected interruptions, 16,384 GPUs, 54 days
TOKENS = 15e12                          # Llama 3 405B: more than 15 trillion tokens
TOKENS_PER_STEP_16K = 2048 * 8192       # 16M tokens per step on 16,384 GPUs
SIZES = (16_384, 131_072, 1_048_576)
BANDWIDTHS = (0.1e12, 0.3e12, 1e12, 3e12, 10e12)   # bytes/s into storage
RESTARTS = (60.0, 180.0, 420.0, 1800.0)           # detection + rescheduling, s
BASE_BANDWIDTH, BASE_RESTART = 1e12, 420.0        # 1 TB/s; 2 min to detect + 5 min to reschedule


def llama3_at(gpus: int, step_time: float, bandwidth: float, restart: float, *, runs: int = 0) -> dict:
    """Time to train Llama 3 405B on ``gpus`` GPUs (module docstring); with ``runs``, Monte Carlo p50/p90."""
    size = 14 * llama3_405b().params
    checkpoint = size / bandwidth
    rate = gpus * RATE_PER_GPU_DAY / DAY
    steps = int(np.ceil(TOKENS / (TOKENS_PER_STEP_16K * gpus / 16_384)))
    work = steps * step_time
    tau = float(st.optimal_interval(checkpoint, rate))
    wall = float(st.expected_wall_time(work, tau, checkpoint, rate, restart=restart + checkpoint))
    out = {"gpus": gpus, "storage_TBps": bandwidth / 1e12, "restart_s": restart + checkpoint,
           "checkpoint_s": checkpoint, "interruptions_per_day": rate * DAY, "mtbf_min": 1 / rate / 60,
           "interval_min": tau / 60, "young_daly_min": float(st.young_daly(checkpoint, rate)) / 60,
           "healthy_days": work / DAY, "time_to_train_days": wall / DAY, "effective": work / wall}
    if runs:
        t = st.simulate(work, tau, checkpoint, rate, restart=restart + checkpoint, runs=runs, seed=0)
        out.update(p50_days=float(np.percentile(t, 50)) / DAY, p90_days=float(np.percentile(t, 90)) / DAY)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/time_to_train.yaml")
    ap.add_argument("--step-time", type=float, default=6.31, help="Llama 3 405B step time (s) on 16K GPUs")
    ap.add_argument("--out", default="out/time_to_train")
    args = ap.parse_args()

    model = scenario.prepare(config.load(args.config))
    shipped, lines = reliability.report(model)
    print("\n".join(lines))

    sizes = [llama3_at(n, args.step_time, BASE_BANDWIDTH, BASE_RESTART, runs=1000) for n in SIZES]
    print(f"\nLlama 3 405B, {TOKENS:.3g} tokens, {args.step_time} s per step, storage {BASE_BANDWIDTH / 1e12:g} TB/s, "
          f"restart {BASE_RESTART / 60:g} min + the read; {RATE_PER_GPU_DAY:.3e} interruptions per GPU-day")
    print(f"{'GPUs':>9} {'per day':>8} {'MTBF min':>9} {'interval min':>13} {'healthy d':>10} {'expected d':>11} "
          f"{'p50 d':>7} {'p90 d':>7} {'effective':>10}")
    for r in sizes:
        print(f"{r['gpus']:>9,} {r['interruptions_per_day']:>8.1f} {r['mtbf_min']:>9.1f} {r['interval_min']:>13.2f} "
              f"{r['healthy_days']:>10.2f} {r['time_to_train_days']:>11.2f} {r['p50_days']:>7.2f} "
              f"{r['p90_days']:>7.2f} {r['effective']:>10.1%}")
    by_bandwidth = {n: [llama3_at(n, args.step_time, b, BASE_RESTART)["effective"] for b in BANDWIDTHS]
                    for n in SIZES}
    by_restart = {n: [llama3_at(n, args.step_time, BASE_BANDWIDTH, r)["effective"] for r in RESTARTS] for n in SIZES}
    print("\neffective training time vs storage bandwidth (restart 7 min + read) and vs restart (1 TB/s)")
    print(f"{'GPUs':>9} " + " ".join(f"{b / 1e12:>7g}TB/s" for b in BANDWIDTHS) + "   "
          + " ".join(f"{r / 60:>6g}min" for r in RESTARTS))
    for n in SIZES:
        print(f"{n:>9,} " + " ".join(f"{e:>11.1%}" for e in by_bandwidth[n]) + "   "
              + " ".join(f"{e:>9.1%}" for e in by_restart[n]))
    best = llama3_at(SIZES[-1], args.step_time, BANDWIDTHS[-1], RESTARTS[0])
    print(f"\n1M GPUs with {BANDWIDTHS[-1] / 1e12:g} TB/s and {RESTARTS[0] / 60:g}-minute restarts: "
          f"{best['effective']:.1%} effective, {best['time_to_train_days']:.2f} days")

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(sizes[0]))
    writer.writeheader()
    writer.writerows(sizes)
    write_bytes(os.path.join(args.out, "sizes.csv"), buffer.getvalue().encode())
    write_json(os.path.join(args.out, "result.json"), {
        "shipped": shipped, "step_time_s": args.step_time, "rate_per_gpu_day": RATE_PER_GPU_DAY, "sizes": sizes,
        "storage_bandwidth_Bps": list(BANDWIDTHS),
        "effective_vs_bandwidth": {str(n): v for n, v in by_bandwidth.items()}, "restart_s": list(RESTARTS),
        "effective_vs_restart": {str(n): v for n, v in by_restart.items()}})

    plt = new_figure()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for n in SIZES:
        label = f"{n // 1024}K GPUs" if n < 2**20 else f"{n // 2**20}M GPUs"
        left.plot(np.asarray(BANDWIDTHS) / 1e12, by_bandwidth[n], marker="o", label=label)
        right.plot(np.asarray(RESTARTS) / 60, by_restart[n], marker="o", label=label)
    left.set(xscale="log", xlabel="checkpoint storage bandwidth (TB/s)", ylabel="effective training time",
             title=f"restart {BASE_RESTART / 60:g} min + read")
    right.set(xscale="log", xlabel="detection + rescheduling (min)", title=f"storage {BASE_BANDWIDTH / 1e12:g} TB/s")
    for ax in (left, right):
        ax.axhline(0.9, color="grey", lw=0.8, ls="--")
        ax.grid(alpha=0.3)
    left.set_ylim(0, 1)
    left.legend(fontsize=8)
    fig.suptitle("Llama 3 405B at the Llama 3 interruption rate (4.7e-4 per GPU-day)", fontsize=10, y=1.03)
    save_figure(fig, os.path.join(args.out, "time_to_train.png"))
    print(f"\nwrote {args.out}/sizes.csv, result.json, time_to_train.png")


if __name__ == "__main__":
    main()
