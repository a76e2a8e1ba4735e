"""Quickstart: max-min rates on a fat-tree, checked, explained, and differentiated.

    python experiments/quickstart.py [--k 8] [--flows 4000] [--seed 0] [--out out/quickstart_kernels]

Builds a k-ary fat-tree (400 Gbps = 50 GB/s links, +-30% heterogeneity), draws distinct random host
pairs with one random ECMP path each, and computes exact max-min rates. It then checks them against
the float64 oracle and the max-min certificate, reports which tier bottlenecks the flows, and asks the
gradient which tier's capacity buys the most aggregate throughput per byte/s. Writes
``OUT/result.json`` (atomically) and prints a table. This is the kernel-level demo (no scenario):
``flowmodel run configs/quickstart.yaml`` is the campus scenario, and writes ``out/quickstart``.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import flowmodel as fm  # noqa: E402
from flowmodel.peers import fattree  # noqa: E402
from flowmodel.results import write_json  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--flows", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="out/quickstart_kernels")
    args = ap.parse_args()

    ft = fattree.fat_tree(args.k, capacity=50e9, heterogeneity=0.3, seed=args.seed)
    rng = np.random.default_rng(args.seed)
    src, dst = fattree.random_pairs(ft.num_hosts, args.flows, rng)
    routes = ft.route(src, dst, rng)

    t0 = time.perf_counter()
    rates, structure = fm.maxmin_structure(routes, ft.capacity)
    rates = np.asarray(jax.block_until_ready(rates))
    solve_s = time.perf_counter() - t0

    ref = fm.reference.maxmin_rates(routes, ft.capacity)
    violations = fm.reference.maxmin_violations(routes, ft.capacity, rates)
    if violations:
        raise SystemExit("max-min certificate failed: " + "; ".join(violations[:3]))

    tier = ft.tier_of_link()
    bottleneck = np.asarray(structure.bottleneck)
    load = fm.reference.link_loads(routes, rates, ft.num_links)

    # d(total throughput) / d(capacity), summed per tier: where an extra byte/s helps most
    grad = np.asarray(jax.grad(lambda c: jnp.sum(fm.maxmin_rates(routes, c)))(jnp.asarray(ft.capacity)))

    per_tier = {}
    for t, name in enumerate(fattree.TIERS):
        links = tier == t
        per_tier[name] = {
            "links": int(links.sum()),
            "mean_utilisation": float(np.mean(load[links] / ft.capacity[links])),
            "flows_bottlenecked": int(np.sum(tier[bottleneck[bottleneck < ft.num_links]] == t)),
            "throughput_per_capacity": float(grad[links].sum() / links.sum()),
        }

    result = {
        "instance": {"k": args.k, "flows": args.flows, "seed": args.seed, "hosts": ft.num_hosts,
                     "links": ft.num_links},
        "rates_GBps": {q: float(np.percentile(rates, p) / 1e9) for q, p in
                       (("p1", 1), ("p50", 50), ("p99", 99))},
        "total_throughput_GBps": float(rates.sum() / 1e9),
        "passes": int(structure.num_passes),
        "solve_s_first_call": solve_s,
        "max_rel_err_vs_oracle": float(np.max(np.abs(rates - ref) / ref)),
        "certificate": "holds",
        "tiers": per_tier,
    }
    write_json(os.path.join(args.out, "result.json"), result)

    print(f"fat-tree k={args.k}: {ft.num_hosts} hosts, {ft.num_links} links, {args.flows} flows")
    print(f"max-min solve: {structure.num_passes} passes, {solve_s:.2f} s incl. compilation; "
          f"vs oracle {result['max_rel_err_vs_oracle']:.1e}; certificate holds")
    print(f"rate p1/p50/p99: {result['rates_GBps']['p1']:.2f} / {result['rates_GBps']['p50']:.2f} / "
          f"{result['rates_GBps']['p99']:.2f} GB/s; total {result['total_throughput_GBps']:.0f} GB/s")
    print(f"\n{'tier':10} {'links':>6} {'util':>6} {'bottlenecks':>11} {'d total / d capacity':>21}")
    for name, row in per_tier.items():
        print(f"{name:10} {row['links']:6d} {row['mean_utilisation']:6.2f} {row['flows_bottlenecked']:11d}"
              f" {row['throughput_per_capacity']:21.3f}")
    print(f"\nwrote {os.path.join(args.out, 'result.json')}")


if __name__ == "__main__":
    main()
