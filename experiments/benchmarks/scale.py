"""Scale: build, compile, evaluate and differentiate one DP step across a fleet; sweep throughput.

    PYTHONPATH=. python3 experiments/benchmarks/scale.py [--sizes 1k 24k] [--sweep 16] [--json FILE]

Fleets: ``1k`` (two 512-GPU buildings, 30 km), ``24k`` (Meta's 24K layout, one site), ``129k``
(five 25,600-GPU buildings on a campus ring, docs/sources.md "Larger fleets"), ``gw`` (four 25,600-GPU
sites on a regional ring, 100 - 2,000 km segments). Job: TP8 inside each NVSwitch
domain, DP over every GPU (ring all-reduce of an 8B-class model's gradients, overlapped with the
backward pass). Prints build, first-call (compile + run), warm forward and gradient times (the
gradient with respect to every link capacity), peak resident memory, and the throughput of a
``flowmodel.sweep`` over long-haul capacities against a Python loop of single evaluations.
"""

from __future__ import annotations

import argparse
import resource
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from common import print_table, write_json  # noqa: E402

from flowmodel import fabric as fb  # noqa: E402
from flowmodel import scenario, sweep  # noqa: E402
from flowmodel import traffic as tr  # noqa: E402

MODEL = tr.Model("8b-class", layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, vocab=128256,
                 seq_len=8192)


def fleet(name: str) -> fb.Fleet:
    su = fb.ScaleUp(size=8)
    if name == "1k":
        clos = fb.Clos(tiers=3, pods=2, aggs_per_plane=2, oversubscription=(1.0, 4.0))
        return fb.Fleet(sites=(fb.Site("a", scale_out=clos, scale_up=su), fb.Site("b", scale_out=clos, scale_up=su)),
                        long_haul=(fb.LongHaul("a", "b", 3.2e12 / 8, 30.0),))
    if name == "24k":
        return fb.meta_24k()
    clos = fb.Clos(tiers=3, gpus_per_leaf=16, leaves_per_pod=100, spines_per_pod=16, pods=16, aggs_per_plane=4,
                   oversubscription=(1.0, 4.0))
    if name == "gw":  # four 25,600-GPU sites on a regional ring, 100 - 2,000 km apart
        names = [f"r{i}" for i in range(4)]
        return fb.Fleet(sites=tuple(fb.Site(n, scale_out=clos, scale_up=su) for n in names),
                        long_haul=fb.ring(names, capacity=51.2e12 / 8, length_km=[100.0, 800.0, 2000.0, 400.0]))
    names = [f"b{i}" for i in range(5)]
    return fb.Fleet(sites=tuple(fb.Site(n, scale_out=clos, scale_up=su) for n in names),
                    long_haul=fb.ring(names, capacity=25.6e12 / 8, length_km=2.0))


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run(name: str, sweep_points: int) -> dict:
    row = {"fleet": name}
    t0 = time.perf_counter()
    spec = fleet(name)
    gpus = spec.num_gpus
    job = tr.Training(MODEL, tr.Parallelism(tp=8, dp=gpus // 8), global_batch=gpus // 8)
    model = scenario.prepare(scenario.Scenario(name, spec, training=(job,)))
    network, info = model.network, model.info
    row.update(gpus=gpus, links=info.num_links, dp_flows=model.plans[0].dp.sub.routes.shape[0],
               build_s=time.perf_counter() - t0)

    @jax.jit
    def forward(capacity):
        return model.step_time(fb.Network(capacity=capacity, latency=network.latency))

    t0 = time.perf_counter()
    step = float(forward(network.capacity))
    row["first_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    float(forward(network.capacity))
    row["forward_s"] = time.perf_counter() - t0
    grad = jax.jit(jax.grad(forward))
    jax.block_until_ready(grad(network.capacity))
    t0 = time.perf_counter()
    jax.block_until_ready(grad(network.capacity))
    row["grad_s"] = time.perf_counter() - t0
    row["grad_ratio"] = row["grad_s"] / row["forward_s"]
    row["step_s"] = step
    groups = [g for g in info.groups if g.startswith("long_haul/")] or [f"{info.site_of(0)}/spine_up"]
    if sweep_points:
        values = np.linspace(0.5, 2.0, sweep_points) * info.groups[groups[0]].value

        def evaluate(p):
            return {"step": model.step_time(fb.apply_groups(network, info, {g: p["value"] for g in groups}))}

        sweep.sweep(evaluate, {"value": values[:2]})  # compile
        t0 = time.perf_counter()
        sweep.sweep(evaluate, {"value": values})
        row["sweep_per_s"] = sweep_points / (time.perf_counter() - t0)
        one = jax.jit(evaluate)
        float(one({"value": values[0]})["step"])  # compile
        t0 = time.perf_counter()
        for v in values:
            float(one({"value": v})["step"])
        row["loop_per_s"] = sweep_points / (time.perf_counter() - t0)
        row["sweep_vs_loop"] = row["sweep_per_s"] / row["loop_per_s"]
    row["peak_gib"] = peak_gib()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["1k"])
    ap.add_argument("--sweep", type=int, default=16)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = [run(name, args.sweep) for name in args.sizes]
    print_table(rows, [("fleet", "fleet", ""), ("GPUs", "gpus", "d"), ("DP flows", "dp_flows", "d"),
                       ("build s", "build_s", ".1f"), ("first s", "first_s", ".1f"), ("fwd s", "forward_s", ".2f"),
                       ("grad s", "grad_s", ".2f"), ("grad/fwd", "grad_ratio", ".2f"), ("step s", "step_s", ".3f"),
                       ("sweep/s", "sweep_per_s", ".2f"), ("loop/s", "loop_per_s", ".2f"),
                       ("sweep/loop", "sweep_vs_loop", ".2f"), ("peak GiB", "peak_gib", ".1f")])
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
