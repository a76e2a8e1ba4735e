"""Links beside the fabric's: each GPU's host link and each site's storage.

A GPU reaches its host's CPU memory over its host link (PCIe, or NVLink-C2C on Grace superchips), one
link each way. A site's storage (a checkpoint store, a KV-cache store) sits at the top of its scale-out
fabric, with an ingest and an egress of its own bandwidth. These links are appended after the
fabric's L links, so the exact kernels time a flow that crosses them like any other
(``RoutedPhase.attached``). A GPU climbs to its site's storage one up-link per level, spread over the
GPUs in mixed radix so that every up-link carries the same number of them (``climb``).

Appended links, in order: host link in (CPU -> GPU) of every GPU listed, host link out (GPU -> CPU),
then storage ingest of every site listed, storage egress.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from ..fabric import FabricInfo, Tier
from ..kernels import link_bytes
from ..routing import Unreachable
from ..routing._policies import SubFlows
from ..traffic._collectives import Phase
from ._comm import RoutedPhase, domain_of

_CLIMB = (Tier.NIC, Tier.LEAF_SPINE, Tier.SPINE_AGGREGATION)  # the scale-out path up to the storage


def climb(info: FabricInfo, ranks, where: str = "storage") -> list[list[int]]:
    """Each GPU rank's up-path from its NIC to its site's top tier (link indices), spread evenly over
    the up-links of every level. Raises ``Unreachable`` (naming ``where``) for a GPU with no scale-out
    path: a failure scenario reports the workload lost, as it does a job without a route."""
    up: dict[int, list[int]] = {}
    for i in np.flatnonzero((info.direction == "up") & np.isin(info.tier, _CLIMB)):
        up.setdefault(int(info.src[i]), []).append(int(i))
    paths = []
    for r in np.asarray(ranks, np.int64).tolist():
        node, radix, path = int(info.gpus[r]), 1, []
        while node in up:
            links = up[node]
            path.append(links[(r // radix) % len(links)])
            radix *= len(links)
            node = int(info.dst[path[-1]])
        if not path:
            raise Unreachable(f"{where}: GPU rank {r} has no scale-out path to its site's storage")
        paths.append(path)
    return paths


def descents(info: FabricInfo, paths: list[list[int]]) -> list[list[int]]:
    """The reverse of each up-path: the same links the other way, top first."""
    reverse = {(int(u), int(v)): i for i, (u, v) in enumerate(zip(info.src, info.dst))}  # built once
    return [[reverse[(int(info.dst[i]), int(info.src[i]))] for i in reversed(path)] for path in paths]


@dataclasses.dataclass(frozen=True, eq=False)
class Attached:
    """The host links of ``gpus`` (int64[G] ranks) and, with a storage bandwidth, the storage of the
    sites they are on, appended after the fabric's links; ``capacity`` float64[2G + 2S] (S = 0 without
    storage)."""

    info: FabricInfo
    gpus: np.ndarray
    sites: tuple[int, ...]
    capacity: np.ndarray

    @classmethod
    def of(cls, info: FabricInfo, gpus, host_bandwidth: float, storage_bandwidth: float = 0.0) -> Attached:
        gpus = np.unique(np.asarray(gpus, np.int64))
        if not host_bandwidth > 0 or storage_bandwidth < 0:
            raise ValueError(f"attached links: host bandwidth must be > 0 and storage bandwidth >= 0, got "
                             f"{host_bandwidth!r} and {storage_bandwidth!r}")
        on = {info.site_of(int(info.gpus[r])) for r in gpus.tolist()}
        sites = tuple(sorted(on)) if storage_bandwidth > 0 else ()
        capacity = np.concatenate([np.full(2 * gpus.size, float(host_bandwidth)),
                                   np.full(2 * len(sites), float(storage_bandwidth))])
        return cls(info, gpus, sites, capacity)

    @property
    def num_links(self) -> int:
        """The fabric's links and these together: what the phases' routes index."""
        return self.info.num_links + self.capacity.size

    def _gpu(self, rank: int) -> int:
        i = int(np.searchsorted(self.gpus, rank))
        if i >= self.gpus.size or self.gpus[i] != rank:
            raise ValueError(f"attached links: GPU rank {rank} has no host link here")
        return i

    def host_in(self, rank: int) -> int:
        """The link CPU memory -> GPU ``rank``."""
        return self.info.num_links + self._gpu(rank)

    def host_out(self, rank: int) -> int:
        """The link GPU ``rank`` -> CPU memory."""
        return self.info.num_links + self.gpus.size + self._gpu(rank)

    def _site(self, rank: int) -> int:
        return self.sites.index(self.info.site_of(int(self.info.gpus[rank])))

    def storage_in(self, rank: int) -> int:
        """The ingest of the storage of GPU ``rank``'s site."""
        return self.info.num_links + 2 * self.gpus.size + self._site(rank)

    def storage_out(self, rank: int) -> int:
        """The egress of the storage of GPU ``rank``'s site."""
        return self.info.num_links + 2 * self.gpus.size + len(self.sites) + self._site(rank)

    def phase(self, ranks, paths: list[list[int]], sizes, steps: int = 1) -> RoutedPhase:
        """A pinned phase: flow i of GPU ``ranks[i]`` follows ``paths[i]`` (link indices, fabric or
        appended) with ``sizes[i]`` bytes; ``steps`` latency terms. Its domain is the widest its
        fabric links cross (host links alone: scale_up)."""
        ranks = np.asarray(ranks, np.int64)
        sizes = np.broadcast_to(np.asarray(sizes, np.float64), ranks.shape).copy()
        F = ranks.size
        if F == 0:
            return RoutedPhase(Phase(ranks, ranks, sizes, 0), None, sizes, "scale_up")
        routes = np.full((F, max(len(p) for p in paths)), -1, np.int32)
        for f, p in enumerate(paths):
            routes[f, :len(p)] = p
        first = np.arange(F, dtype=np.int64)
        sub = SubFlows(routes, first, np.ones(F), first, np.ones(F, np.int64), np.zeros(0, np.int64))
        domain = domain_of(self.info, np.where(routes < self.info.num_links, routes, -1))
        return RoutedPhase(Phase(ranks, ranks, sizes, steps), sub, sizes, domain, None, self.num_links,
                           self.capacity, reverse=self.info.reverse, packet_links=self.info.packet_links)


def fabric_bytes(rp: RoutedPhase | None, num_links: int):
    """float[L] bytes the phase puts on each of the fabric's ``num_links`` links (its attached links
    left out)."""
    if rp is None or rp.sub is None:
        return jnp.zeros(num_links)
    return link_bytes(rp.sub.routes, rp.sub.sizes(rp.sizes), max(num_links, rp.num_links))[:num_links]

