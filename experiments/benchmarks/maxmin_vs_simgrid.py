"""Max-min rates on random-ECMP fat-trees: flowmodel's two engines vs SimGrid (and the oracle), same instance.

    PYTHONPATH=. python3 experiments/benchmarks/maxmin_vs_simgrid.py [--instances k8-10k k16-10k k16-100k]

Instance: k-ary fat-tree, link capacities 50 GB/s x U(0.5, 1.5), distinct random host pairs, one
random ECMP path per pair. Times are medians over repeats on warm (compiled) kernels; the machine is
shared, so read the ratios. Per engine (``host``: the compiled CPU solve; ``xla``: the JAX
water-filling), the calls timed, all of the public ``fm.maxmin_rates`` in float64:
  kernel   with a prepared ``fm.incidence`` and ``check=False`` (the way an inner loop calls it)
  call     with a prepared incidence and input validation: the eager figure
  jit      inside a user's ``jax.jit`` with routes and the prepared incidence as arguments
  jit_r    inside a user's ``jax.jit`` with routes as an argument and no incidence (xla: the dense solve)
Batched: ``--batch`` capacity scenarios (per instance: 64 on k8-10k, 256 on k16-10k, 16 on k16-100k),
``jax.jit(jax.vmap(...))`` against a Python loop of single calls (kernel form), and the per-scenario
time against one SimGrid solve. SimGrid (the python3-simgrid Debian package) runs in the same process
when it imports, else it is skipped.
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

INSTANCES = {"k8-10k": (8, 10_000, 64), "k16-10k": (16, 10_000, 256), "k16-100k": (16, 100_000, 16)}
ENGINES = ("host", "xla")


def instance(k: int, flows: int, seed: int = 0):
    ft = fattree.fat_tree(k, heterogeneity=0.5, seed=seed)
    rng = np.random.default_rng(seed + 1)
    src, dst = fattree.random_pairs(ft.num_hosts, flows, rng)
    return ft, src, dst, ft.route(src, dst, rng)


def time_engine(engine, routes, cap, inc, repeats):
    """Median seconds of each call form, and the rates of the jitted one."""
    r = jnp.asarray(routes)
    in_jit = jax.jit(lambda r, c, inc: fm.maxmin_rates(r, c, incidence=inc, engine=engine))
    routes_only = jax.jit(lambda r, c: fm.maxmin_rates(r, c, engine=engine))
    out = {}
    timed = {
        "kernel": lambda: fm.maxmin_rates(r, cap, incidence=inc, check=False, engine=engine),
        "call": lambda: fm.maxmin_rates(routes, cap, incidence=inc, engine=engine),
        "jit": lambda: in_jit(r, cap, inc),
        "jit_r": lambda: routes_only(r, cap),
    }
    for key, fn in timed.items():
        reps = repeats if key != "jit_r" or engine == "host" else max(1, repeats // 3)
        out[f"{key}_s_{engine}"] = median_time(fn, reps)[1]
    return out, np.asarray(in_jit(r, cap, inc), np.float64)


def time_batch(engine, routes, cap, inc, batch, repeats):
    rng = np.random.default_rng(7)
    caps = jnp.asarray(cap * rng.uniform(0.8, 1.2, (batch, cap.size)))
    r = jnp.asarray(routes)
    batched = jax.jit(jax.vmap(lambda r, c, inc: fm.maxmin_rates(r, c, incidence=inc, engine=engine),
                               in_axes=(None, 0, None)))
    got, vmap_s = median_time(lambda: batched(r, caps, inc), repeats)
    loop = lambda: [fm.maxmin_rates(r, c, incidence=inc, check=False, engine=engine) for c in caps]  # noqa: E731
    want, loop_s = median_time(loop, repeats)
    diff = float(np.max(np.abs(np.asarray(got) - np.stack([np.asarray(w) for w in want]))))
    return {f"vmap_s_{engine}": vmap_s, f"loop_s_{engine}": loop_s, f"vmap_over_loop_{engine}": loop_s / vmap_s,
            f"vmap_vs_loop_max_abs_diff_{engine}": diff}


def run(name: str, repeats: int, simgrid_repeats: int, batch: int | None, oracle: bool) -> dict:
    k, flows, default_batch = INSTANCES[name]
    batch = default_batch if batch is None else batch
    ft, src, dst, routes = instance(k, flows)
    cap = np.asarray(ft.capacity, np.float64)
    out = {"instance": name, "k": k, "flows": flows, "links": ft.num_links, "batch": batch}
    inc, out["incidence_s"] = median_time(lambda: fm.incidence(routes, ft.num_links), repeats)
    rates = {}
    for engine in ENGINES:
        times, rates[engine] = time_engine(engine, routes, cap, inc, repeats)
        out.update(times)
        out[f"jit_over_call_{engine}"] = out[f"jit_s_{engine}"] / out[f"call_s_{engine}"]
    out["max_rel_diff_host_vs_xla"] = float(np.max(np.abs(rates["host"] - rates["xla"]) / rates["xla"]))
    if oracle:
        t0 = time.perf_counter()
        ref = fm.reference.maxmin_rates(routes, cap)
        out["oracle_s"] = time.perf_counter() - t0
        out["max_rel_err_vs_oracle"] = float(np.max(np.abs(rates["host"] - ref) / ref))
        out["certificate_violations"] = len(fm.reference.maxmin_violations(routes, cap, rates["host"]))
    if simgrid_repeats and simgrid.available():
        solves = []
        for _ in range(simgrid_repeats):
            sg_rates, solve_s = simgrid.maxmin_rates(routes, cap, endpoints=(src, dst))
            solves.append(solve_s)
        out["simgrid_s"] = statistics.median(solves)
        out["max_rel_diff_vs_simgrid"] = float(np.max(np.abs(rates["host"] - sg_rates) / sg_rates))
        for engine in ENGINES:
            for key in ("kernel", "jit"):
                out[f"x_simgrid_{key}_{engine}"] = out["simgrid_s"] / out[f"{key}_s_{engine}"]
    elif simgrid_repeats:
        print(f"{name}: SimGrid is not available (python3-simgrid): peer skipped", flush=True)
    if batch:
        for engine in ENGINES:
            out.update(time_batch(engine, routes, cap, inc, batch, max(1, repeats // 3)))
            if "simgrid_s" in out:
                out[f"x_simgrid_per_scenario_{engine}"] = out["simgrid_s"] * batch / out[f"vmap_s_{engine}"]
    return out


def table(results: list[dict]) -> None:
    rows = []
    for r in results:
        for engine in ENGINES:
            row = {"instance": r["instance"], "engine": engine}
            for key in ("kernel", "call", "jit", "jit_r", "vmap", "loop"):
                if f"{key}_s_{engine}" in r:
                    row[key] = 1e3 * r[f"{key}_s_{engine}"]
            for key in ("x_simgrid_kernel", "x_simgrid_jit", "vmap_over_loop", "x_simgrid_per_scenario"):
                row[key] = r.get(f"{key}_{engine}", float("nan"))
            row["simgrid"] = 1e3 * r.get("simgrid_s", float("nan"))
            row["batch"] = r["batch"]
            rows.append(row)
    print_table(rows, [
        ("instance", "instance", ""), ("engine", "engine", ""), ("kernel ms", "kernel", ".1f"),
        ("call ms", "call", ".1f"), ("jit ms", "jit", ".1f"), ("jit_r ms", "jit_r", ".1f"),
        ("SimGrid ms", "simgrid", ".1f"),
        ("x SG", "x_simgrid_kernel", ".2f"), ("x SG jit", "x_simgrid_jit", ".2f"), ("batch", "batch", "d"),
        ("vmap ms", "vmap", ".1f"), ("loop ms", "loop", ".1f"), ("vmap/loop", "vmap_over_loop", ".2f"),
        ("x SG/scen", "x_simgrid_per_scenario", ".2f"),
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", nargs="+", default=list(INSTANCES), choices=list(INSTANCES))
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--simgrid-repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, help="capacity scenarios per batch (default: per instance); 0 skips")
    ap.add_argument("--no-oracle", action="store_true")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; medians of {args.repeats} warm runs", flush=True)
    results = []
    for name in args.instances:
        res = run(name, args.repeats, args.simgrid_repeats, args.batch, not args.no_oracle)
        results.append(res)
        print(json.dumps(res), flush=True)
    table(results)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
