"""SimGrid as an independent peer: the same instance solved by SimGrid's fluid model (CM02).

SimGrid is configured for pure fluid max-min sharing: ``network/model:CM02``,
``network/crosstraffic:0`` (no reverse ACK traffic), ``network/TCP-gamma:0`` (no window limit).
A per-flow rate limit becomes a private link of that bandwidth on the flow's route, which is the same
constraint. SimGrid's engine cannot be torn down cleanly inside a process, so every solve runs in a
child process (``python -m flowmodel.peers.simgrid``) that exchanges ``.npz`` files.

SimGrid comes from Debian (``apt-get install python3-simgrid``); its module lives in the system
Python's ``dist-packages``, which is added to the child's path when it is not importable otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from ._child import child_env

DIST_PACKAGES = "/usr/lib/python3/dist-packages"
CONFIG = ("--cfg=network/model:CM02", "--cfg=network/crosstraffic:0", "--cfg=network/TCP-gamma:0",
          "--cfg=network/optim:Full",
          "--cfg=maxmin/precision:1e-9", "--log=root.thres:critical")


def _import_simgrid():
    try:
        import simgrid
    except ImportError:
        sys.path.append(DIST_PACKAGES)
        try:
            import simgrid
        finally:
            sys.path.remove(DIST_PACKAGES)
    return simgrid


def available() -> bool:
    """Whether the simgrid module can be imported (checked in a child process)."""
    code = "from flowmodel.peers.simgrid import _import_simgrid; _import_simgrid()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, env=child_env())
    return proc.returncode == 0


def _run_child(mode: str, arrays: dict, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "in.npz"), os.path.join(tmp, "out.npz")
        np.savez(src, mode=np.array(mode), **arrays)
        proc = subprocess.run([sys.executable, "-m", "flowmodel.peers.simgrid", src, dst],
                              capture_output=True, text=True, timeout=timeout, env=child_env())
        if proc.returncode != 0 or not os.path.exists(dst):
            raise RuntimeError(f"SimGrid child failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
        with np.load(dst) as out:
            return {k: out[k] for k in out.files}


def _instance(routes, capacity, latency, rate_limit, endpoints):
    routes = np.asarray(routes, np.int64)
    F = routes.shape[0]
    arrays = dict(routes=routes, capacity=np.asarray(capacity, np.float64))
    arrays["latency"] = np.zeros_like(arrays["capacity"]) if latency is None else np.asarray(latency, np.float64)
    arrays["rate_limit"] = np.full(F, np.inf) if rate_limit is None else np.asarray(rate_limit, np.float64)
    if endpoints is None:  # two private hosts per flow
        endpoints = (np.arange(F), F + np.arange(F))
    src, dst = (np.asarray(e, np.int64) for e in endpoints)
    pairs = src * (max(src.max(), dst.max()) + 1) + dst
    if np.unique(pairs).size != F:
        raise ValueError("SimGrid needs one route per (src, dst) host pair: endpoints must be distinct pairs")
    arrays.update(src=src, dst=dst)
    return arrays


def maxmin_rates(routes, capacity, *, rate_limit=None, endpoints=None, timeout: float = 600.0):
    """Max-min rates by SimGrid: ``(rates float64[F], seconds SimGrid spent solving)``.

    ``endpoints`` = (src[F], dst[F]) host ids; distinct pairs. By default each flow gets two hosts of
    its own, which is fine for small instances; pass the real hosts for large ones.
    """
    out = _run_child("rates", _instance(routes, capacity, None, rate_limit, endpoints), timeout)
    return out["rates"], float(out["solve_s"])


def completion_times(routes, sizes, capacity, *, latency=None, start_times=None, rate_limit=None,
                     endpoints=None, timeout: float = 600.0):
    """Finish time of each flow by SimGrid: ``(finish float64[F], seconds SimGrid spent simulating)``."""
    arrays = _instance(routes, capacity, latency, rate_limit, endpoints)
    arrays["sizes"] = np.asarray(sizes, np.float64)
    F = arrays["routes"].shape[0]
    arrays["start_times"] = np.zeros(F) if start_times is None else np.asarray(start_times, np.float64)
    out = _run_child("finish", arrays, timeout)
    return out["finish"], float(out["solve_s"])


def _child(src: str, dst: str) -> None:
    sg = _import_simgrid()
    data = np.load(src)
    mode = str(data["mode"])
    routes, capacity, latency = data["routes"], data["capacity"], data["latency"]
    rate_limit, hosts_src, hosts_dst = data["rate_limit"], data["src"], data["dst"]
    e = sg.Engine(["flowmodel-peer", *CONFIG])
    zone = sg.NetZone.create_full_zone("fabric")
    n_hosts = int(max(hosts_src.max(), hosts_dst.max())) + 1
    hosts = [zone.create_host(f"h{i}", 1e9) for i in range(n_hosts)]
    links = []
    for i, (c, lat) in enumerate(zip(capacity, latency)):
        bw = float(c) if np.isfinite(c) else 1e300
        links.append(zone.create_link(f"l{i}", [bw]).set_latency(float(lat)).seal())
    for f, route in enumerate(routes):
        hops = [sg.LinkInRoute(links[j]) for j in route if j >= 0]
        if np.isfinite(rate_limit[f]):
            hops.append(sg.LinkInRoute(zone.create_link(f"cap{f}", [float(rate_limit[f])]).set_latency(0).seal()))
        zone.add_route(hosts[hosts_src[f]].netpoint, hosts[hosts_dst[f]].netpoint, None, None, hops, False)
    zone.seal()

    if mode == "rates":
        horizon = 1.0
        size = int(2 * np.max(capacity[np.isfinite(capacity)], initial=1.0) * horizon) + 1
        t0 = time.perf_counter()
        comms = [sg.Comm.sendto_async(hosts[s], hosts[d], size) for s, d in zip(hosts_src, hosts_dst)]
        t1 = time.perf_counter()
        e.run_until(horizon)
        t2 = time.perf_counter()
        rates = np.array([(size - c.remaining) / horizon for c in comms])
        np.savez(dst, rates=rates, solve_s=t2 - t1, setup_s=t1 - t0)
    else:
        sizes, starts = data["sizes"], data["start_times"]
        finish = np.full(len(sizes), np.nan)

        def sender(f):  # one actor per delayed flow: sleep until its start, then send
            sg.this_actor.sleep_until(float(starts[f]))
            comm = sg.Comm.sendto_async(hosts[hosts_src[f]], hosts[hosts_dst[f]], int(round(sizes[f])))
            comm.wait()
            finish[f] = e.clock

        t0 = time.perf_counter()
        comms = {}
        for f in range(len(sizes)):
            if starts[f] > 0:
                sg.Actor.create(f"flow{f}", hosts[hosts_src[f]], sender, f)
            else:
                comms[f] = sg.Comm.sendto_async(hosts[hosts_src[f]], hosts[hosts_dst[f]], int(round(sizes[f])))
        e.run()
        t1 = time.perf_counter()
        for f, comm in comms.items():
            finish[f] = comm.finish_time
        np.savez(dst, finish=finish, solve_s=t1 - t0)
    sys.stdout.flush()
    os._exit(0)  # SimGrid's teardown crashes once comms exist; results are already on disk


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
