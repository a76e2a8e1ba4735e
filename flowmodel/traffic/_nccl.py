"""NCCL's choice of protocol (LL, LL128, Simple) by message size, from its own tuning model.

NCCL times every (algorithm, protocol) pair of a collective as ``latency + bytes / bandwidth`` and runs
the cheapest (``ncclTopoGetAlgoTime``, ``topoGetAlgoInfo``). The tables and refinements below are
NCCL 2.22.3's ``src/graph/tuning.cc`` (commit 178b6b7; docs/sources.md, "NCCL's tuning model"), for
the ring and tree algorithms:

- the Simple protocol runs at the bus bandwidth ``bus_bw`` (NCCL: channels x per-channel bandwidth of
  its topology search; here the caller's, e.g. flowmodel's fluid rate of the collective);
- LL at ``min(ll_max_bw, bus_bw x 0.5)`` on a ring (``x 1/3.8`` on a tree), LL128 at ``min(bus_bw x
  0.92, channels x 36.7 GB/s)`` on Hopper (0.7 with fewer than 2 GPUs per node);
- latency ``base[algorithm][protocol] + (steps - inter_steps) x intra + inter_steps x inter`` (ring),
  with ``intra`` the NVLink or PCI hardware latency of the protocol and ``inter`` the network's (plus
  NCCL's per-step network overhead, 1 us on Intel CPUs, x 3 for Simple); a ring all-reduce has 2(n-1)
  steps, a reduce-scatter or all-gather n-1; a multi-node ring all-reduce on Simple pays its latency
  x 1.4 (x 1.9 before Ampere) once bytes / (channels x ranks) >= 64 (``ncclTopoGetAlgoTime``'s
  plateau). Not applied: the tree's size-dependent correction factor (``treeCorrectionFactor``), and
  the tree runs all-reduces only, as in NCCL.

>>> from flowmodel import traffic as tr
>>> tr.nccl_protocol("all_reduce", 1 << 20, 8, bus_bw=360e9).protocol   # 1 MiB on 8 NVLink GPUs
'LL'
>>> tr.nccl_protocol("all_reduce", 1 << 30, 8, bus_bw=360e9).protocol
'Simple'
"""

from __future__ import annotations

import dataclasses
import math

from .._checks import check_number

PROTOCOLS = ("LL", "LL128", "Simple")
ARCHS = ("volta", "ampere", "hopper")
# us; per algorithm, (LL, LL128, Simple)
BASE_LATENCY = {"tree": (6.8, 14.0, 0.0), "ring": (6.6, 14.0, 8.4)}
HW_LATENCY = {"nvlink": {"tree": (0.6, 1.25, 28.0), "ring": (0.6, 1.9, 3.4)},
              "pci": {"tree": (1.0, 1.9, 28.0), "ring": (1.0, 2.5, 5.7)},
              "net": {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 14.0)}}
# GB/s; columns: 1 node, 2 nodes, more. LL's cap: on one node by GPU arch, on several by CPU vendor
LL_MAX_BW = {"volta": (39.0, 39.0, 20.4), "ampere": (87.7, 22.5, 19.0), "hopper": (141.0, 45.0, 35.0)}
LL_MAX_BW_CPU = {"intel": LL_MAX_BW["volta"], "amd": LL_MAX_BW["ampere"]}
PER_CHANNEL_RING_LL128 = {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0), "hopper": (36.7, 36.7, 36.7)}
PER_CHANNEL_TREE_LL128 = {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0), "hopper": (36.7, 36.7, 29.0)}
PER_CHANNEL_TREE = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8), "hopper": (38.7, 41.4, 36.0)}
NET_OVERHEAD = {"intel": 1.0, "amd": 2.0}  # us per inter-node step (getNetOverhead)


@dataclasses.dataclass(frozen=True)
class ProtocolChoice:
    """What NCCL's model picks for one call: the protocol, its time (s), and every protocol's
    ``(latency s, bus bandwidth bytes/s, time s)``."""

    protocol: str
    seconds: float
    costs: dict


