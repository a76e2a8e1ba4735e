"""Descriptions of fabrics: frozen dataclasses that validate themselves, and topology helpers.

A fleet is a tuple of sites joined by long-haul links. Each site is one scale-out Clos whose GPUs are
grouped into scale-up domains. Units are SI: bytes/s, seconds, km; a field may also be given as the
config's unit string (``"400Gbps"``, ``"2us"``, ``"10km"``), read once here. Every bad value raises a
``ValueError`` that names the field and the value.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping, Sequence

from .. import _units
from .._checks import check_number
from ..hardware import Accelerator, preset

FIBRE_DELAY_S_PER_KM = 4.9e-6  # light in fibre: ~1,000 km is ~10 ms round trip (docs/sources.md)


def _check_efficiency(where: str, value) -> None:
    if not (isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 < value <= 1):
        raise ValueError(f"{where}: must be in (0, 1], got {value!r}")


def _read_units(spec, where: str, **kinds: str) -> None:
    """Fields given as unit strings (``"400Gbps"``, ``"2us"``, ``"10km"``) become SI numbers, read as
    the YAML loader reads them; numbers pass unchanged to the field checks."""
    for name, kind in kinds.items():
        object.__setattr__(spec, name, _units.coerce(getattr(spec, name), kind, f"{where}.{name}"))


@dataclasses.dataclass(frozen=True)
class ScaleUp:
    """A scale-up domain: ``size`` accelerators on one switch (NVSwitch-like) or fully connected.

    Attributes:
      size: accelerators per domain (8 for HGX, 72 for a rack-scale domain).
      bandwidth: bytes/s each accelerator can send (and receive) inside the domain. On a switch each
        accelerator has one link of this capacity each way; fully connected, each of its ``size - 1``
        links gets ``bandwidth / (size - 1)``.
      latency: seconds from one accelerator to another (split evenly over the hops).
      topology: ``"switch"`` or ``"full_mesh"``.
      efficiency: the fraction of ``bandwidth`` collectives reach (NCCL's protocol overhead); the
        links carry ``bandwidth x efficiency``. 1 where ``bandwidth`` is already an effective figure
        (the default 400 GB/s is); an accelerator preset's physical figure comes with its own.
    """

    size: int = 8
    bandwidth: float = 400e9  # ASTRA-sim's validated HGX-H100 setting (docs/sources.md, scale-up)
    latency: float = 936e-9
    topology: str = "switch"
    efficiency: float = 1.0

    def __post_init__(self):
        _read_units(self, "scale_up", bandwidth="bandwidth", latency="time")
        check_number("scale_up.size", self.size, minimum=1, integer=True)
        check_number("scale_up.bandwidth", self.bandwidth, strict=True)
        check_number("scale_up.latency", self.latency)
        if self.topology not in ("switch", "full_mesh"):
            raise ValueError(f"scale_up.topology: must be 'switch' or 'full_mesh', got {self.topology!r}")
        _check_efficiency("scale_up.efficiency", self.efficiency)


@dataclasses.dataclass(frozen=True)
class Clos:
    """A 2- or 3-tier scale-out Clos (leaf = rack/rail switch, spine, aggregation).

    Structure: ``pods`` pods, each of ``leaves_per_pod`` leaves with ``gpus_per_leaf`` NIC ports and
    ``spines_per_pod`` spines; every leaf connects to every spine of its pod. With three tiers, spine
    ``j`` of every pod connects to the ``aggs_per_plane`` aggregation switches of plane ``j`` (so there
    are ``spines_per_pod * aggs_per_plane`` aggregation switches). A 2-tier Clos has one pod.

    Capacities: ``oversubscription[i]`` = (capacity into tier i from below) / (capacity from tier i to
    tier i+1), a continuous ratio: 7.0 is 7:1, 0.5 is 1:2 (undersubscribed). One number applies to
    every upper tier; the default is non-blocking (1.0). A leaf's uplink capacity
    is ``gpus_per_leaf * nic_bandwidth / oversubscription[0]``, split evenly over its spines; a spine's
    is its downlink capacity over ``oversubscription[1]``, split over its plane's aggregation
    switches. Both directions of a cable get the same capacity.

    Rail-optimized: GPU ``r`` of every scale-up domain (its rail) goes to a leaf of rail ``r``, so a leaf
    serves one rail of ``gpus_per_leaf`` domains (the GPU count must be divisible by
    ``scale_up.size * gpus_per_leaf``).

    Attributes:
      tiers: 2 (leaf, spine) or 3 (leaf, spine, aggregation).
      nic_bandwidth: bytes/s per GPU NIC (400 Gbps = 50e9).
      nic_efficiency: the fraction of ``nic_bandwidth`` collectives reach (as ``ScaleUp.efficiency``):
        the NIC links carry ``nic_bandwidth x nic_efficiency``; the tiers above are sized on the
        physical ``nic_bandwidth``.
      latency: seconds per scale-out link.
      radix: optional switch port count; when given, every switch's port count (one port per
        neighbour) must fit in it.
    """

    tiers: int = 2
    gpus_per_leaf: int = 16
    leaves_per_pod: int = 16
    spines_per_pod: int = 16
    pods: int = 1
    aggs_per_plane: int = 1
    nic_bandwidth: float = 50e9
    oversubscription: float | tuple[float, ...] | None = None
    latency: float = 1e-6
    rail_optimized: bool = False
    radix: int | None = None
    nic_efficiency: float = 1.0

    def __post_init__(self):
        if self.tiers not in (2, 3):
            raise ValueError(f"scale_out.tiers: must be 2 or 3, got {self.tiers!r}")
        _read_units(self, "scale_out", nic_bandwidth="bandwidth", latency="time")
        for name in ("gpus_per_leaf", "leaves_per_pod", "spines_per_pod", "pods", "aggs_per_plane"):
            check_number(f"scale_out.{name}", getattr(self, name), minimum=1, integer=True)
        if self.tiers == 2 and self.pods != 1:
            raise ValueError(f"scale_out.pods: a 2-tier Clos has one pod, got {self.pods!r}")
        check_number("scale_out.nic_bandwidth", self.nic_bandwidth, strict=True)
        _check_efficiency("scale_out.nic_efficiency", self.nic_efficiency)
        check_number("scale_out.latency", self.latency)
        ratios = self.oversubscription
        if ratios is None:  # non-blocking
            ratios = 1.0
        if isinstance(ratios, numbers.Real) and not isinstance(ratios, bool):  # one ratio for every upper tier
            ratios = (ratios,) * (self.tiers - 1)
        elif isinstance(ratios, (bool, str, bytes)) or not hasattr(ratios, "__iter__"):
            raise ValueError(f"scale_out.oversubscription: expected a ratio or a list of ratios, got {ratios!r}")
        real = lambda x: isinstance(x, numbers.Real) and not isinstance(x, bool)  # noqa: E731 (numpy scalars too)
        object.__setattr__(self, "oversubscription", tuple(float(x) if real(x) else x for x in ratios))
        if len(self.oversubscription) != self.tiers - 1:
            raise ValueError(f"scale_out.oversubscription: needs {self.tiers - 1} ratio(s) for {self.tiers} "
                             f"tiers, got {self.oversubscription!r}")
        for i, ratio in enumerate(self.oversubscription):
            check_number(f"scale_out.oversubscription[{i}]", ratio, strict=True)
        if self.radix is not None:
            check_number("scale_out.radix", self.radix, minimum=1, integer=True)
            ports = {"leaf": self.gpus_per_leaf + self.spines_per_pod,
                     "spine": self.leaves_per_pod + (self.aggs_per_plane if self.tiers == 3 else 0)}
            if self.tiers == 3:
                ports["aggregation"] = self.pods
            for switch, n in ports.items():
                if n > self.radix:
                    raise ValueError(f"scale_out.radix: a {switch} switch needs {n} ports, radix is {self.radix}")

    @classmethod
    def from_radix(cls, radix: int, *, tiers: int = 3, **kwargs) -> Clos:
        """The largest non-blocking layout of ``radix``-port switches (a k-ary fat-tree for 3 tiers)."""
        check_number("scale_out.radix", radix, minimum=1, integer=True)
        if radix % 2:
            raise ValueError(f"scale_out.radix: must be even, got {radix!r}")
        half = radix // 2
        if tiers == 2:
            shape = dict(gpus_per_leaf=half, leaves_per_pod=radix, spines_per_pod=half, pods=1, aggs_per_plane=1)
        else:
            shape = dict(gpus_per_leaf=half, leaves_per_pod=half, spines_per_pod=half, pods=radix,
                         aggs_per_plane=half)
        kwargs.setdefault("oversubscription", (1.0,) * (tiers - 1))
        return cls(tiers=tiers, radix=radix, **shape, **kwargs)

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_leaf * self.leaves_per_pod * self.pods


@dataclasses.dataclass(frozen=True)
class Site:
    """One building, campus or region: scale-up domains on a scale-out Clos.

    Attributes:
      name: unique; prefixes every node of the site (``"b0/leaf3"``).
      scale_out: the Clos; ``None`` for a site that is a single scale-up domain.
      scale_up: the domains the site's GPUs are grouped into (consecutive ranks); ``None`` for none.
      border_oversubscription: (capacity of the top tier) / (capacity from the top tier to the site's
        border router), used only when long-haul links leave the site.
      accelerator: the site's GPUs (a ``flowmodel.hardware`` preset name or ``Accelerator``). A
        scenario file fills the site's unset scale-up and NIC keys from it and gives its training jobs
        per-stage peak FLOP/s and HBM; in Python the fields stay as given, and
        ``hardware.stage_figures`` gives a job's ``stage_peak_flops`` and ``stage_hbm``.
    """

    name: str
    scale_out: Clos | None = dataclasses.field(default_factory=Clos)
    scale_up: ScaleUp | None = dataclasses.field(default_factory=ScaleUp)
    border_oversubscription: float = 1.0
    accelerator: Accelerator | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or "/" in self.name:
            raise ValueError(f"site.name: must be a non-empty string without '/', got {self.name!r}")
        where = f"sites[{self.name}]"
        if self.scale_out is None and self.scale_up is None:
            raise ValueError(f"{where}: needs a scale_out fabric, a scale_up domain or both")
        _read_units(self, where, border_oversubscription="ratio")
        if isinstance(self.accelerator, str):
            object.__setattr__(self, "accelerator", preset(self.accelerator, f"{where}.accelerator"))
        elif self.accelerator is not None and not isinstance(self.accelerator, Accelerator):
            raise ValueError(f"{where}.accelerator: expected a preset name or an Accelerator, got {self.accelerator!r}")
        check_number(f"{where}.border_oversubscription", self.border_oversubscription, strict=True)
        if self.scale_out is not None and self.scale_up is not None:
            n, d = self.scale_out.num_gpus, self.scale_up.size
            if n % d:
                raise ValueError(f"{where}.scale_up.size: {d} does not divide the site's {n} GPUs")
            if self.scale_out.rail_optimized and n % (d * self.scale_out.gpus_per_leaf):
                raise ValueError(f"{where}.scale_out.rail_optimized: needs the GPU count {n} divisible by "
                                 f"scale_up.size * gpus_per_leaf = {d * self.scale_out.gpus_per_leaf}")
        elif self.scale_out is not None and self.scale_out.rail_optimized:
            raise ValueError(f"{where}.scale_out.rail_optimized: rails need scale_up domains")

    @property
    def num_gpus(self) -> int:
        return self.scale_out.num_gpus if self.scale_out is not None else self.scale_up.size


@dataclasses.dataclass(frozen=True)
class LongHaul:
    """A bidirectional long-haul link between the border routers of two sites.

    Attributes:
      a, b: site names.
      capacity: bytes/s each way (a tunable parameter: link group ``"long_haul/a-b"``).
      length_km: fibre length; latency is ``length_km * FIBRE_DELAY_S_PER_KM`` plus ``extra_latency``.
    """

    a: str
    b: str
    capacity: float
    length_km: float
    extra_latency: float = 0.0

    def __post_init__(self):
        where = f"long_haul[{self.a}-{self.b}]"
        if self.a == self.b:
            raise ValueError(f"{where}: a long-haul link joins two different sites, got {self.a!r} twice")
        _read_units(self, where, capacity="bandwidth", length_km="length", extra_latency="time")
        check_number(f"{where}.capacity", self.capacity, strict=True)
        check_number(f"{where}.length_km", self.length_km)
        check_number(f"{where}.extra_latency", self.extra_latency)

    @property
    def name(self) -> str:
        return f"{self.a}-{self.b}"

    @property
    def latency(self) -> float:
        return self.length_km * FIBRE_DELAY_S_PER_KM + self.extra_latency


@dataclasses.dataclass(frozen=True)
class Fleet:
    """Sites and the long-haul links joining them. Every site must reach every other."""

    sites: tuple[Site, ...]
    long_haul: tuple[LongHaul, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "sites", tuple(self.sites))
        object.__setattr__(self, "long_haul", tuple(self.long_haul))
        if not self.sites:
            raise ValueError("fleet.sites: must name at least one site, got none")
        names = [s.name for s in self.sites]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ValueError(f"fleet.sites: site name {dup!r} is used twice")
        known = set(names)
        pairs = set()
        for link in self.long_haul:
            for end in (link.a, link.b):
                if end not in known:
                    raise ValueError(f"long_haul[{link.name}]: unknown site {end!r} (sites: {sorted(known)})")
            key = frozenset((link.a, link.b))
            if key in pairs:
                raise ValueError(f"long_haul[{link.name}]: sites {link.a!r} and {link.b!r} are joined twice")
            pairs.add(key)
        # connectivity over long-haul links: a union-find would do, but the site count is small
        reach, frontier = {names[0]}, [names[0]]
        while frontier:
            here = frontier.pop()
            for link in self.long_haul:
                for u, v in ((link.a, link.b), (link.b, link.a)):
                    if u == here and v not in reach:
                        reach.add(v)
                        frontier.append(v)
        if len(reach) != len(names):
            lost = [n for n in names if n not in reach]
            raise ValueError(f"fleet.long_haul: sites {lost} are disconnected from site {names[0]!r}")

    @property
    def num_gpus(self) -> int:
        return sum(s.num_gpus for s in self.sites)


def _per_segment(where: str, value, count: int) -> list[float]:
    values = list(value) if isinstance(value, Sequence) and not isinstance(value, str) else [value] * count
    if len(values) != count:
        raise ValueError(f"{where}: needs {count} values (one per segment), got {len(values)}")
    return values


def full_mesh(sites: Sequence[str], *, capacity: float, length_km: float | Sequence[float]) -> tuple[LongHaul, ...]:
    """Every pair of sites joined directly (buildings on a campus). Lengths per pair in
    ``itertools.combinations`` order, or one length for all."""
    pairs = [(a, b) for i, a in enumerate(sites) for b in sites[i + 1:]]
    lengths = _per_segment("full_mesh.length_km", length_km, len(pairs))
    return tuple(LongHaul(a, b, capacity, km) for (a, b), km in zip(pairs, lengths))


def ring(sites: Sequence[str], *, capacity: float | Sequence[float],
         length_km: float | Sequence[float]) -> tuple[LongHaul, ...]:
    """Sites joined in a ring, segment ``i`` from ``sites[i]`` to ``sites[i+1]`` (the last closes it).
    Two sites make a single link, not a double one."""
    if len(sites) < 2:
        raise ValueError(f"ring.sites: needs at least 2 sites, got {list(sites)}")
    count = len(sites) if len(sites) > 2 else 1
    caps = _per_segment("ring.capacity", capacity, count)
    lengths = _per_segment("ring.length_km", length_km, count)
    return tuple(LongHaul(sites[i], sites[(i + 1) % len(sites)], caps[i], lengths[i]) for i in range(count))


def ring_of_regions(regions: Mapping[str, Sequence[str]], *, campus_capacity: float, campus_km: float,
                    ring_capacity: float | Sequence[float],
                    ring_km: float | Sequence[float]) -> tuple[LongHaul, ...]:
    """Campuses (a full mesh of each region's sites) joined in a ring through each region's first site."""
    links = []
    for region, sites in regions.items():
        if not sites:
            raise ValueError(f"ring_of_regions.regions[{region}]: has no sites")
        links += full_mesh(list(sites), capacity=campus_capacity, length_km=campus_km)
    hubs = [sites[0] for sites in regions.values()]
    links += ring(hubs, capacity=ring_capacity, length_km=ring_km)
    return tuple(links)


def meta_24k(*, nic_bandwidth: float = 50e9, aggregation_oversubscription: float = 7.0) -> Fleet:
    """Meta's 24K-GPU Llama 3 cluster (docs/sources.md, "Meta's 24K-GPU cluster").

    24,576 GPUs: HGX servers of 8 GPUs, 2 per rack (16 GPUs per rack switch), 192 racks per AI zone,
    8 zones. Rack -> cluster switch 1:2 (undersubscribed), cluster -> aggregation 7:1. Assumed where
    the public figures are silent: 16 cluster switches per zone (one per rack uplink pair) and 4
    aggregation switches per plane.
    """
    clos = Clos(tiers=3, gpus_per_leaf=16, leaves_per_pod=192, spines_per_pod=16, pods=8, aggs_per_plane=4,
                nic_bandwidth=nic_bandwidth, oversubscription=(0.5, aggregation_oversubscription))
    return Fleet(sites=(Site("zone_cluster", scale_out=clos, scale_up=ScaleUp(size=8)),))
