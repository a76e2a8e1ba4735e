"""Memory a scenario needs, estimated from its description before anything is built.

A fabric too large for the machine is refused up front (a ``ValueError`` that names the estimate and
what is available) instead of running for minutes and then failing with "out of memory". The
estimate counts what preparing and evaluating a scenario holds per element: nodes and links (as
``fabric.build_table`` makes them) and the flows the routed workloads create (as
``steptime.plan_training`` and the constant loads make them), at a per-element cost calibrated on
the shipped configs.

Calibration (peak RSS of ``flowmodel run``, /usr/bin/time -v, one process each, 2 CPU cores):
quickstart (338 nodes, 1,250 links, 1,152 flows) 546 MB; llama3_24k (29,376 / 148,480 / 131,072)
668 MB; multi_building_129k (153,605 / 778,890 / 384,000) 1,142 MB. Above the quickstart's, that is
395 and 453 bytes per element; the estimate takes 1 KiB per element on a 640 MB base (interpreter,
JAX, compiled programs): 1.7x multi_building_129k's measured peak, so a run it lets through has a
margin for larger routes and solver state. A gradient search holds far more: ``flowmodel optimize``
peaks at 873 MB on the quickstart and had reached 13.5 GB on llama3_24k (one knob, 3 steps; still
running after 400 s), 44 KB per element, so with ``gradients`` the estimate takes 64 KiB per element
on a 1 GB base. Evaluated over S routing seeds at once (``flowmodel.seeds``), every flow counts S
times: multi_building_129k's run peaks at 2,480 MB with 8 seeds (500 bytes more per flow and extra
seed), against an estimate of 4.7 GB. The check refuses what is estimated to need more than is free;
it cannot promise that what it lets through fits (a sweep's vmapped points are not counted).

>>> from flowmodel import _memory, config
>>> _memory.estimate(config.load("configs/quickstart.yaml")).describe()
'256 GPUs, 338 nodes, 1,250 links, 1,152 flows: about 0.6 GB'
>>> _memory.check_fits(config.load("configs/quickstart.yaml"), available=0.1e9)
Traceback (most recent call last):
ValueError: fabric: too large for this machine's memory: 256 GPUs, ... about 0.6 GB estimated, 0.1 GB available
"""

from __future__ import annotations

import dataclasses
import os

BASE_BYTES = 640e6  # interpreter, JAX and the compiled programs: quickstart's run peaks at 546 MB
BYTES_PER_ELEMENT = 1024.0  # per node, link or flow: 453 B measured on multi_building_129k, x2.3
GRADIENT_BASE_BYTES = 1e9  # quickstart's optimize peaks at 873 MB
GRADIENT_BYTES_PER_ELEMENT = 65536.0  # 44 KB reached on llama3_24k's optimize, x1.5


@dataclasses.dataclass(frozen=True)
class Estimate:
    """Element counts of a scenario and the memory they are estimated to need (bytes)."""

    gpus: int
    nodes: int
    links: int
    flows: int
    gradients: bool = False  # a gradient search (flowmodel optimize) over the scenario
    seeds: int = 1  # routing seeds evaluated in one batch: each holds its own routes

    @property
    def bytes(self) -> float:
        elements = self.nodes + self.links + self.flows * self.seeds
        if self.gradients:
            return GRADIENT_BASE_BYTES + GRADIENT_BYTES_PER_ELEMENT * elements
        return BASE_BYTES + BYTES_PER_ELEMENT * elements

    def describe(self) -> str:
        return (f"{self.gpus:,} GPUs, {self.nodes:,} nodes, {self.links:,} links, {self.flows:,} flows"
                f"{f' x {self.seeds} routing seeds' if self.seeds > 1 else ''}"
                f"{' with gradients' if self.gradients else ''}: about {self.bytes / 1e9:.1f} GB")


