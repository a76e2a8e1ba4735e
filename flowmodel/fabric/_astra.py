"""Import an ASTRA-sim analytical ``network.yml`` (multi-dimensional Ring / FullyConnected / Switch).

The file lists per dimension a topology, ``npus_count``, ``bandwidth`` (GB/s per link and direction,
read as ASTRA-sim's analytical backend reads it: 1 GB = 2^30 bytes, ``ASTRA_GB``) and ``latency`` (ns per
link). NPU ``i`` has coordinates ``i = c0 + n0 * (c1 + n1 * (c2 + ...))``
(dimension 0 varies fastest); a dimension joins the NPUs that differ only in its coordinate. Rings
are bidirectional, FullyConnected joins every ordered pair directly, Switch gives every NPU one link
up to the group's switch and one down. Dimension 0's groups are the scale-up domains.

Routes follow dimension order (ASTRA-sim's collectives run one dimension at a time): dimension by
dimension, the coordinate is moved to the destination's, the short way round a ring (ties: forward).
``routing.AstraRouter`` offers these routes through the same ``candidates`` call as ``routing.Router``,
so collectives and training steps run on an imported network unchanged.
"""

from __future__ import annotations

import numpy as np
import yaml

from ._build import CAPACITY, GraphBuilder
from ._tags import Kind

TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
ASTRA_GB = float(2 ** 30)  # bytes in a network file's GB: ASTRA-sim converts GB/s to bytes/ns as x 2^30 / 1e9


def read_astra(spec) -> dict:
    """An ASTRA-sim network.yml (path or parsed mapping), checked field by field."""
    if isinstance(spec, str):
        with open(spec) as fh:
            spec = yaml.safe_load(fh)
    if not isinstance(spec, dict):
        raise ValueError(f"astra network: expected a mapping, got {type(spec).__name__}")
    keys = ("topology", "npus_count", "bandwidth", "latency")
    missing = [k for k in keys if k not in spec]
    if missing:
        raise ValueError(f"astra network.{missing[0]}: is required")
    dims = len(spec["topology"])
    for k in keys:
        if not isinstance(spec[k], list) or len(spec[k]) != dims:
            raise ValueError(f"astra network.{k}: needs one value per dimension ({dims}), got {spec[k]!r}")
    for d in range(dims):
        if spec["topology"][d] not in TOPOLOGIES:
            raise ValueError(f"astra network.topology[{d}]: unknown {spec['topology'][d]!r}; "
                             f"known: {', '.join(TOPOLOGIES)}")
        n, bw, lat = spec["npus_count"][d], spec["bandwidth"][d], spec["latency"][d]
        if not (isinstance(n, int) and n >= 1):
            raise ValueError(f"astra network.npus_count[{d}]: must be a positive integer, got {n!r}")
        if not (isinstance(bw, (int, float)) and bw > 0):
            raise ValueError(f"astra network.bandwidth[{d}]: must be > 0 GB/s, got {bw!r}")
        if not (isinstance(lat, (int, float)) and lat >= 0):
            raise ValueError(f"astra network.latency[{d}]: must be >= 0 ns, got {lat!r}")
    return spec


def from_astra(spec):
    """A fabric graph from an ASTRA-sim network.yml (path or parsed mapping); see the module docstring."""
    spec = read_astra(spec)
    counts = list(spec["npus_count"])
    total = int(np.prod(counts))
    strides = np.cumprod([1] + counts[:-1])
    b = GraphBuilder()
    b.g.graph["num_gpus"] = total
    b.g.graph["astra"] = {"topology": list(spec["topology"]), "npus_count": counts}
    for i in range(total):
        b.g.add_node(f"npu{i}", kind=Kind.GPU, site="astra", rank=i, domain=i // counts[0] if counts[0] > 1 else -1)
    for d, (topo, n) in enumerate(zip(spec["topology"], counts)):
        if n == 1:
            continue
        bw, lat = float(spec["bandwidth"][d]) * ASTRA_GB, float(spec["latency"][d]) * 1e-9
        group = b.group(f"dim{d}", CAPACITY, bw)
        common = dict(tier=f"dim{d}", site="astra", group=group, latency=lat, length_km=0.0, coef=1.0)
        base = [i for i in range(total) if (i // strides[d]) % n == 0]
        for g, first in enumerate(base):
            members = [f"npu{first + c * strides[d]}" for c in range(n)]
            if topo == "Switch":
                switch = f"dim{d}/switch{g}"
                b.g.add_node(switch, kind=Kind.SWITCH, site="astra")
                for m in members:
                    b.cable(m, switch, capacity=bw, **common)
            elif topo == "Ring":
                pairs = {(c, (c + 1) % n) for c in range(n)} | {((c + 1) % n, c) for c in range(n)}
                for u, v in sorted(pairs):
                    b.link(members[u], members[v], direction="across", capacity=bw, **common)
            else:
                for u in range(n):
                    for v in range(n):
                        if u != v:
                            b.link(members[u], members[v], direction="across", capacity=bw, **common)
    return b.g
