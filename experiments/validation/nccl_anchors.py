"""Real-hardware anchors: flowmodel's ring collectives against the bus bandwidths NCCL's maintainers
quote for nccl-tests on H100 systems (docs/sources.md, "nccl-tests on H100").

    PYTHONPATH=. python experiments/validation/nccl_anchors.py

The public figures are peak bus bandwidths (large messages), not per-size tables: an 8-GPU NVSwitch
H100 node (NVLink4 line rate 450 GB/s per GPU per direction) reaches ~370 GB/s busbw with rings
(``NCCL_ALGO=RING``, or any non-all-reduce collective), the line rate less NCCL's ~20% protocol
overhead; NVLink SHARP all-reduce reports ~476-480 GB/s, an in-switch reduction flowmodel does not
model (so it is listed, not compared). Multi-node NDR 400 Gbps: 46-48 GB/s busbw per NIC.

flowmodel's collective time at 8 GiB (the latency term is negligible there) gives its busbw; the error
is against the midpoint of each figure. The fitted quantity is the one physical parameter the anchors
determine, NCCL's protocol efficiency (busbw / line rate), printed per domain; a per-step latency
needs per-size measurements, which none of these sources give.
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from flowmodel import fabric as fb  # noqa: E402
from flowmodel import routing as rt  # noqa: E402
from flowmodel import steptime as st  # noqa: E402
from flowmodel import traffic as tr  # noqa: E402

GB = 1e9
SIZE = 8 * 2**30


def _busbw(network, info, ranks, kind, size=SIZE):
    coll = {"all_reduce": tr.all_reduce, "all_gather": tr.all_gather}[kind](np.asarray(ranks)[None, :], size)
    router = rt.Router(info)
    seconds = sum(float(st.phase_time(st.route_phase(ph, router), network.capacity, network.latency))
                  for ph in coll.phases)
    return coll.bus_bandwidth(seconds)[1]


def nvswitch_node():
    fleet = fb.Fleet(sites=(fb.Site("a", scale_up=fb.ScaleUp(size=8, bandwidth=450 * GB, latency=936e-9)),))
    network, info = fb.compile_fabric(fb.build(fleet))
    return network, info, list(range(8))


def two_nodes_ndr():
    """2 nodes x 8 GPUs, one 400 Gbps NIC per GPU on a non-blocking leaf: a rail's ring crosses the NICs."""
    fleet = fb.Fleet(sites=(fb.Site("a", scale_up=fb.ScaleUp(size=8, bandwidth=450 * GB, latency=936e-9),
                                    scale_out=fb.Clos(tiers=2, gpus_per_leaf=16, leaves_per_pod=1, spines_per_pod=1,
                                                      nic_bandwidth=50 * GB, latency=1e-6)),))
    network, info = fb.compile_fabric(fb.build(fleet))
    return network, info, [0, 8]  # one GPU per node: the per-NIC figure


ANCHORS = [
    # (system, collective, line rate GB/s, measured busbw GB/s (low, high), source key in docs/sources.md)
    ("8x H100 NVSwitch, ring", "all_gather", 450.0, (370.0, 370.0), "nccl-tests#212"),
    ("8x H100 NVSwitch, ring", "all_reduce", 450.0, (370.0, 370.0), "nccl-tests#212"),
    ("2 nodes, NDR 400G per NIC, ring", "all_reduce", 50.0, (46.0, 48.0), "nccl-tests#290"),
]


def main():
    systems = {"8x H100 NVSwitch, ring": nvswitch_node(), "2 nodes, NDR 400G per NIC, ring": two_nodes_ndr()}
    print("| system | collective | flowmodel busbw | measured busbw | error | efficiency busbw / line |")
    print("|---|---|---|---|---|---|")
    for system, kind, line, (lo, hi), source in ANCHORS:
        network, info, ranks = systems[system]
        ours = _busbw(network, info, ranks, kind) / GB
        mid = (lo + hi) / 2
        print(f"| {system} | {kind} | {ours:.1f} GB/s | {lo:g}-{hi:g} GB/s ({source}) | {ours / mid - 1:+.1%} "
              f"| {mid / line:.3f} |")
    print("NVLink SHARP all-reduce (8x H100): 476-480 GB/s busbw measured; an in-switch reduction, not modelled.")


if __name__ == "__main__":
    main()
