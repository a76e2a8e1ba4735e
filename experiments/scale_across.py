"""Data parallelism across 2-5 buildings and regions 100-2,000 km apart: step time against long-haul
capacity and distance, for ring and tree gradient all-reduce; and what a transport window does to it.

    PYTHONPATH=. python experiments/scale_across.py [--out out/scale_across]

Each site: 64 GPUs (8-GPU NVSwitch domains, a 2-tier 400 Gbps Clos); sites on a ring with equal
segments; one TP8 x DP(8 x sites) job of an 8B-class model; 2 us per-step latency. Each (site count,
distance, algorithm) is one scenario, prepared once; one vmapped sweep of its step time over the
long-haul capacity. Then, for 2 sites at 1.6 Tbps (ring), the step time when every flow's bytes in
flight are limited to a window (rate <= window / RTT, ``steptime.Congestion`` in the model options).
Writes OUT/result.json and OUT/scale_across.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from flowmodel import fabric as fb  # noqa: E402
from flowmodel import scenario, steptime, sweep  # noqa: E402
from flowmodel import traffic as tr  # noqa: E402
from flowmodel.plots import new_figure, save_figure  # noqa: E402
from flowmodel.results import write_json  # noqa: E402

MODEL = tr.Model("8b-class", layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, vocab=128256,
                 seq_len=8192)
SITE = fb.Clos(tiers=2, gpus_per_leaf=16, leaves_per_pod=4, spines_per_pod=4, latency=1e-6)
OPTIONS = steptime.Options(step_latency=2e-6)
CAPACITIES = np.array([0.4e12, 1.6e12, 6.4e12]) / 8  # bytes/s for 0.4, 1.6, 6.4 Tbps
DISTANCES = (100.0, 500.0, 1000.0, 2000.0)  # km between neighbouring sites
WINDOWS = (None, 256e6, 64e6, 16e6)  # bytes in flight per flow


def study(sites: int, km: float, capacity: float, algorithm: str = "ring") -> scenario.Scenario:
    """``sites`` sites on a ring of ``km`` segments of ``capacity`` bytes/s, one DP job over all of them."""
    names = [f"s{i}" for i in range(sites)]
    fleet = fb.Fleet(sites=tuple(fb.Site(n, scale_out=SITE, scale_up=fb.ScaleUp(size=8)) for n in names),
                     long_haul=fb.ring(names, capacity=capacity, length_km=km))
    job = tr.Training(MODEL, tr.Parallelism(tp=8, dp=8 * sites), global_batch=16 * sites, algorithm=algorithm,
                      name=f"dp-{algorithm}")
    return scenario.Scenario(f"scale_across_{sites}x{km:g}km", fleet, training=(job,), options=OPTIONS)


def window_rows() -> list[dict]:
    rows = []
    for km in DISTANCES:
        model = scenario.prepare(study(2, km, 1.6e12 / 8))
        for window in WINDOWS:
            congestion = None if window is None else steptime.Congestion(window=window)
            t = model.evaluate(options=dataclasses.replace(model.options, congestion=congestion)).step_time
            rows.append({"km": km, "window_MB": None if window is None else window / 1e6, "step_time_s": float(t)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/scale_across")
    args = ap.parse_args()
    rows = []
    for sites in (2, 3, 5):
        for km in DISTANCES:
            for algorithm in ("ring", "tree"):
                model = scenario.prepare(study(sites, km, CAPACITIES[0], algorithm))
                groups = [g for g in model.info.groups if g.startswith("long_haul/")]
                table = sweep.sweep(lambda p: {"step_time_s": model.step_time(
                    fb.apply_groups(model.network, model.info, {g: p["capacity"] for g in groups}))},
                    {"capacity": CAPACITIES})
                for cap, t in zip(CAPACITIES, table["step_time_s"]):
                    rows.append({"sites": sites, "km": km, "algorithm": algorithm, "tbps": cap * 8 / 1e12,
                                 "step_time_s": float(t)})
    print(f"\n{'sites':>5} {'km':>6} {'alg':>5} " + " ".join(f"{c * 8 / 1e12:>7.1f}T" for c in CAPACITIES))
    for sites in (2, 3, 5):
        for km in DISTANCES:
            for algorithm in ("ring", "tree"):
                ts = [r["step_time_s"] for r in rows if (r["sites"], r["km"], r["algorithm"]) == (sites, km, algorithm)]
                print(f"{sites:>5} {km:>6.0f} {algorithm:>5} " + " ".join(f"{t:>8.3f}" for t in ts))
    windows = window_rows()
    print("\n2 sites, ring, 1.6 Tbps: step time (s) with a window of bytes in flight per flow")
    print(f"{'km':>6} " + " ".join(f"{'none' if w is None else f'{w / 1e6:.0f} MB':>8}" for w in WINDOWS))
    for km in DISTANCES:
        print(f"{km:>6.0f} " + " ".join(f"{r['step_time_s']:>8.3f}" for r in windows if r["km"] == km))
    write_json(os.path.join(args.out, "result.json"), {"capacity_sweep": rows, "windows": windows})
    plt = new_figure()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for sites, style in ((2, "-"), (5, "--")):
        for algorithm, color in (("ring", "C0"), ("tree", "C1")):
            pts = [r for r in rows if r["sites"] == sites and r["algorithm"] == algorithm and r["tbps"] == 1.6]
            ax.plot([r["km"] for r in pts], [r["step_time_s"] for r in pts], style, color=color, marker="o",
                    label=f"{sites} sites, {algorithm}")
    ax.set_xlabel("distance between neighbouring sites (km)")
    ax.set_ylabel("step time at 1.6 Tbps (s)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    save_figure(fig, os.path.join(args.out, "scale_across.png"))


if __name__ == "__main__":
    main()
