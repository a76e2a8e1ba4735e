"""ASTRA-sim's example Chakra traces on its own networks: flowmodel, the NCCL closed form, and ASTRA-sim.

    PYTHONPATH=. python3 experiments/benchmarks/astra_traces.py [--astra ../shared/astra] [--json out.json]
    PYTHONPATH=. python3 experiments/benchmarks/astra_traces.py --speed [--ranks 4096]

Second table: the 64 MiB all_reduce on ASTRA-sim's 2-D networks (a Switch of 8 NPUs x a Ring of 8 or
32; ``hgx``: 400 GB/s / 936 ns and 50 GB/s / 500 ns, ``uni``: 50 GB/s / 500 ns both) with no system
file (one ring over every NPU) and with ``sys_2d_ring_ring.json`` (ring per dimension: reduce-scatter
up the dimensions, all-gather down, ``traffic.per_dimension``; 4 chunks, 10 ns endpoint delay),
and on the repo's 3-D input (``astra_inputs/``: Switch 8 x Ring 4 x Switch 2, the same links, a ring
per dimension; ASTRA-sim ships no 3-D example), against the per-dimension closed form and ASTRA-sim's
own timing rules (``astra_rules``: its figure as its code runs the chunks, and with the chunks
pipelined across dimensions).

Table: every microbenchmark (all_reduce, all_gather, reduce_scatter, all_to_all; 4/8/16 NPUs; 1 MiB) on
ASTRA-sim's Ring and Switch networks (50 GB/s, 500 ns per link), and the 64 MiB all_reduce at 64 and
256 NPUs. Columns: flowmodel with no system file (one collective, latency once per step); the NCCL
closed form bus_factor x S / B + steps x (route latency of one step), which assumes full bisection;
flowmodel with ASTRA-sim's Ring_4chunks.json (4 chunks one after another, each paying the latency per
step, endpoint-delay as per-step latency, reductions at local-mem-bw); ASTRA-sim 2.x analytical where
its figure is published (docs/sources.md). Bandwidths are GB/s of 2^30 bytes, as ASTRA-sim reads them.
ASTRA-sim is not run here (it is not on PyPI or Debian).

``--speed``: a training step exported from a 3-tier Clos scenario (``--ranks`` GPUs, TP 8, PP 4), read
and simulated: the first (cold: the fluid kernels compile) run, the median of warm runs, and the step
time it reads back to.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from astra_rules import PUBLISHED as ASTRA_NS  # noqa: E402
from astra_rules import all_reduce_ns  # noqa: E402
from common import print_table, write_json  # noqa: E402

from flowmodel import fabric as fb  # noqa: E402
from flowmodel import scenario as sc  # noqa: E402
from flowmodel import steptime as st  # noqa: E402
from flowmodel import trace  # noqa: E402
from flowmodel import traffic as tr  # noqa: E402
from flowmodel.traffic import _chakra as chakra  # noqa: E402

MiB = 1048576
GB = fb.ASTRA_GB  # an ASTRA-sim network file's GB: 2^30 bytes
FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
          "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}
STEPS = {"all_reduce": lambda n: 2 * (n - 1), "all_gather": lambda n: n - 1, "reduce_scatter": lambda n: n - 1,
         "all_to_all": lambda n: 1}


def closed_form(kind, n, size, topology, bandwidth=50 * GB, hop=500e-9):
    route = hop * (2 if topology == "Switch" else (n // 2 if kind == "all_to_all" else 1))
    return FACTOR[kind](n) * size / bandwidth + STEPS[kind](n) * route


def table(astra: str) -> list[dict]:
    chunks = os.path.join(astra, "system", "Ring_4chunks.json")
    cases = [(kind, n, f"microbenchmarks/{kind}/{n}npus_1MB/{kind}", MiB) for kind in FACTOR for n in (4, 8, 16)]
    cases += [("all_reduce", n, f"generated/all_reduce/{n}npus_64MB/all_reduce", 64 * MiB) for n in (64, 256)]
    # the Chakra generator's node-type samples: 64 NPUs, 64 MiB collectives
    for name in ("ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL"):
        cases.append((name.lower(), 64, f"generated/node_types_64npus/{name}", 64 * MiB))
    rows = []
    for kind, n, rel, size in cases:
        for topology in ("Ring", "Switch"):
            name = f"{topology}_{n}npus" if n <= 16 else f"{topology}_{n}"
            fabric = trace.Fabric.from_astra(os.path.join(astra, "network", f"{name}.yml"))
            prefix = os.path.join(astra, rel)
            t0 = time.perf_counter()
            plain = trace.run(prefix, fabric)["makespan_s"]
            wall = time.perf_counter() - t0
            chunked = trace.run(prefix, fabric, system=chunks)["makespan_s"]
            closed = closed_form(kind, n, size, topology)
            sample = " (node-type sample)" if "node_types" in rel else ""
            row = {"case": f"{kind} {n} {topology}{sample}", "flowmodel_us": plain * 1e6, "closed_us": closed * 1e6,
                   "vs_closed": plain / closed - 1, "chunked_us": chunked * 1e6, "wall_s": wall}
            if topology == "Ring" and (kind, n) in ASTRA_NS:
                row["astra_us"] = ASTRA_NS[(kind, n)] / 1e3
                row["chunked_vs_astra"] = chunked * 1e9 / ASTRA_NS[(kind, n)] - 1
            rows.append(row)
    return rows


def per_dimension_closed_form(size, dims, bandwidths, hops, chunks=4, endpoint=10e-9, local_mem_bw=1600e9):
    """All-reduce dimension by dimension, ring in each: reduce-scatter and all-gather of dimension d move
    (n_d - 1) / n_d of the data it sees, S / prod(n_<d), at its bandwidth; every chunk pays each step's
    route latency and endpoint delay; every rank reduces (1 - 1/n) S bytes at three memory passes."""
    total, seen = 3 * (1 - 1 / np.prod(dims)) * size / local_mem_bw, float(size)
    for n, bw, hop in zip(dims, bandwidths, hops):
        total += 2 * ((n - 1) / n * seen / bw + chunks * (n - 1) * (hop + endpoint))
        seen /= n
    return total


INPUTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "astra_inputs")


def multi_dimensional(astra: str) -> list[dict]:
    """ASTRA-sim's 2-D networks with its ``sys_2d_ring_ring.json``, and the repo's 3-D input
    (``astra_inputs/``: ASTRA-sim ships none) with a ring per dimension, on the 64 / 256-NPU traces."""
    sys_2d = os.path.join(astra, "system", "sys_2d_ring_ring.json")
    sys_3d = os.path.join(INPUTS, "sys_3d_ring_ring_ring.json")
    cases = [(os.path.join(astra, "network", f"{net}.yml"), dims, sys_2d)
             for net, dims in (("SwRing_8x8_hgx", (8, 8)), ("SwRing_8x8_uni", (8, 8)), ("SwRing_8x32_hgx", (8, 32)),
                               ("SwRing_8x32_uni", (8, 32)))]
    cases.append((os.path.join(INPUTS, "SwRingSw_8x4x2_hgx.yml"), (8, 4, 2), sys_3d))
    rows = []
    for path, dims, system in cases:
        n = int(np.prod(dims))
        spec = fb.read_astra(path)
        fabric = trace.Fabric.from_astra(path)
        prefix = os.path.join(astra, f"generated/all_reduce/{n}npus_64MB/all_reduce")
        flat = trace.run(prefix, fabric)["makespan_s"]
        per_dim = trace.run(prefix, fabric, system=system)["makespan_s"]
        hops = [(2 if topo == "Switch" else 1) * lat * 1e-9 for topo, lat in zip(spec["topology"], spec["latency"])]
        closed = per_dimension_closed_form(64 * MiB, dims, [b * GB for b in spec["bandwidth"]], hops)
        net = os.path.splitext(os.path.basename(path))[0]
        rules = {s: all_reduce_ns(64 * MiB, dims, spec["topology"], spec["bandwidth"], spec["latency"], schedule=s)
                 / 1e3 for s in ("as_run", "pipelined")}
        rows.append({"case": f"all_reduce {n} 64 MiB {net}", "flat_us": flat * 1e6, "per_dimension_us": per_dim * 1e6,
                     "closed_us": closed * 1e6, "vs_closed": per_dim / closed - 1, "flat_over_per_dim": flat / per_dim,
                     "astra_as_run_us": rules["as_run"], "vs_as_run": per_dim * 1e6 / rules["as_run"] - 1,
                     "astra_pipelined_us": rules["pipelined"], "vs_pipelined": per_dim * 1e6 / rules["pipelined"] - 1})
    return rows


def speed(ranks: int, repeats: int = 3) -> dict:
    pods = max(1, ranks // 256)
    site = fb.Clos(tiers=3, gpus_per_leaf=16, leaves_per_pod=16, spines_per_pod=16, pods=pods, aggs_per_plane=8)
    job = tr.Training(tr.Model("m", layers=16, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, vocab=128256,
                               seq_len=4096), tr.Parallelism(tp=8, pp=4, dp=ranks // 32), global_batch=ranks // 4,
                      micro_batch=1)
    fleet = fb.Fleet(sites=(fb.Site("a", scale_up=fb.ScaleUp(size=8, bandwidth=450e9, latency=1e-6),
                                    scale_out=site),))
    model = sc.prepare(sc.Scenario("speed", fleet, training=(job,)))
    step = float(model.step_time())
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        summary = st.export_training(model.plans[0], os.path.join(tmp, "job"))
        export_s = time.perf_counter() - t0
        reads, sims, makespan = [], [], None
        for _ in range(repeats + 1):  # the first run compiles the fluid kernels
            t0 = time.perf_counter()
            tr_ = chakra.read_trace(os.path.join(tmp, "job"))
            t1 = time.perf_counter()
            prepared = st.prepare_trace(tr_, model.router, gpus=summary["gpus"])
            result = st.simulate_trace(prepared, model.network.capacity, model.network.latency, model.options)
            makespan = float(result.makespan)
            reads.append(t1 - t0)
            sims.append(time.perf_counter() - t1)
    out = {"ranks": summary["ranks"], "nodes": summary["nodes"], "export_s": export_s,
           "cold_read_and_simulate_s": reads[0] + sims[0],
           "read_s": statistics.median(reads[1:]), "prepare_and_simulate_s": statistics.median(sims[1:]),
           "step_time_s": step, "makespan_s": makespan, "relative_difference": abs(makespan - step) / step}
    out["read_and_simulate_s"] = out["read_s"] + out["prepare_and_simulate_s"]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--astra", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "astra"))
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--ranks", type=int, default=4096)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.speed:
        out = speed(args.ranks)
        for k, v in out.items():
            print(f"{k:>24}: {v:.6g}" if isinstance(v, float) else f"{k:>24}: {v}")
        write_json(args.json, out)
        return 0
    if not os.path.isdir(args.astra):
        print(f"{args.astra}: ASTRA-sim's example traces are not here", file=sys.stderr)
        return 1
    rows = table(args.astra)
    for row in rows:
        row["case"] = row["case"].ljust(40)
    print_table(rows, [("case", "case", ""), ("flowmodel us", "flowmodel_us", ".3f"),
                       ("closed us", "closed_us", ".3f"),
                       ("vs closed", "vs_closed", ".2%"), ("4 chunks us", "chunked_us", ".3f"),
                       ("ASTRA us", "astra_us", ".3f"), ("vs ASTRA", "chunked_vs_astra", ".2%"),
                       ("wall s", "wall_s", ".2f")])
    dims = multi_dimensional(args.astra)
    print()
    print_table(dims, [("case", "case", ""), ("one ring us", "flat_us", ".2f"),
                       ("per dimension us", "per_dimension_us", ".2f"), ("closed form us", "closed_us", ".2f"),
                       ("vs closed", "vs_closed", ".2%"), ("one ring / per dim", "flat_over_per_dim", ".2f"),
                       ("ASTRA rules, as run us", "astra_as_run_us", ".2f"), ("vs as run", "vs_as_run", ".2%"),
                       ("ASTRA rules, pipelined us", "astra_pipelined_us", ".2f"),
                       ("vs pipelined", "vs_pipelined", ".2%")])
    write_json(args.json, {"microbenchmarks": rows, "multi_dimensional": dims})
    return 0


if __name__ == "__main__":
    sys.exit(main())
