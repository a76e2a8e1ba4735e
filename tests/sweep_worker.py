"""Runs one sweep for test_sweep.py in a fresh interpreter (device count and processes are per process).

    python tests/sweep_worker.py OUT.npz [--chunk N] [--devices N] [--process I --processes P --port PORT]
"""

import argparse
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--chunk", type=int, default=None)
ap.add_argument("--devices", type=int, default=1)
ap.add_argument("--process", type=int, default=None)
ap.add_argument("--processes", type=int, default=1)
ap.add_argument("--port", type=int, default=0)
args = ap.parse_args()
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
if args.process is not None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{args.port}", num_processes=args.processes,
                               process_id=args.process)

import numpy as np  # noqa: E402

from flowmodel import fabric as fb  # noqa: E402
from flowmodel import routing as rt  # noqa: E402
from flowmodel import steptime as st  # noqa: E402
from flowmodel import sweep  # noqa: E402
from flowmodel import traffic as tr  # noqa: E402

site = fb.Clos(tiers=2, gpus_per_leaf=4, leaves_per_pod=2, spines_per_pod=2, oversubscription=(2.0,))
fleet = fb.Fleet(sites=(fb.Site("a", scale_out=site, scale_up=None), fb.Site("b", scale_out=site, scale_up=None)),
                 long_haul=(fb.LongHaul("a", "b", capacity=50e9, length_km=100.0),))
network, info = fb.compile_fabric(fb.build(fleet))
ring = [st.route_phase(p, rt.Router(info)) for p in tr.all_reduce(np.arange(16), 1e9).phases]


def evaluate(p):
    net = fb.apply_groups(network, info, {"long_haul/a-b": p["long_haul"], "a/leaf_up": p["ratio"]})
    seconds = sum(st.phase_time(ph, net.capacity, net.latency) for ph in ring)
    return {"seconds": seconds, "busbw": 1e9 * 2 * 15 / 16 / seconds}


points = sweep.grid(long_haul=np.linspace(10e9, 200e9, 7), ratio=[1.0, 2.0, 3.0])
table = sweep.sweep(evaluate, points, chunk=args.chunk)
if jax.process_index() == 0:
    np.savez(args.out, devices=len(jax.devices()), **table)
sys.exit(0)
