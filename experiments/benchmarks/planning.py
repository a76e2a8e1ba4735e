"""What one step of a planning search costs: exact evaluation, and value_and_grad of the search objective
(smooth and exact rates), on the shipped configs and the generated planning regions.

Each config runs in its own process (memory and compile caches apart). Medians of warm calls; the
ratio column is the one the planner pays for: (value_and_grad) / (one exact forward evaluation).

    PYTHONPATH=. python experiments/benchmarks/planning.py                      # the default set
    PYTHONPATH=. python experiments/benchmarks/planning.py configs/quickstart.yaml --repeat 7
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

DEFAULT = ["configs/quickstart.yaml", "configs/gw_regional_ring.yaml", "configs/region_plan.yaml",
           "uniform:0", "configs/llama3_24k.yaml", "configs/multi_building_129k.yaml"]


def _median(values):
    values = sorted(values)
    return values[len(values) // 2]


def measure(path: str, repeat: int, objectives: tuple[str, ...]) -> dict:
    """The figures for one config, in this process."""
    import warnings

    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    warnings.simplefilter("ignore")
    from flowmodel import config
    from flowmodel import scenario as sc

    if path.startswith("uniform:"):
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
        import region_plan

        scenario = config.parse(region_plan.uniform(int(path.split(":")[1])))
    else:
        scenario = config.load(path)
    t = time.perf_counter()
    model = sc.prepare(scenario)
    out = {"config": path, "prepare_s": time.perf_counter() - t, "jobs": len(model.plans),
           "groups": [len(g) for g in model.groups], "links": model.network.num_links}

    def timed(fn):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        first = time.perf_counter() - t
        runs = []
        for _ in range(repeat):
            t = time.perf_counter()
            jax.block_until_ready(fn())
            runs.append(time.perf_counter() - t)
        return first, _median(runs)

    out["eval_first_s"], out["eval_s"] = timed(lambda: model.evaluate().step_time)
    for rates in objectives:
        options = model.options.relaxed() if rates == "smooth" else model.options.exact()
        vg = jax.jit(jax.value_and_grad(lambda net: model.step_time(net, options)))
        first, warm = timed(lambda: vg(model.network))
        grad = np.asarray(vg(model.network)[1].capacity)
        out[rates] = {"compile_and_first_s": first, "value_and_grad_s": warm, "ratio": warm / out["eval_s"],
                      "links_with_gradient": int((np.abs(grad) > 0).sum())}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("configs", nargs="*", default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rates", default="exact,smooth", help="comma-separated: exact, smooth")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rates = tuple(r for r in args.rates.split(",") if r)
    if args.one:
        print(json.dumps(measure(args.one, args.repeat, rates)))
        return
    print(f"{'config':<34} {'jobs':>4} {'eval':>9} {'exact vg':>9} {'ratio':>6} {'compile':>8} "
          f"{'smooth vg':>10} {'ratio':>6} {'compile':>8}")
    rows = []
    for path in args.configs:
        with tempfile.TemporaryFile("w+") as log:
            try:
                subprocess.run([sys.executable, __file__, "--one", path, "--repeat", str(args.repeat),
                                "--rates", args.rates], stdout=log, check=True, timeout=args.timeout)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
                print(f"{path:<34} failed: {type(e).__name__}")
                continue
            log.seek(0)
            row = json.loads(log.read().strip().splitlines()[-1])
        rows.append(row)
        cells = [f"{path:<34} {row['jobs']:>4} {row['eval_s'] * 1e3:>7.1f}ms"]
        for r in ("exact", "smooth"):
            if r in row:
                f = row[r]
                cells.append(f"{f['value_and_grad_s'] * 1e3:>7.1f}ms {f['ratio']:>5.1f}x "
                             f"{f['compile_and_first_s']:>7.1f}s")
        print(" ".join(cells), flush=True)
    return rows


if __name__ == "__main__":
    main()
