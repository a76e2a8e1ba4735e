"""Max-min rates on random-ECMP fat-trees: flowmodel vs SimGrid (and the float64 oracle), same instance.

    PYTHONPATH=. python3 experiments/benchmarks/maxmin_vs_simgrid.py [--instances k8-10k k16-100k]

Instance: k-ary fat-tree, link capacities 50 GB/s x U(0.5, 1.5), distinct random host pairs, one
random ECMP path per pair. Times are medians over repeats on a warm (compiled) kernel; the machine is
shared, so read the ratios. The calls timed, all of the public ``fm.maxmin_rates``:
  kernel     with a prepared ``fm.incidence`` and ``check=False`` (the way an inner loop calls it)
  call       with a prepared incidence and input validation: the eager figure
  call_noinc without one: it builds the link-membership table (NumPy) in every call
  jit        inside a user's ``jax.jit`` with routes and the prepared incidence as arguments
  jit_dense  inside a user's ``jax.jit`` with routes as an argument and no incidence: the dense solve
``jit / call`` is the ratio of the jit and the eager figures. SimGrid (the python3-simgrid Debian
package) is included when it imports, else skipped.
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
from flowmodel.peers import fattree, simgrid  # noqa: E402


def instance(k: int, flows: int, seed: int = 0):
    ft = fattree.fat_tree(k, heterogeneity=0.5, seed=seed)
    rng = np.random.default_rng(seed + 1)
    src, dst = fattree.random_pairs(ft.num_hosts, flows, rng)
    return ft, src, dst, ft.route(src, dst, rng)


def run(name: str, repeats: int, simgrid_repeats: int, vmap_batch: int, oracle: bool) -> dict:
    k, flows = {"k8-10k": (8, 10_000), "k16-10k": (16, 10_000), "k16-100k": (16, 100_000)}[name]
    ft, src, dst, routes = instance(k, flows)
    out = {"instance": name, "k": k, "flows": flows, "links": ft.num_links}
    inc, out["incidence_s"] = median_time(lambda: fm.incidence(routes, ft.num_links), repeats)
    out["degree_width"] = int(inc.members.shape[1])
    r = jnp.asarray(routes)
    in_jit = jax.jit(lambda r, c, inc: fm.maxmin_rates(r, c, incidence=inc))
    dense_jit = jax.jit(lambda r, c: fm.maxmin_rates(r, c))

    rates64 = None
    for dtype in (jnp.float64, jnp.float32):
        cap = jnp.asarray(ft.capacity, dtype)
        tag = jnp.dtype(dtype).name
        timed = {
            "kernel": lambda: fm.maxmin_rates(r, cap, incidence=inc, check=False),
            "call": lambda: fm.maxmin_rates(routes, cap, incidence=inc),
            "call_noinc": lambda: fm.maxmin_rates(routes, cap),
            "jit": lambda: in_jit(r, cap, inc),
        }
        for key, fn in timed.items():
            out[f"{key}_s_{tag}"] = median_time(fn, repeats)[1]
        out[f"jit_over_call_{tag}"] = out[f"jit_s_{tag}"] / out[f"call_s_{tag}"]
        rates = np.asarray(in_jit(r, cap, inc), np.float64)
        if dtype == jnp.float64:
            rates64 = rates
            out["jit_dense_s_float64"] = median_time(lambda: dense_jit(r, cap), max(1, repeats // 3))[1]
            _, st = fm.maxmin_structure(routes, cap, incidence=inc)
            out["passes"] = int(st.num_passes)
            eager = np.asarray(fm.maxmin_rates(routes, cap, incidence=inc))
            out["max_rel_diff_jit_vs_eager"] = float(np.max(np.abs(rates - eager) / eager))
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
    elif simgrid_repeats:
        print(f"{name}: SimGrid is not available (python3-simgrid): peer skipped", flush=True)

    if vmap_batch:
        rng = np.random.default_rng(7)
        caps = jnp.asarray(ft.capacity * rng.uniform(0.8, 1.2, (vmap_batch, ft.num_links)))
        batched = jax.jit(jax.vmap(lambda r, c, inc: fm.maxmin_rates(r, c, incidence=inc), in_axes=(None, 0, None)))
        out["vmap_s"] = median_time(lambda: batched(r, caps, inc), max(1, repeats // 2))[1]
        loop = lambda: [fm.maxmin_rates(r, c, incidence=inc, check=False) for c in caps]  # noqa: E731
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
        for key in ("kernel", "call", "call_noinc", "jit", "jit_dense"):
            for tag in ("float64", "float32"):
                if f"{key}_s_{tag}" in r:
                    r[f"{key}_ms_{tag}"] = 1e3 * r[f"{key}_s_{tag}"]
        r["incidence_ms"] = 1e3 * r["incidence_s"]
        r["simgrid_ms"] = 1e3 * r.get("simgrid_s", float("nan"))
    print_table(results, [
        ("instance", "instance", ""), ("passes", "passes", "d"), ("kernel", "kernel_ms_float64", ".1f"),
        ("call", "call_ms_float64", ".1f"), ("no inc", "call_noinc_ms_float64", ".1f"),
        ("jit", "jit_ms_float64", ".1f"), ("jit/call", "jit_over_call_float64", ".2f"),
        ("jit dense", "jit_dense_ms_float64", ".1f"), ("incidence", "incidence_ms", ".1f"),
        ("SimGrid", "simgrid_ms", ".1f"), ("x kernel", "speedup_vs_simgrid_float64", ".2f"),
        ("vs SimGrid", "max_rel_diff_vs_simgrid", ".1e"),
    ])
    print("float64 ms above; float32:")
    print_table(results, [
        ("instance", "instance", ""), ("kernel", "kernel_ms_float32", ".1f"), ("call", "call_ms_float32", ".1f"),
        ("no inc", "call_noinc_ms_float32", ".1f"), ("jit", "jit_ms_float32", ".1f"),
        ("jit/call", "jit_over_call_float32", ".2f"), ("x kernel", "speedup_vs_simgrid_float32", ".2f"),
        ("vmap x", "vmap_speedup_vs_loop", ".2f"),
    ])
    write_json(args.json, results)


if __name__ == "__main__":
    main()
