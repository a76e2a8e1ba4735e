"""Routing seeds: N seeds as one batched evaluation against N single-seed evaluations, and the seed spread.

    PYTHONPATH=. python3 experiments/benchmarks/seeds.py [--configs quickstart dsf_vs_ecmp ...] [--seeds 16]
        [--single K] [--cli] [--json FILE]

Per shipped config (hash-routed, ECMP), in one process:

- ``single``: what N separate runs cost: ``scenario.prepare`` with ``fabric.routing.seed=s`` and the first
  ``Model.evaluate()`` (routing, tracing, compilation, one run), timed for K seeds (default all N; the
  median times N when K < N);
- ``batched``: ``seeds.over_seeds(model, range(N))`` on the prepared seed-0 model (the other seeds
  routed again reusing the seed-free tables, ``Router.reseeded``) and its first ``evaluate()`` (one
  compiled program over every seed); the seed-0 model's own prepare is added, since the N single runs
  include it too. The goal: batched <= 0.6 x single;
- ``warm``: one warm batched call against N warm single-seed calls (median single x N), the kernels alone;
- the spread of the step time over the N seeds (min, mean, max), and that the batch equals the single runs.

A first prepare and evaluation of seed 0, untimed, takes the process's one-time costs (JAX start-up, the
host engine's kernels loaded from Numba's cache) out of both sides.

``--cli``: fresh ``flowmodel run`` processes on quickstart and dsf_vs_ecmp with the default seeds (8)
and with ``--seeds 1``, median of 3 each (goal: at most 3x).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import jax
import numpy as np
from common import print_table, write_json

from flowmodel import config, scenario, seeds

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(name: str, seed: int):
    return config.load(os.path.join(ROOT, "configs", f"{name}.yaml"), [f"fabric.routing.seed={seed}"])


def measure(name: str, n: int, k: int | None) -> dict:
    k = n if k is None else min(k, n)
    jax.block_until_ready(scenario.prepare(_load(name, 0)).evaluate().step_time)  # one-time costs, untimed
    single, values = [], []
    for s in range(k):
        t = time.perf_counter()
        model = scenario.prepare(_load(name, s))
        values.append(float(jax.block_until_ready(model.evaluate().step_time)))
        single.append(time.perf_counter() - t)
        if s == 0:
            _, warm_single = _median(lambda m=model: m.evaluate().step_time, 5)
    single_total = sum(single) if k == n else statistics.median(single) * n
    t = time.perf_counter()
    model = scenario.prepare(_load(name, 0))
    prepare_s = time.perf_counter() - t
    t = time.perf_counter()
    batch = seeds.over_seeds(model, range(n))
    route_s = time.perf_counter() - t
    times = np.asarray(jax.block_until_ready(batch.evaluate().step_time))
    batched_total = prepare_s + time.perf_counter() - t
    _, warm_batched = _median(lambda: batch.evaluate().step_time, 5)
    return {"config": name, "seeds": n, "single_runs": k, "single_s": single_total, "prepare_s": prepare_s,
            "route_s": route_s, "batched_s": batched_total, "ratio": batched_total / single_total,
            "warm_single_s": warm_single * n, "warm_batched_s": warm_batched,
            "warm_ratio": warm_batched / (warm_single * n), "min_s": float(times.min()), "mean_s": float(times.mean()),
            "max_s": float(times.max()), "spread": float(times.max() / times.min() - 1.0),
            "max_diff": float(np.max(np.abs(times[:k] - np.array(values)) / np.array(values)))}


def _median(fn, repeats):
    out = jax.block_until_ready(fn())
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        runs.append(time.perf_counter() - t)
    return out, statistics.median(runs)


def cli_runs(names, repeats: int = 3) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONWARNINGS="ignore")
    rows = []
    for name in names:
        row = {"config": name}
        for label, extra in (("one_seed_s", ["--seeds", "1"]), ("default_s", [])):
            times = []
            for _ in range(repeats):
                with tempfile.TemporaryDirectory() as out:
                    t = time.perf_counter()
                    subprocess.run([sys.executable, "-m", "flowmodel.cli", "run",
                                    os.path.join(ROOT, "configs", f"{name}.yaml"), "--out", out, "--quiet", *extra],
                                   check=True, env=env)
                    times.append(time.perf_counter() - t)
            row[label] = statistics.median(times)
        row["ratio"] = row["default_s"] / row["one_seed_s"]
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="*", default=["quickstart", "dsf_vs_ecmp", "gw_regional_ring",
                                                     "mixed_workloads", "time_to_train", "region_plan"])
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--single", type=int, default=None, help="single-seed runs to time (default: all)")
    ap.add_argument("--cli", action="store_true", help="also time fresh `flowmodel run` processes")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    jax.config.update("jax_enable_x64", True)
    warnings.simplefilter("ignore")
    rows = [measure(name, args.seeds, args.single) for name in args.configs]
    print_table(rows, [("config", "config", ""), ("seeds", "seeds", "d"), ("timed", "single_runs", "d"),
                       ("single s", "single_s", ".2f"), ("batched s", "batched_s", ".2f"), ("ratio", "ratio", ".3f"),
                       ("reroute s", "route_s", ".2f"), ("warm 1xN s", "warm_single_s", ".4f"),
                       ("warm batch s", "warm_batched_s", ".4f"), ("warm ratio", "warm_ratio", ".3f"),
                       ("min s", "min_s", ".4f"), ("mean s", "mean_s", ".4f"), ("max s", "max_s", ".4f"),
                       ("spread", "spread", ".3%"), ("vs single", "max_diff", ".1e")])
    result = {"seeds": rows}
    if args.cli:
        result["cli"] = cli_runs(["quickstart", "dsf_vs_ecmp"])
        print_table(result["cli"], [("config", "config", ""), ("--seeds 1 s", "one_seed_s", ".2f"),
                                    ("8 seeds s", "default_s", ".2f"), ("ratio", "ratio", ".2f")])
    write_json(args.json, result)


if __name__ == "__main__":
    main()
