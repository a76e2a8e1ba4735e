"""Cold start: wall time of fresh processes for `flowmodel run` and for routing at scale, against goals.

    PYTHONPATH=. python3 experiments/benchmarks/cold_start.py [--runs 3] [--quick] [--json FILE]

Every figure is a fresh Python process (imports, fabric build, routing and JAX compilation
included), timed from outside, median over ``--runs``:

- ``run 24k``: ``flowmodel run configs/llama3_24k.yaml`` (Llama 3 405B, TP8 x PP16 x DP128), goal 15 s;
- ``run 129k``: ``flowmodel run configs/multi_building_129k.yaml`` (DP over 128,000 GPUs), goal 10 s;
- ``run 129k dctcp``: the same under the DCTCP transport profile (``--set model.transport=dctcp``: start
  delays, so some 230 fluid events a seed where the pure fluid run has 5, and contention), no goal: its
  ratio to ``run 129k`` is printed;
- ``pairs 100k``: candidate paths of 100,000 random GPU pairs on ``fb.meta_24k()``, goal 1 s; timed
  inside the process from a new ``Router`` (its path tables included) to the ``Candidates``;
- ``tree 16k``: the double-binary-tree all-reduce over 16,384 ranks on ``fb.meta_24k()`` routed with
  ECMP (the collective's flows, a new ``Router``, ``routing.route``), goal 10 s; the Llama 3 job's
  first 16,384 GPUs in order, and the same count of GPUs in a random order (every tree edge a new
  leaf pair).

A stage breakdown of one cold ``flowmodel run`` per configuration follows (import, fabric, routing,
tracing + compilation, first evaluation), each stage timed inside the process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from common import print_table, write_json

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PAIRS = """
import json, time, numpy as np
from flowmodel import fabric as fb, routing as rt
net, info = fb.compile_table(fb.build_table(fb.meta_24k()))
rng = np.random.default_rng(0)
src = rng.integers(0, info.num_gpus, 100_000)
dst = (src + rng.integers(1, info.num_gpus, src.size)) % info.num_gpus
t = time.perf_counter()
c = rt.Router(info).candidates(src, dst)
print(json.dumps({"seconds": time.perf_counter() - t, "paths": int(c.links.shape[0])}))
"""

TREE = """
import json, sys, time, numpy as np
from flowmodel import fabric as fb, routing as rt, traffic as tr
net, info = fb.compile_table(fb.build_table(fb.meta_24k()))
ranks = np.arange(16_384) if sys.argv[1] == "in order" else np.random.default_rng(0).permutation(info.num_gpus)[:16_384]
t = time.perf_counter()
phase = tr.all_reduce(ranks[None, :], 1e9, "tree").phases[0]
sub = rt.route(rt.Router(info), phase.src, phase.dst, "ecmp")
print(json.dumps({"seconds": time.perf_counter() - t, "flows": int(phase.num_flows)}))
"""

STAGES = """
import json, sys, time
t0 = time.perf_counter()
import jax
from flowmodel import config, scenario
from flowmodel.fabric import build_table, compile_table
from flowmodel.routing import Router
out = {"import": time.perf_counter() - t0}
s = config.load(sys.argv[1])
t = time.perf_counter(); compile_table(build_table(s.fleet)); out["fabric"] = time.perf_counter() - t
t = time.perf_counter(); model = scenario.prepare(s); out["prepare (fabric + routing)"] = time.perf_counter() - t
t = time.perf_counter()
jax.block_until_ready(model.evaluate().step_time)
out["compile + first run"] = time.perf_counter() - t
t = time.perf_counter(); jax.block_until_ready(model.evaluate().step_time); out["warm run"] = time.perf_counter() - t
print(json.dumps(out))
"""


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                PYTHONWARNINGS="ignore")


def _wall(args: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(args, cwd=ROOT, env=_env(), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def _inner(code: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=_env(), check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true", help="one run each, no stage breakdown")
    args = ap.parse_args()
    if args.quick:
        args.runs = 1
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for name, config, goal, extra in (("run 24k", "configs/llama3_24k.yaml", 15.0, []),
                                          ("run 129k", "configs/multi_building_129k.yaml", 10.0, []),
                                          ("run 129k dctcp", "configs/multi_building_129k.yaml", None,
                                           ["--set", "model.transport=dctcp"])):
            times = [_wall([sys.executable, "-m", "flowmodel.cli", "run", config, "--out", out, "--quiet", *extra])
                     for _ in range(args.runs)]
            rows.append({"target": name, "goal_s": goal, "median_s": statistics.median(times),
                         "min_s": min(times), "runs": len(times)})
    fluid = next(r["median_s"] for r in rows if r["target"] == "run 129k")
    rows[-1]["target"] += f" ({rows[-1]['median_s'] / fluid:.1f}x run 129k)"
    times = [_inner(PAIRS)["seconds"] for _ in range(args.runs)]
    rows.append({"target": "pairs 100k", "goal_s": 1.0, "median_s": statistics.median(times), "min_s": min(times),
                 "runs": len(times)})
    for order in ("in order", "random order"):
        times = [_inner(TREE, order)["seconds"] for _ in range(args.runs)]
        rows.append({"target": f"tree 16k {order.split()[0]}", "goal_s": 10.0, "median_s": statistics.median(times),
                     "min_s": min(times), "runs": len(times)})
    for row in rows:
        row["met"] = "-" if row["goal_s"] is None else "yes" if row["median_s"] <= row["goal_s"] else "NO"
    shown = [{**row, "goal_s": "-" if row["goal_s"] is None else f"{row['goal_s']:.1f}"} for row in rows]
    print_table(shown, [("target", "target", ""), ("goal s", "goal_s", ""), ("median s", "median_s", ".2f"),
                       ("min s", "min_s", ".2f"), ("runs", "runs", "d"), ("met", "met", "")])
    stages = []
    for config in () if args.quick else ("configs/llama3_24k.yaml", "configs/multi_building_129k.yaml"):
        stages.append({"config": os.path.basename(config), **_inner(STAGES, config)})
    if stages:
        keys = [k for k in stages[0] if k != "config"]
        print_table(stages, [("config", "config", "")] + [(k, k, ".2f") for k in keys])
    write_json(args.json, {"targets": rows, "stages": stages})


if __name__ == "__main__":
    main()
