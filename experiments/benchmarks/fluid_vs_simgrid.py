"""Fluid completion times on a random-ECMP fat-tree: flowmodel vs SimGrid (and the oracle), same instance.

    PYTHONPATH=. python3 experiments/benchmarks/fluid_vs_simgrid.py [--k 8] [--flows 10000] [--oracle-flows 1000]

Instance: k-ary fat-tree, capacities 50 GB/s x U(0.5, 1.5), distinct random host pairs with one random
ECMP path each, sizes log-uniform in 1 MB - 1 GB (all distinct), all starting at 0. SimGrid re-solves
at every completion. flowmodel's two engines: ``host`` (the compiled CPU event loop: after a completion
it re-fills only the flows its sequential solve froze since the completed flow's step) and ``xla`` (the
JAX loop: resumes the water-filling at the pass where the completed flow's bottleneck froze, from a
snapshot). Also a collective-shaped case: one ring all-reduce step over 1,024 GPUs (homogeneous k=16),
where all flows are equal and finish in one event.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from common import median_time, print_table, write_json  # noqa: E402

import flowmodel as fm  # noqa: E402
from flowmodel.kernels import event_count  # noqa: E402
from flowmodel.peers import fattree, simgrid  # noqa: E402


def instance(k, flows, seed=0):
    ft = fattree.fat_tree(k, heterogeneity=0.5, seed=seed)
    rng = np.random.default_rng(seed + 1)
    src, dst = fattree.random_pairs(ft.num_hosts, flows, rng)
    routes = ft.route(src, dst, rng)
    sizes = np.round(np.exp(rng.uniform(np.log(1e6), np.log(1e9), flows)))
    return ft, src, dst, routes, sizes


ENGINES = ("host", "xla")


def time_engines(res, routes, sizes, cap, repeats, xla_repeats):
    """Median seconds of ``fm.completion_events`` per engine (first call not timed); host finish times."""
    finish = {}
    for engine in ENGINES:
        fn = lambda: fm.completion_events(routes, sizes, cap, engine=engine)  # noqa: E731
        (finish[engine], events), res[f"{engine}_s"] = median_time(fn, repeats if engine == "host" else xla_repeats)
        res[f"events_{engine}"] = event_count(events)
    res["events"] = res["events_host"]
    res["max_rel_diff_host_vs_xla"] = float(np.max(np.abs(np.asarray(finish["host"]) - np.asarray(finish["xla"]))
                                                   / np.asarray(finish["xla"])))
    return np.asarray(finish["host"])


def peer(res, routes, sizes, cap, src, dst, finish):
    theirs, res["simgrid_s"] = simgrid.completion_times(routes, sizes, cap, endpoints=(src, dst))
    res["max_rel_diff_vs_simgrid"] = float(np.max(np.abs(finish - theirs) / theirs))
    for engine in ENGINES:
        res[f"x_simgrid_{engine}"] = res["simgrid_s"] / res[f"{engine}_s"]


def run_random(k, flows, repeats, xla_repeats, use_simgrid):
    ft, src, dst, routes, sizes = instance(k, flows)
    res = {"case": f"k{k}-{flows}", "flows": flows}
    finish = time_engines(res, routes, sizes, ft.capacity, repeats, xla_repeats)
    if use_simgrid and simgrid.available():
        peer(res, routes, sizes, ft.capacity, src, dst, finish)
    return res, (routes, sizes, ft.capacity, finish)


def run_ring(repeats, use_simgrid):
    ft = fattree.fat_tree(16, heterogeneity=0.0)  # homogeneous: every ring flow gets the same rate
    n = ft.num_hosts  # 1,024 GPUs, one per host
    src = np.arange(n)
    dst = (src + 1) % n
    routes = ft.route(src, dst, np.random.default_rng(4))
    sizes = np.full(n, 2 * 1024**3 / n)  # one reduce-scatter step of a 2 GiB all-reduce
    res = {"case": "ring-1024", "flows": n}
    finish = time_engines(res, routes, sizes, ft.capacity, repeats, repeats)
    if use_simgrid and simgrid.available():
        peer(res, routes, sizes, ft.capacity, src, dst, finish)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--flows", type=int, default=10_000)
    ap.add_argument("--oracle-flows", type=int, default=1000, help="size of the instance checked against the oracle")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--xla-repeats", type=int, default=1, help="repeats of the XLA engine on the large instance")
    ap.add_argument("--no-simgrid", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    results = []

    small, (routes, sizes, cap, finish) = run_random(args.k, args.oracle_flows, args.repeats, args.repeats,
                                                     not args.no_simgrid)
    t0 = time.perf_counter()
    ref = fm.reference.completion_times(routes, sizes, cap)
    small["oracle_s"] = time.perf_counter() - t0
    small["max_rel_err_vs_oracle"] = float(np.max(np.abs(finish - ref) / ref))
    results.append(small)
    print(json.dumps(small), flush=True)
    big, _ = run_random(args.k, args.flows, args.repeats, args.xla_repeats, not args.no_simgrid)
    results.append(big)
    print(json.dumps(big), flush=True)
    ring = run_ring(args.repeats, not args.no_simgrid)
    results.append(ring)
    print(json.dumps(ring), flush=True)

    print_table(results, [
        ("case", "case", ""), ("flows", "flows", "d"), ("events", "events", "d"), ("host s", "host_s", ".3f"),
        ("xla s", "xla_s", ".3f"), ("SimGrid s", "simgrid_s", ".3f"), ("x SG host", "x_simgrid_host", ".2f"),
        ("x SG xla", "x_simgrid_xla", ".2f"), ("host/xla", "max_rel_diff_host_vs_xla", ".1e"),
        ("vs SimGrid", "max_rel_diff_vs_simgrid", ".1e"), ("vs oracle", "max_rel_err_vs_oracle", ".1e"),
    ])
    write_json(args.json, results)


if __name__ == "__main__":
    main()