def _steps(kind: str, n: int, nodes: int) -> tuple[int, int]:
    if kind == "all_reduce":
        return 2 * (n - 1), (2 * nodes if nodes > 1 else 0)
    if kind in ("reduce_scatter", "all_gather"):
        return n - 1, nodes - 1
    return n, nodes


@dataclasses.dataclass(frozen=True)
class ProtocolModel:
    """NCCL's cost of each protocol for one collective, as a function of the Simple protocol's bus
    bandwidth ``bw`` and the network path's latency ``inter`` (s; NCCL's ``latencyInter``): protocol
    ``p`` runs at bus bandwidth ``min(factor_p x bw, cap_p)`` and pays ``latency_p + per_inter_p x
    inter``; ``time_p = that + size / (busbw_p x ratio)``, ``ratio`` = algbw / busbw.

    ``costs``: ``(protocol, latency s, factor, cap bytes/s, per_inter)`` for LL, LL128 and Simple.

    NCCL picks the protocol with its own estimate (:meth:`seconds`). What the chosen protocol then
    costs (:meth:`latency`, ``steptime.nccl_time``) may be calibrated on measurements: the tuning
    model's latency constants x ``latency_scale`` (they are a selection heuristic, not a timing: on
    NVLink4 the measured intercepts are 0.8-1.0 of them), and no call below ``floor`` seconds
    (the measured per-call minimum: launch and completion of the kernel). 1 and 0: the tuning model
    as it stands."""

    size: float
    ratio: float
    costs: tuple[tuple[str, float, float, float, float], ...]
    latency_scale: float = 1.0
    floor: float = 0.0

    def __post_init__(self):
        check_number("nccl.latency_scale", self.latency_scale, strict=True)
        check_number("nccl.floor", self.floor)

    def latency(self, protocol: str, inter: float = 0.0) -> float:
        """Seconds ``protocol`` pays besides the bandwidth term, on a network path of latency ``inter``
        (the calibrated cost: the tuning model's constant x ``latency_scale``; the path is physical)."""
        return {p: self.latency_scale * lat + per_inter * inter for p, lat, _, _, per_inter in self.costs}[protocol]

    def seconds(self, bw: float, inter: float = 0.0) -> dict[str, tuple[float, float, float]]:
        """protocol -> (latency s, bus bandwidth bytes/s, time s) at Simple bus bandwidth ``bw``: NCCL's
        own estimate, the one its choice is made on (uncalibrated)."""
        out = {}
        for p, latency, factor, cap, per_inter in self.costs:
            busbw, latency = min(factor * bw, cap), latency + per_inter * inter
            out[p] = (latency, busbw, latency + self.size / (busbw * self.ratio))
        return out

    def calibrated(self, latency_scale: float, floor: float) -> ProtocolModel:
        """The same model with the measured calibration (see the class)."""
        return dataclasses.replace(self, latency_scale=float(latency_scale), floor=float(floor))


