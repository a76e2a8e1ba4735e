"""Every engine-throughput benchmark in one run, for an accelerator machine (or this one).

    PYTHONPATH=. python3 experiments/benchmarks/device.py [--quick] [--out DIR]

Runs, each in its own process (so that one JAX backend and compile cache serve one benchmark):
  maxmin     maxmin_vs_simgrid.py: one solve per engine (eager, in a user's jit) and batched capacity
             scenarios (jit(vmap) vs a loop), k=8/10K, k=16/10K, k=16/100K
  fluid      fluid_vs_simgrid.py: the event loop per engine, k=8 with 1K and 10K distinct finishes
  cold       cold_start.py: `flowmodel run` cold on the 24K and 129K configs, routing at scale
  scenario   scenario_engines.py: each shipped config's evaluation and capacity gradient per engine,
             with the dense / sparse XLA solves it traces (a scenario must take the sparse one)
On a GPU the default engine is ``xla`` (the host engine's callbacks would copy every solve off the
device); the tables print both engines either way. SimGrid runs where python3-simgrid imports, else
its columns are nan. Each benchmark's JSON and log go to ``--out`` (default ``$OUT`` or
``out/device``); a summary of the headline ratios is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

BENCHMARKS = {
    "maxmin": ["maxmin_vs_simgrid.py", "--repeats", "7"],
    "fluid": ["fluid_vs_simgrid.py", "--repeats", "3"],
    "cold": ["cold_start.py"],
    "scenario": ["scenario_engines.py"],
}
QUICK = {
    "maxmin": ["maxmin_vs_simgrid.py", "--repeats", "3", "--simgrid-repeats", "1", "--instances", "k8-10k",
               "k16-100k"],
    "fluid": ["fluid_vs_simgrid.py", "--repeats", "1"],
    "cold": ["cold_start.py", "--quick"],
    "scenario": ["scenario_engines.py", "--quick", "--repeats", "3"],
}


def run(name: str, argv: list[str], out: str, timeout: float) -> dict:
    script = os.path.join(HERE, argv[0])
    if not os.path.exists(script):
        print(f"{name}: {argv[0]} is not in this checkout: skipped", flush=True)
        return {"name": name, "skipped": True}
    json_path = os.path.join(out, f"{name}.json")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    with open(os.path.join(out, f"{name}.log"), "w") as log:
        try:
            proc = subprocess.run([sys.executable, script, *argv[1:], "--json", json_path], cwd=HERE, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
            text, rc = proc.stdout, proc.returncode
        except subprocess.TimeoutExpired as err:
            text, rc = (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else (err.stdout or ""), 124
        log.write(text)
    print(f"\n===== {name}: exit {rc} in {time.perf_counter() - t0:.0f} s =====\n{text[-6000:]}", flush=True)
    result = {"name": name, "rc": rc}
    if rc == 0 and os.path.exists(json_path):
        with open(json_path) as fh:
            result["results"] = json.load(fh)
    return result


def headline(runs: list[dict]) -> None:
    print("\n===== headline figures =====")
    for r in runs:
        for row in r.get("results") or []:
            if r["name"] == "maxmin":
                for e in ("host", "xla"):
                    nan = float("nan")
                    print(f"maxmin {row['instance']:>9} {e:>4}: one solve {1e3 * row[f'kernel_s_{e}']:.2f} ms "
                          f"(jit {1e3 * row[f'jit_s_{e}']:.2f}), "
                          f"x SimGrid {row.get(f'x_simgrid_kernel_{e}', nan):.2f}; "
                          f"{row['batch']} scenarios vmap/loop {row.get(f'vmap_over_loop_{e}', nan):.2f}, "
                          f"per scenario x SimGrid {row.get(f'x_simgrid_per_scenario_{e}', nan):.2f}")
            elif r["name"] == "fluid":
                print(f"fluid {row['case']:>10}: host {row['host_s']:.3f} s, xla {row['xla_s']:.3f} s, SimGrid "
                      f"{row.get('simgrid_s', float('nan')):.3f} s")
            elif r["name"] == "scenario":
                print(f"scenario {row['config']:>19} {row['engine']:>4}: eval {row['eval_ms']:.2f} ms, grad "
                      f"{row['grad_ms']:.2f} ms, solves traced {row['dense']} dense / {row['sparse']} sparse")
            else:
                print(f"{r['name']}: {json.dumps(row)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats and instances (a few minutes)")
    ap.add_argument("--only", nargs="+", choices=list(BENCHMARKS))
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(ROOT, "out", "device"))
    ap.add_argument("--timeout", type=float, default=1500, help="seconds per benchmark")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import jax

    print(f"jax {jax.__version__}; devices {jax.devices()}", flush=True)
    table = QUICK if args.quick else BENCHMARKS
    runs = [run(name, table[name], args.out, args.timeout) for name in (args.only or table)]
    headline(runs)
    with open(os.path.join(args.out, "device.json"), "w") as fh:
        json.dump(runs, fh, indent=1)
    sys.exit(max((r.get("rc", 0) for r in runs), default=0))


if __name__ == "__main__":
    main()
