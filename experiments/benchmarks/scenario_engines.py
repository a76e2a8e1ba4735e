"""The scenario layer per engine: a shipped config's exact evaluation and its capacity gradient, host
against xla, with the XLA solves each one traces (dense or sparse).

    PYTHONPATH=. python3 experiments/benchmarks/scenario_engines.py [--quick] [--repeats 5] [--json FILE]

On a CPU the default engine is ``host`` (Numba through callbacks); on a GPU or TPU it is ``xla`` (the
JAX water-filling), and a scenario must reach that engine's sparse solve: routed phases carry their
incidence, so the dense fallback (every event a full re-solve) should trace 0 times. For each config
and engine: prepare, the first ``evaluate`` (compile + run), the warm median of ``evaluate``, the
first and warm median of ``jax.grad`` of the step time over link capacities, the solves traced, and
the largest relative difference of the step time and gradient from the host engine. ``--quick``
leaves out the 24K and 129K configs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, os.path.dirname(__file__))
from common import median_time, print_table, write_json  # noqa: E402

from flowmodel import config  # noqa: E402
from flowmodel import scenario as scn  # noqa: E402
from flowmodel.kernels import fluid, maxmin  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUICK = ["quickstart", "dsf_vs_ecmp", "gw_regional_ring", "mixed_workloads"]
FULL = QUICK + ["llama3_24k", "multi_building_129k"]
SOLVES = (("solve_dense", "dense"), ("solve_sparse", "sparse"), ("sparse_tables", "sparse"))


@contextlib.contextmanager
def counted_solves():
    """Counts of the XLA solves traced inside the block (a cached program traces nothing, so caches
    are cleared first)."""
    counts = {"dense": 0, "sparse": 0}
    saved = []
    for module in (fluid, maxmin):
        for name, kind in SOLVES:
            if hasattr(module, name):
                fn = getattr(module, name)
                saved.append((module, name, fn))

                def counted(*args, _fn=fn, _kind=kind, **kwargs):
                    counts[_kind] += 1
                    return _fn(*args, **kwargs)
                setattr(module, name, counted)
    jax.clear_caches()
    try:
        yield counts
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)


def measure(name: str, engine: str, repeats: int) -> dict:
    sc = config.load(os.path.join(ROOT, "configs", f"{name}.yaml"))
    sc = dataclasses.replace(sc, options=dataclasses.replace(sc.options, engine=engine))
    row = {"config": name, "engine": engine}
    with counted_solves() as counts:
        t0 = time.perf_counter()
        model = scn.prepare(sc)
        row["prepare_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        step = float(jax.block_until_ready(model.evaluate().step_time))
        row["eval_first_s"] = time.perf_counter() - t0
        _, eval_s = median_time(lambda: model.evaluate().step_time, repeats)
        grad = jax.jit(jax.grad(lambda c: model.fleet(dataclasses.replace(model.network, capacity=c)).step_time))
        cap = model.network.capacity
        t0 = time.perf_counter()
        g = np.asarray(jax.block_until_ready(grad(cap)))
        row["grad_first_s"] = time.perf_counter() - t0
        _, grad_s = median_time(lambda: grad(cap), repeats)
    row.update(eval_ms=1e3 * eval_s, grad_ms=1e3 * grad_s, grad_over_eval=grad_s / eval_s, dense=counts["dense"],
               sparse=counts["sparse"], step_s=step)
    row["_grad"] = g
    return row


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="leave out the 24K and 129K configs")
    ap.add_argument("--configs", nargs="*", help="config names (default: all, or the quick set)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    names = args.configs or (QUICK if args.quick else FULL)
    print(f"backend {jax.default_backend()}, devices {jax.devices()}", flush=True)
    rows = []
    for name in names:
        host = measure(name, "host", args.repeats)
        xla = measure(name, "xla", args.repeats)
        g_host, g_xla = host.pop("_grad"), xla.pop("_grad")
        scale = max(float(np.abs(g_host).max()), 1e-300)
        xla["step_rel_diff"] = abs(xla["step_s"] - host["step_s"]) / host["step_s"]
        xla["grad_rel_diff"] = float(np.abs(g_xla - g_host).max()) / scale
        xla["xla_over_host_eval"] = xla["eval_ms"] / host["eval_ms"]
        xla["xla_over_host_grad"] = xla["grad_ms"] / host["grad_ms"]
        rows += [host, xla]
        print(f"{name}: host eval {host['eval_ms']:.2f} ms, xla {xla['eval_ms']:.2f} ms "
              f"({xla['dense']} dense / {xla['sparse']} sparse solves traced)", flush=True)
    print_table(rows, [("config", "config", ""), ("engine", "engine", ""), ("prepare s", "prepare_s", ".2f"),
                       ("eval 1st s", "eval_first_s", ".2f"), ("eval ms", "eval_ms", ".2f"),
                       ("grad 1st s", "grad_first_s", ".2f"), ("grad ms", "grad_ms", ".2f"),
                       ("grad/eval", "grad_over_eval", ".2f"), ("dense", "dense", "d"), ("sparse", "sparse", "d"),
                       ("xla/host eval", "xla_over_host_eval", ".2f"), ("xla/host grad", "xla_over_host_grad", ".2f"),
                       ("step diff", "step_rel_diff", ".1e"),
                       ("grad diff", "grad_rel_diff", ".1e")])
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
