"""Max-min rates on random-ECMP fat-trees: flowmodel vs SimGrid (and the float64 oracle), same instance.

    PYTHONPATH=. python3 experiments/benchmarks/maxmin_vs_simgrid.py [--instances k8-10k k16-100k]

Instance: k-ary fat-tree, link capacities 50 GB/s x U(0.5, 1.5), distinct random host pairs, one
random ECMP path per pair. Times are medians over repeats on a warm (compiled) kernel; the machine is
shared, so read the ratios. "kernel" uses a prepared incidence and no input validation (the way an
inner loop calls it); "call" is the public ``maxmin_rates`` with validation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from common import median_time, print_table, write_json  # noqa: E402

import flowmodel as fm  # noqa: E402
from flowmodel import _maxmin  # noqa: E402
from flowmodel.peers import simgrid  # noqa: E402


def instance(k: int, flows: int, seed: int = 0):
    ft = fm.fabric.fat_tree(k, heterogeneity=0.5, seed=seed)
    rng = np.random.default_rng(seed + 1)
    src, dst = fm.fabric.random_pairs(ft.num_hosts, flows, rng)
    return ft, src, dst, ft.route(src, dst, rng)


def run(name: str, repeats: int, simgrid_repeats: int, vmap_batch: int, oracle: bool) -> dict:
    k, flows = {"k8-10k": (8, 10_000), "k16-10k": (16, 10_000), "k16-100k": (16, 100_000)}[name]
    ft, src, dst, routes = instance(k, flows)
    out = {"instance": name, "k": k, "flows": flows, "links": ft.num_links}
    members = _maxmin.link_members(routes, ft.num_links)
    r = jnp.asarray(routes)

    rates64 = None
    for dtype in (jnp.float64, jnp.float32):
        cap = jnp.asarray(ft.capacity, dtype)
        ones, inf = jnp.ones(flows, dtype), jnp.full(flows, jnp.inf, dtype)
        kernel = lambda: _maxmin._rates_jit(r, members, cap, ones, inf, _maxmin._CANDIDATES, False)  # noqa: E731
        call = lambda: fm.maxmin_rates(routes, cap)  # noqa: E731
        tag = jnp.dtype(dtype).name
        out[f"kernel_s_{tag}"] = median_time(kernel, repeats)[1]
        out[f"call_s_{tag}"] = median_time(call, repeats)[1]
        rates = np.asarray(kernel(), np.float64)
        if dtype == jnp.float64:
            rates64 = rates
            _, st = fm.maxmin_structure(routes, cap)
            out["passes"] = int(st.num_passes)
        else:
            out["max_rel_diff_f32_vs_f64"] = float(np.max(np.abs(rates - rates64) / rates64))

    if oracle:
        t0 = time.perf_counter()
        ref = fm.reference.maxmin_rates(routes, ft.capacity)
        out["oracle_s"] = time.perf_counter() - t0
        out["max_rel_err_vs_oracle"] = float(np.max(np.abs(rates64 - ref) / ref))
        out["certificate_violations"] = len(fm.reference.maxmin_violations(routes, ft.capacity, rates64))

    if simgrid_repeats and simgrid.available():
        solves = []
        for _ in range(simgrid_repeats):
            sg_rates, solve_s = simgrid.maxmin_rates(routes, ft.capacity, endpoints=(src, dst))
            solves.append(solve_s)
        out["simgrid_s"] = statistics.median(solves)
        out["max_rel_diff_vs_simgrid"] = float(np.max(np.abs(rates64 - sg_rates) / sg_rates))
        for tag in ("float64", "float32"):
            out[f"speedup_vs_simgrid_{tag}"] = out["simgrid_s"] / out[f"kernel_s_{tag}"]

    if vmap_batch:
        rng = np.random.default_rng(7)
        caps = jnp.asarray(ft.capacity * rng.uniform(0.8, 1.2, (vmap_batch, ft.num_links)))
        ones, inf = jnp.ones(flows), jnp.full(flows, jnp.inf)
        batched = jax.jit(jax.vmap(lambda c: _maxmin._rates_jit(r, members, c, ones, inf, _maxmin._CANDIDATES, False)))
        out["vmap_s"] = median_time(lambda: batched(caps), max(1, repeats // 2))[1]
        loop = lambda: [_maxmin._rates_jit(r, members, c, ones, inf, _maxmin._CANDIDATES, False) for c in caps]  # noqa: E731
        out["loop_s"] = median_time(loop, max(1, repeats // 2))[1]
        out["vmap_batch"] = vmap_batch
        out["vmap_speedup_vs_loop"] = out["loop_s"] / out["vmap_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", nargs="+", default=["k8-10k", "k16-10k", "k16-100k"])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--simgrid-repeats", type=int, default=3)
    ap.add_argument("--vmap-batch", type=int, default=64)
    ap.add_argument("--no-oracle", action="store_true")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; medians of {args.repeats} warm runs")
    results = []
    for name in args.instances:
        res = run(name, args.repeats, args.simgrid_repeats, args.vmap_batch, not args.no_oracle)
        results.append(res)
        print(json.dumps(res, indent=1), flush=True)
    for r in results:
        for tag in ("float64", "float32"):
            r[f"kernel_ms_{tag}"] = 1e3 * r[f"kernel_s_{tag}"]
        r["simgrid_ms"] = 1e3 * r.get("simgrid_s", float("nan"))
    print_table(results, [
        ("instance", "instance", ""), ("passes", "passes", "d"), ("f64 ms", "kernel_ms_float64", ".1f"),
        ("f32 ms", "kernel_ms_float32", ".1f"), ("SimGrid ms", "simgrid_ms", ".1f"),
        ("x f64", "speedup_vs_simgrid_float64", ".2f"), ("x f32", "speedup_vs_simgrid_float32", ".2f"),
        ("vmap x", "vmap_speedup_vs_loop", ".2f"), ("vs SimGrid", "max_rel_diff_vs_simgrid", ".1e"),
    ])
    write_json(args.json, results)


if __name__ == "__main__":
    main()