def protocol_model(kind: str, size: float, n: int, *, nodes: int = 1, algorithm: str = "ring", channels: int = 16,
                   arch: str = "hopper", intra: str = "nvlink", cpu: str = "intel") -> ProtocolModel:
    """NCCL 2.22.3's per-protocol latency and bandwidth for one collective (arguments as
    :func:`nccl_protocol`, less the bus bandwidth and the network latency, which the model takes as
    its arguments)."""
    if algorithm not in BASE_LATENCY:
        raise ValueError(f"algorithm: NCCL's protocol model here covers ring and tree, got {algorithm!r}")
    if algorithm == "tree" and kind != "all_reduce":
        raise ValueError(f"algorithm: NCCL runs {kind} on rings only, not on a tree")
    if arch not in ARCHS or intra not in ("nvlink", "pci") or cpu not in NET_OVERHEAD:
        raise ValueError(f"nccl: arch must be one of {', '.join(ARCHS)}, intra nvlink or pci, cpu intel or amd; "
                         f"got {arch!r}, {intra!r}, {cpu!r}")
    check_number("nccl.size", size, strict=True)
    check_number("nccl.n", n, minimum=2, integer=True)
    check_number("nccl.nodes", nodes, minimum=1, integer=True)
    check_number("nccl.channels", channels, minimum=1, integer=True)
    col = min(nodes, 3) - 1
    ll_cap = (LL_MAX_BW[arch][col] if nodes == 1 else LL_MAX_BW_CPU[cpu][col]) * 1e9
    ppn = n / nodes
    if algorithm == "ring":  # (factor on Simple's bus bandwidth, cap bytes/s)
        bandwidth = {"LL": (0.5, ll_cap),
                     "LL128": (0.7 if ppn < 2 else 0.92, channels * PER_CHANNEL_RING_LL128[arch][col] * 1e9),
                     "Simple": (1.0, math.inf)}
    else:  # the tree's own bus bandwidth min(0.92 bw, channels x per-channel), then each protocol's share
        tree_cap = channels * PER_CHANNEL_TREE[arch][col] * 1e9
        share = 7.0 / 9.0 if nodes == 1 else 120.0 / 128.0
        bandwidth = {"LL": (0.92 / 3.8, min(tree_cap / 3.8, ll_cap)),
                     "LL128": (0.92 * share, min(tree_cap * share, channels * PER_CHANNEL_TREE_LL128[arch][col] * 1e9)),
                     "Simple": (0.92, tree_cap)}
    steps, inter_steps = _steps(kind, n, nodes)
    ratio = n / steps if algorithm == "ring" else 0.5  # bus bandwidth -> the algorithm bandwidth of nBytes
    costs = []
    for i, p in enumerate(PROTOCOLS):
        latency = BASE_LATENCY[algorithm][i]
        intra_lat = HW_LATENCY[intra][algorithm][i]
        inter_lat = HW_LATENCY["net"][algorithm][i]
        path = 2 if p == "Simple" else 1  # latencyInter counts twice on Simple
        if algorithm == "ring":
            if nodes > 1:
                intra_lat = max(intra_lat, NET_OVERHEAD[cpu] * (3 if p == "Simple" else 1))
            latency += (steps - inter_steps) * intra_lat + inter_steps * inter_lat
            per_inter = inter_steps * path
        else:
            latency += 2 * ((n // nodes - 1) * intra_lat + int(math.log2(nodes)) * inter_lat)
            per_inter = 2 * int(math.log2(nodes)) * path
        plateau = algorithm == "ring" and p == "Simple" and nodes > 1 and kind == "all_reduce"
        if plateau and size / (channels * n) >= 64:
            scale = 1.9 if arch == "volta" else 1.4  # the ring's plateau effect
            latency, per_inter = latency * scale, per_inter * scale
        costs.append((p, latency * 1e-6, *bandwidth[p], float(per_inter)))
    return ProtocolModel(float(size), ratio, tuple(costs))


def nccl_protocol(kind: str, size: float, n: int, *, bus_bw: float, nodes: int = 1, algorithm: str = "ring",
                  channels: int = 16, arch: str = "hopper", intra: str = "nvlink", cpu: str = "intel",
                  latency_inter: float = 0.0) -> ProtocolChoice:
    """NCCL 2.22.3's cost of each protocol for one collective and its choice.

    Args:
      kind: ``all_reduce``, ``reduce_scatter``, ``all_gather`` (or ``broadcast``).
      size: bytes per rank as nccl-tests counts them (the all-reduce's buffer; for an all-gather or
        reduce-scatter NCCL's nBytes, n x the per-rank count).
      n, nodes: ranks and nodes.  bus_bw: the Simple protocol's bus bandwidth, bytes/s.
      channels: NCCL channels (LL128's cap is per channel).  arch: the GPUs' (``volta``, ``ampere``,
        ``hopper``; LL128 is enabled on these).  intra: ``nvlink`` or ``pci``.  cpu: ``intel`` or ``amd``.
      latency_inter: the network path's latency, s (NCCL's ``latencyInter``).
    """
    check_number("nccl.bus_bw", bus_bw, strict=True)
    check_number("nccl.latency_inter", latency_inter)
    costs = protocol_model(kind, size, n, nodes=nodes, algorithm=algorithm, channels=channels, arch=arch,
                           intra=intra, cpu=cpu).seconds(bus_bw, latency_inter)
    best = min(costs, key=lambda p: costs[p][2])
    return ProtocolChoice(best, costs[best][2], costs)
