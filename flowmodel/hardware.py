"""Accelerator presets: peak dense FLOP/s by dtype, HBM, the scale-up domain and the NICs, each figure
with its source (docs/sources.md, "Accelerators").

A site names its accelerator (``Site.accelerator``; YAML ``fabric.sites[i].accelerator: h100_hgx`` or a
mapping). In a scenario file the site's scale-up domain (size, bandwidth, topology) and NIC bandwidth
default from it, and a training job takes its peak FLOP/s and HBM from the sites its GPUs are on,
each pipeline stage from its own sites (``stage_figures``). Units are SI: FLOP/s, bytes, bytes/s; a
field may also be given as a unit string (``"80GB"``, ``"400Gbps"``), read once here.

>>> from flowmodel import hardware
>>> b200 = hardware.preset("b200_hgx")
>>> b200.peak_flops("bf16"), b200.scale_up_size, b200.nic_bandwidth
(2250000000000000.0, 8, 50000000000.0)
>>> hardware.preset("h200")
Traceback (most recent call last):
...
ValueError: accelerator: unknown preset 'h200'; known: h100_hgx, b200_hgx, gb200_nvl72, mi300x, generic
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from . import _units
from ._checks import check_number

DTYPES = ("bf16", "fp8", "fp16", "tf32")
# a model's bytes per element -> the matmul dtype whose peak times its compute (fp32 training runs TF32 matmuls)
DTYPE_OF_BYTES = {1: "fp8", 2: "bf16", 4: "tf32"}
TOPOLOGIES = ("switch", "full_mesh")


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """One accelerator and the system it ships in (its scale-up domain and NICs).

    Attributes:
      name: label.
      bf16_flops, fp8_flops, fp16_flops, tf32_flops: peak dense (not 2:4-sparse) tensor FLOP/s per
        GPU; None where the vendor publishes none.
      hbm: memory per GPU (bytes).  hbm_bandwidth: its peak bandwidth (bytes/s).
      scale_up_size: GPUs per scale-up domain (8 for an HGX board, 72 for an NVL72 rack).
      scale_up_bandwidth: what each GPU sends (and receives) inside the domain, bytes/s per direction
        (NVLink's "900 GB/s" for H100 is both directions together: 450e9 here).
      scale_up_topology: ``switch`` (NVSwitch) or ``full_mesh`` (direct links to each peer, MI300X).
      nics_per_gpu, nic_speed: scale-out NICs per GPU and each one's speed (bytes/s).
      scale_up_efficiency, nic_efficiency: the fraction of the physical scale-up and NIC bandwidth
        collectives reach (NCCL's protocol overhead on large messages, from nccl-tests' busbw; 1 where
        no public figure exists). A site that takes its bandwidth from the preset takes these with it,
        so its links carry bandwidth x efficiency; a site that sets its own bandwidth keeps efficiency 1
        unless it sets one (never both folded in).
      host_bandwidth: each GPU's link to its host's CPU memory, bytes/s per direction (PCIe Gen5 x16:
        64e9; NVLink-C2C on Grace superchips): KV-cache offload and weights staged in host memory cross it.
      sources: (field, where the figure comes from) pairs; docs/sources.md cites each in full.
    """

    name: str
    bf16_flops: float
    hbm: float
    hbm_bandwidth: float
    scale_up_size: int
    scale_up_bandwidth: float
    nic_speed: float
    nics_per_gpu: int = 1
    host_bandwidth: float = 64e9
    scale_up_efficiency: float = 1.0
    nic_efficiency: float = 1.0
    scale_up_topology: str = "switch"
    fp8_flops: float | None = None
    fp16_flops: float | None = None
    tf32_flops: float | None = None
    sources: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"accelerator.name: must be a non-empty string, got {self.name!r}")
        for field, kind in (("hbm", "size"), ("hbm_bandwidth", "bandwidth"), ("scale_up_bandwidth", "bandwidth"),
                            ("nic_speed", "bandwidth"), ("host_bandwidth", "bandwidth")):
            object.__setattr__(self, field, _units.coerce(getattr(self, field), kind, f"accelerator.{field}"))
        for field in ("bf16_flops", "hbm", "hbm_bandwidth", "scale_up_bandwidth", "nic_speed", "host_bandwidth"):
            check_number(f"accelerator.{field}", getattr(self, field), strict=True)
        for dtype in DTYPES[1:]:
            if getattr(self, f"{dtype}_flops") is not None:
                check_number(f"accelerator.{dtype}_flops", getattr(self, f"{dtype}_flops"), strict=True)
        check_number("accelerator.scale_up_size", self.scale_up_size, minimum=1, integer=True)
        for field in ("scale_up_efficiency", "nic_efficiency"):
            v = getattr(self, field)
            if not (isinstance(v, numbers.Real) and not isinstance(v, bool) and 0 < v <= 1):
                raise ValueError(f"accelerator.{field}: must be in (0, 1], got {v!r}")
        check_number("accelerator.nics_per_gpu", self.nics_per_gpu, minimum=1, integer=True)
        if self.scale_up_topology not in TOPOLOGIES:
            raise ValueError(f"accelerator.scale_up_topology: must be 'switch' or 'full_mesh', got "
                             f"{self.scale_up_topology!r}")
        object.__setattr__(self, "sources", tuple(tuple(pair) for pair in self.sources))
        known = {f.name for f in dataclasses.fields(self)} - {"name", "sources"}
        for pair in self.sources:
            if len(pair) != 2 or pair[0] not in known:
                raise ValueError(f"accelerator.sources: expected (field, source) pairs of {sorted(known)}, got "
                                 f"{pair!r}")

    @property
    def nic_bandwidth(self) -> float:
        """Scale-out bytes/s per GPU: ``nics_per_gpu x nic_speed`` (a site's ``scale_out.nic_bandwidth``)."""
        return self.nics_per_gpu * self.nic_speed

    def peak_flops(self, dtype: str = "bf16") -> float:
        """Peak dense FLOP/s per GPU in ``dtype`` (one of ``DTYPES``)."""
        if dtype not in DTYPES:
            raise ValueError(f"accelerator.peak_flops: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        value = getattr(self, f"{dtype}_flops")
        if value is None:
            raise ValueError(f"accelerator.{dtype}_flops: {self.name!r} has no published {dtype} peak; give one "
                             f"or set the job's peak_flops")
        return float(value)

    def source(self, field: str) -> str:
        """Where ``field``'s figure comes from (``""`` when none is recorded)."""
        return dict(self.sources).get(field, "")


# Sources, in short; docs/sources.md, "Accelerators", gives each in full (a test keeps the two in step).
NVIDIA_H100 = "NVIDIA H100 Tensor Core GPU datasheet (SXM5)"
NVIDIA_HGX = "NVIDIA HGX AI Factory reference architecture (2-8-9-400)"
NVIDIA_GB200 = "NVIDIA GB200 NVL72 product page, specifications table"
NVIDIA_NVLINK = "NVIDIA NVLink / NVLink Switch product page"
MLPERF_GB200 = "MLPerf Inference v6.1 system description, GB200-NVL72 (Crusoe)"
AMD_MI300X = "AMD Instinct MI300X data sheet"
ROCM_MI300X = "ROCm MI300X workload tuning guide (node-level architecture)"
AZURE_MI300X = "Azure ND MI300X v5-series specifications"
ILLUSTRATIVE = "illustrative round figures, no product"
PCIE5 = "PCI Express Base Specification 5.0 (x16 link)"
NCCL_H100 = "nccl-tests issue #212 (8x H100 NVLink4 busbw)"
NCCL_NDR = "nccl-tests issue #290 (NDR 400 Gb/s busbw per NIC)"
CARRIED = "carried over from h100_hgx's nccl-tests anchors"


def _sourced(**figures):
    """Accelerator keyword arguments from ``field=(value, source)`` pairs."""
    kwargs = {k: v for k, v in figures.items() if not isinstance(v, tuple)}
    values = {k: v for k, v in figures.items() if isinstance(v, tuple)}
    return dict(kwargs, **{k: v for k, (v, _) in values.items()}, sources=tuple((k, s) for k, (_, s) in values.items()))


PRESETS: dict[str, Accelerator] = {
    # H100 SXM5 on an 8-GPU HGX board. NVLink 4: 900 GB/s both directions = 450 GB/s each way, the physical
    # figure, of which NCCL's ring reaches 370 GB/s busbw (efficiency 0.822), and 47 of a 400G NIC's 50 GB/s
    # (0.94); the shipped configs without a preset keep ASTRA-sim's effective 400 GB/s (docs/sources.md).
    "h100_hgx": Accelerator(**_sourced(
        name="h100_hgx", bf16_flops=(989.4e12, NVIDIA_H100), fp16_flops=(989.4e12, NVIDIA_H100),
        fp8_flops=(1978.9e12, NVIDIA_H100), tf32_flops=(494.7e12, NVIDIA_H100), hbm=(80e9, NVIDIA_H100),
        hbm_bandwidth=(3.35e12, NVIDIA_H100), scale_up_size=(8, NVIDIA_HGX), scale_up_bandwidth=(450e9, NVIDIA_H100),
        nics_per_gpu=(1, NVIDIA_HGX), nic_speed=(50e9, NVIDIA_HGX), host_bandwidth=(64e9, NVIDIA_H100),
        scale_up_efficiency=(370 / 450, NCCL_H100), nic_efficiency=(47 / 50, NCCL_NDR))),
    # B200 on an 8-GPU HGX board (1,000 W configuration); NVLink 5: 1.8 TB/s per GPU = 900 GB/s each way.
    "b200_hgx": Accelerator(**_sourced(
        name="b200_hgx", bf16_flops=(2.25e15, NVIDIA_GB200), fp16_flops=(2.25e15, NVIDIA_GB200),
        fp8_flops=(4.5e15, NVIDIA_GB200), tf32_flops=(1.1e15, NVIDIA_GB200), hbm=(180e9, NVIDIA_GB200),
        hbm_bandwidth=(7.7e12, NVIDIA_GB200), scale_up_size=(8, NVIDIA_HGX), scale_up_bandwidth=(900e9, NVIDIA_GB200),
        nics_per_gpu=(1, NVIDIA_HGX), nic_speed=(50e9, NVIDIA_HGX), host_bandwidth=(64e9, PCIE5),
        scale_up_efficiency=(370 / 450, CARRIED), nic_efficiency=(47 / 50, CARRIED))),
    # GB200 NVL72: 72 Blackwell GPUs (1,200 W configuration) in one NVLink 5 domain, 900 GB/s each way per GPU.
    "gb200_nvl72": Accelerator(**_sourced(
        name="gb200_nvl72", bf16_flops=(2.5e15, NVIDIA_GB200), fp16_flops=(2.5e15, NVIDIA_GB200),
        fp8_flops=(5e15, NVIDIA_GB200), tf32_flops=(1.25e15, NVIDIA_GB200), hbm=(186e9, NVIDIA_GB200),
        hbm_bandwidth=(8e12, NVIDIA_GB200), scale_up_size=(72, NVIDIA_GB200),
        scale_up_bandwidth=(900e9, NVIDIA_NVLINK), nics_per_gpu=(1, MLPERF_GB200), nic_speed=(50e9, MLPERF_GB200),
        host_bandwidth=(225e9, NVIDIA_GB200), scale_up_efficiency=(370 / 450, CARRIED),
        nic_efficiency=(47 / 50, CARRIED))),
    # MI300X on an 8-GPU platform: seven Infinity Fabric links of 128 GB/s (both directions), one to each peer:
    # 448 GB/s each way per GPU, 64 GB/s to each peer.
    "mi300x": Accelerator(**_sourced(
        name="mi300x", bf16_flops=(1307.4e12, AMD_MI300X), fp16_flops=(1307.4e12, AMD_MI300X),
        fp8_flops=(2614.9e12, AMD_MI300X), tf32_flops=(653.7e12, AMD_MI300X), hbm=(192e9, AMD_MI300X),
        hbm_bandwidth=(5.3e12, AMD_MI300X), scale_up_size=(8, ROCM_MI300X), scale_up_bandwidth=(448e9, ROCM_MI300X),
        scale_up_topology=("full_mesh", ROCM_MI300X), nics_per_gpu=(1, AZURE_MI300X), nic_speed=(50e9, AZURE_MI300X),
        host_bandwidth=(64e9, AMD_MI300X))),
    # A slower building's accelerator for studies (half an H100 in compute, a 200 Gbps NIC): no product.
    "generic": Accelerator(**_sourced(
        name="generic", bf16_flops=(500e12, ILLUSTRATIVE), fp16_flops=(500e12, ILLUSTRATIVE),
        fp8_flops=(1e15, ILLUSTRATIVE), tf32_flops=(250e12, ILLUSTRATIVE), hbm=(64e9, ILLUSTRATIVE),
        hbm_bandwidth=(2e12, ILLUSTRATIVE), scale_up_size=(8, ILLUSTRATIVE), scale_up_bandwidth=(200e9, ILLUSTRATIVE),
        nics_per_gpu=(1, ILLUSTRATIVE), nic_speed=(25e9, ILLUSTRATIVE), host_bandwidth=(32e9, ILLUSTRATIVE))),
}


def preset(name: str, where: str = "accelerator") -> Accelerator:
    """The preset called ``name``; an unknown name is a ``ValueError`` naming ``where`` and the known ones."""
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"{where}: unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]


def stage_figures(fleet, parallelism, ranks, dtype_bytes: int, *, peak_flops: float,
                  hbm: float) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """Per pipeline stage (rank of the pipeline; its virtual stages share it), the peak FLOP/s and HBM of
    the accelerators its GPUs are on: the slowest and the smallest where a stage spans several.

    Every DP replica's copy of a stage counts, so a stage is as slow as its slowest copy (the replicas
    meet at every DP reduction). GPUs on a site without an accelerator, or beyond the fleet, take
    ``peak_flops`` and ``hbm``. Returns None when none of the job's GPUs is on a site with one.

    Args:
      fleet: the ``Fleet`` (sites in rank order, each with ``num_gpus`` and ``accelerator``).
      parallelism: the job's ``Parallelism``; ranks: its GPU ranks in order.
      dtype_bytes: the model's bytes per element (``DTYPE_OF_BYTES`` picks the dtype of the peak).
    """
    sites = fleet.sites
    if all(site.accelerator is None for site in sites):
        return None
    grid = parallelism.grid(ranks)  # [dp, pp, cp, tp]
    ends = np.cumsum([site.num_gpus for site in sites])
    dtype = DTYPE_OF_BYTES.get(dtype_bytes)
    flops, memory, any_site = [], [], False
    for s in range(parallelism.pp):
        gpus = grid[:, s].reshape(-1)
        where = np.unique(np.searchsorted(ends, gpus, side="right"))  # site index of each GPU; len(sites): beyond
        stage_flops, stage_hbm = [], []
        for i in where.tolist():
            acc = sites[i].accelerator if i < len(sites) else None
            if acc is None:
                stage_flops.append(peak_flops)
                stage_hbm.append(hbm)
                continue
            any_site = True
            if dtype is None:
                raise ValueError(f"model.dtype_bytes: {dtype_bytes} has no matmul dtype to read site "
                                 f"{sites[i].name!r}'s {acc.name} peak at (1: fp8, 2: bf16, 4: tf32); set peak_flops")
            try:
                stage_flops.append(acc.peak_flops(dtype))
            except ValueError as e:
                raise ValueError(f"sites[{sites[i].name}].{e}") from None
            stage_hbm.append(float(acc.hbm))
        flops.append(float(min(stage_flops)))
        memory.append(float(min(stage_hbm)))
    return (tuple(flops), tuple(memory)) if any_site else None


def accelerator_of(fleet, rank: int) -> Accelerator | None:
    """The accelerator of the site GPU ``rank`` is on (None: a site without one, or beyond the fleet)."""
    ends = np.cumsum([site.num_gpus for site in fleet.sites])
    i = int(np.searchsorted(ends, rank, side="right"))
    return fleet.sites[i].accelerator if i < len(fleet.sites) else None


def serving_figures(fleet, ranks, dtype_bytes: int, *, peak: bool = True) -> dict[str, float]:
    """peak_flops (in the model's dtype; with ``peak``), hbm_bandwidth and host_bandwidth of inference
    GPUs ``ranks`` from their sites' accelerators: the slowest where they span several; empty when none
    has one."""
    accs = [a for a in {accelerator_of(fleet, int(r)) for r in ranks} if a is not None]
    if not accs:
        return {}
    out = {"hbm_bandwidth": min(a.hbm_bandwidth for a in accs), "host_bandwidth": min(a.host_bandwidth for a in accs)}
    if peak:
        dtype = DTYPE_OF_BYTES.get(dtype_bytes)
        if dtype is None:
            raise ValueError(f"model.dtype_bytes: {dtype_bytes} has no matmul dtype to read the accelerator's peak "
                             f"at (1: fp8, 2: bf16, 4: tf32); set peak_flops")
        out["peak_flops"] = min(a.peak_flops(dtype) for a in accs)
    return out
