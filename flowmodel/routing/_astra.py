"""Dimension-order routes on an imported ASTRA-sim network (``fabric.from_astra``).

Dimension by dimension, the coordinate is moved to the destination's, the short way round a ring
(ties: forward), as ASTRA-sim's collectives run one dimension at a time.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_endpoints
from ..fabric import FabricInfo, read_astra
from ._paths import Candidates


class AstraRouter:
    """Dimension-order routes on an imported ASTRA-sim network, offered like ``routing.Router``."""

    def __init__(self, info: FabricInfo, spec):
        spec = read_astra(spec)
        self.info = info
        self.topology, self.counts = list(spec["topology"]), list(spec["npus_count"])
        self.strides = np.cumprod([1] + self.counts[:-1])
        self._link = {(int(u), int(v)): i for i, (u, v) in enumerate(zip(info.src, info.dst))}
        self._node = info.node_index

    def _hop(self, a: str, b: str) -> int:
        link = self._link.get((self._node[a], self._node[b]))
        if link is None:
            raise ValueError(f"astra routing: no link {a}->{b} (did a failure remove it?)")
        return link

    def path(self, s: int, t: int) -> list[int]:
        links, here = [], s
        for d, (topo, n) in enumerate(zip(self.topology, self.counts)):
            stride = int(self.strides[d])
            cs, ct = (here // stride) % n, (t // stride) % n
            if cs == ct:
                continue
            there = here + (ct - cs) * stride
            if topo == "FullyConnected":
                links.append(self._hop(f"npu{here}", f"npu{there}"))
            elif topo == "Switch":
                base = here - cs * stride  # the group's NPU with coordinate 0; groups are numbered by it
                group = base % stride + stride * (base // (stride * n))
                links += [self._hop(f"npu{here}", f"dim{d}/switch{group}"),
                          self._hop(f"dim{d}/switch{group}", f"npu{there}")]
            else:
                step = 1 if (ct - cs) % n <= (cs - ct) % n else -1
                c = cs
                while c != ct:
                    nxt = (c + step) % n
                    links.append(self._hop(f"npu{here + (c - cs) * stride}", f"npu{here + (nxt - cs) * stride}"))
                    c = nxt
            here = there
        return links

    def candidates(self, src, dst, *, unreachable: str = "raise"):
        src, dst = check_endpoints(src, dst, self.info.num_gpus, "GPU rank")
        if src.size == 0:
            raise ValueError("src: the flow set is empty")
        paths = [self.path(int(s), int(t)) for s, t in zip(src, dst)]
        width = max(len(p) for p in paths)
        links = np.full((len(paths), width), -1, np.int32)
        for i, p in enumerate(paths):
            links[i, :len(p)] = p
        F = src.size
        ones = np.ones(F, np.int64)
        return Candidates(src=src, dst=dst, links=links, flow=np.arange(F), equal_cost=np.ones(F, bool),
                          first=np.arange(F), count=ones, num_equal=ones, unreachable=np.zeros(0, np.int64))
