"""Training step-time inflation from concurrent disaggregated inference and background traffic.

    PYTHONPATH=. python experiments/mixed_workloads.py [--config configs/mixed_workloads.yaml]
        [--out out/mixed_workloads]

Evaluates the scenario's training job alone, then with the inference service at increasing request
rates, then with the background classes too (every workload at once, mean-field coupling): each
case is the scenario with its inference and background sections replaced, prepared again (its
routing and model options as they are). Prints the step time, its inflation over training alone,
and one request's KV transfer time; writes OUT/result.json and OUT/mixed_workloads.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

import jax

jax.config.update("jax_enable_x64", True)

from flowmodel import config, scenario  # noqa: E402
from flowmodel.plots import new_figure, save_figure  # noqa: E402
from flowmodel.results import write_json  # noqa: E402

RATES = [0.5, 1.0, 2.0, 4.0, 8.0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/mixed_workloads.yaml")
    ap.add_argument("--out", default="out/mixed_workloads")
    args = ap.parse_args()

    sc = config.load(args.config)
    if not sc.training:
        raise SystemExit(f"{args.config}: needs a training job")
    job = sc.training[0].name

    def run(inference=(), background=()):
        model = scenario.prepare(dataclasses.replace(sc, inference=inference, background=background))
        res = model.evaluate()
        kv = next(iter(res.kv_transfer_s.values()), float("nan"))
        return float(res.steps[job].step_time), float(kv)

    alone, _ = run()
    rows = [{"case": "training alone", "rate": 0.0, "step_time_s": alone, "kv_ms": float("nan")}]
    for rate in RATES:
        serving = tuple(dataclasses.replace(s, requests_per_s=rate) for s in sc.inference)
        for label, bg in (("+ inference", ()), ("+ inference + background", sc.background)):
            t, kv = run(serving, bg)
            rows.append({"case": label, "rate": rate, "step_time_s": t, "kv_ms": 1e3 * kv})
    print(f"\n{sc.name}: {job} with {', '.join(s.name for s in sc.inference)} and "
          f"{', '.join(b.name for b in sc.background)}")
    print(f"{'case':<28} {'req/s':>6} {'step s':>8} {'inflation':>10} {'KV ms':>8}")
    for r in rows:
        print(f"{r['case']:<28} {r['rate']:>6.1f} {r['step_time_s']:>8.4f} {r['step_time_s'] / alone - 1:>+10.1%} "
              f"{r['kv_ms']:>8.2f}")
    write_json(os.path.join(args.out, "result.json"), {"scenario": sc.name, "rows": rows})
    plt = new_figure()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for label in ("+ inference", "+ inference + background"):
        pts = [r for r in rows if r["case"] == label]
        ax.plot([r["rate"] for r in pts], [100 * (r["step_time_s"] / alone - 1) for r in pts], marker="o", label=label)
    ax.set_xlabel("inference requests per second")
    ax.set_ylabel("training step-time inflation (%)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    save_figure(fig, os.path.join(args.out, "mixed_workloads.png"))


if __name__ == "__main__":
    main()