def fabric_counts(fleet) -> tuple[int, int]:
    """(nodes, directed links) that ``fabric.build_table(fleet)`` makes, without making them."""
    nodes = links = 0
    multi_site = len(fleet.sites) > 1
    for site in fleet.sites:
        n = site.num_gpus
        nodes += n
        su = site.scale_up
        if su is not None:
            domains = n // su.size
            if su.topology == "switch":
                nodes, links = nodes + domains, links + 2 * n
            else:  # full mesh: every ordered pair of a domain
                links += domains * su.size * (su.size - 1)
        clos = site.scale_out
        if clos is None:
            continue
        leaves, spines = clos.leaves_per_pod * clos.pods, clos.spines_per_pod * clos.pods
        nodes += leaves + spines
        links += 2 * n + 2 * leaves * clos.spines_per_pod
        top = spines
        if clos.tiers == 3:
            top = clos.spines_per_pod * clos.aggs_per_plane
            nodes += top
            links += 2 * spines * clos.aggs_per_plane
        if multi_site:  # the border router and a cable from each top-tier switch
            nodes, links = nodes + 1, links + 2 * top
    return nodes, links + 2 * len(fleet.long_haul)


def training_flows(job, scale_up: int = 1) -> int:
    """Flows of one training job's routed collectives (per-layer kinds, pipeline sends, DP reduction);
    ``scale_up``: the largest scale-up domain, which bounds a ring's channels (one per group member in
    a domain)."""
    par, g = job.parallelism, job.parallelism.size
    channels = max(1, min(scale_up // (par.tp * par.cp), job.channels or scale_up))
    flows = 0
    moe = job.model.moe_layers > 0
    if par.tp > 1:  # all-gather and reduce-scatter, one flow per rank each (and the expert-TP pair)
        flows += 2 * g * (1 + moe) * (min(scale_up, job.channels or scale_up) if par.tp > scale_up else 1)
    if par.cp > 1:
        flows += 2 * g
    if moe and par.ep > 1:  # all-to-all: every rank to every other of its group
        flows += g * (par.ep - 1)
    if par.pp > 1:  # forward and backward sends across each stage boundary
        boundaries = par.pp if par.virtual_stages > 1 else par.pp - 1
        flows += 2 * boundaries * (g // par.pp)
    reductions = (par.dp * par.cp > 1) + (moe and job.expert_dp > 1)  # dense, and experts over their group
    # one reduction per virtual stage; a ring sends one flow per rank, a double binary tree 4(n-1)/n
    flows += reductions * g * par.virtual_stages * (4 if job.algorithm == "tree" else channels)
    return flows


def estimate(scenario, *, gradients: bool = False, seeds: int = 1) -> Estimate:
    """The scenario's element counts, from its description alone (``gradients``: for a gradient search;
    ``seeds``: routing seeds evaluated at once)."""
    nodes, links = fabric_counts(scenario.fleet)
    scale_up = max((s.scale_up.size for s in scenario.fleet.sites if s.scale_up is not None), default=1)
    flows = sum(training_flows(job, scale_up) for job in scenario.training)
    for rl in scenario.rl:  # the trainer, the sync (every generator GPU, per channel) and the rollouts
        generators = rl.instances.size
        flows += training_flows(rl.trainer, scale_up) + generators * rl.channels + rl.instances.shape[0]
    flows += sum(4 * len(a.instances) * a.tp for a in scenario.agentic)  # four KV phases, one flow per GPU
    flows += sum(len(b.src) for b in scenario.background)
    for inf in scenario.inference:  # average KV streams plus one request's transfer
        flows += len(inf.prefill) * len(inf.prefill[0]) + len(inf.prefill[0])
    return Estimate(scenario.fleet.num_gpus, nodes, links, flows, gradients, seeds)


def available_bytes() -> float | None:
    """Memory this process may still take: MemAvailable, capped by a cgroup limit; None if unknown."""
    free = None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    free = float(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if free is None:
        try:
            free = float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None
    try:  # a container's limit (cgroup v2) can be far below the host's free memory
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as fh:
            limit = fh.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as fh:
            used = float(fh.read().strip())
        if limit != "max":
            free = min(free, float(limit) - used)
    except (OSError, ValueError):
        pass
    return free


def check_fits(scenario, available: float | None = None, *, gradients: bool = False, seeds: int = 1) -> Estimate:
    """The scenario's estimate; raises ``ValueError`` when it exceeds ``available`` bytes (default:
    what the machine has free now). Unknown free memory is not checked."""
    est = estimate(scenario, gradients=gradients, seeds=seeds)
    available = available_bytes() if available is None else available
    if available is not None and est.bytes > available:
        raise ValueError(f"fabric: too large for this machine's memory: {est.describe()} estimated, "
                         f"{available / 1e9:.1f} GB available")
    return est
