"""Chakra traces on flowmodel's fabrics: run one, or export a scenario's training jobs as traces.

The fabric is an ASTRA-sim ``network.yml`` (trace rank r runs on NPU r, routes in dimension order) or
a flowmodel scenario (trace rank r runs on the GPU the trace records for it, as flowmodel's export does,
else on GPU r; routed by the scenario's
routing section, timed with its model options, its inference and background load served first;
other training jobs of the scenario are not part of the trace). An ASTRA-sim ``system.json`` sets the
collective algorithms, the per-step latency, the chunk count and the memory bandwidth of reductions
(``steptime.read_system``); the keys it does not model are listed in the result.

>>> import jax; jax.config.update("jax_enable_x64", True)
>>> import os, tempfile, yaml
>>> from flowmodel import config, scenario, trace
>>> folder = tempfile.mkdtemp()
>>> model = scenario.prepare(config.load("configs/quickstart.yaml"))
>>> exported = trace.export(model, folder)
>>> fabric = trace.Fabric.from_model(model)
>>> result = trace.run(exported["jobs"][model.plans[0].job.name]["prefix"], fabric)
>>> abs(result["makespan_s"] - float(model.step_time())) < 1e-9 * result["makespan_s"]
True
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import re

import numpy as np
import yaml

from . import steptime as st
from .traffic import _chakra as chakra

_KINDS = st.TRACE_NODE_KINDS


@dataclasses.dataclass(frozen=True, eq=False)
class Fabric:
    """Where a trace runs: the compiled network, its router and routing choices, the model options
    and the constant load served first (bytes/s per link, or None)."""

    name: str
    network: object
    info: object
    router: object
    options: st.Options = st.EXACT
    background: object = None
    policy: str = "ecmp"
    seed: int = 0
    qps: int = 4
    source: str = "scenario"
    dims: tuple[int, ...] | None = None  # an ASTRA-sim network's NPUs per dimension

    @classmethod
    def from_model(cls, model) -> Fabric:
        """A prepared scenario's fabric (``scenario.prepare``)."""
        r = model.scenario.routing
        return cls(model.scenario.name, model.network, model.info, model.router, model.options, model.fixed_load,
                   r.policy, r.seed, r.qps, "scenario")

    @classmethod
    def from_astra(cls, path: str) -> Fabric:
        """An ASTRA-sim network.yml: NPU r is trace rank r."""
        from .fabric import compile_fabric, from_astra, read_astra
        from .routing import AstraRouter

        spec = read_astra(path)
        network, info = compile_fabric(from_astra(spec))
        return cls(path, network, info, AstraRouter(info, spec), source="astra",
                   dims=tuple(int(n) for n in spec["npus_count"]))


def is_astra_network(path: str) -> bool:
    """Whether a YAML file is an ASTRA-sim network (``topology`` and ``npus_count``), not a scenario."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and "topology" in data and "npus_count" in data


def run(prefix: str, fabric: Fabric, *, system: str | None = None, comm_groups: str | None = None, gpus=None,
        progress=None) -> dict:
    """Read ``<prefix>.<rank>.et``, run it on ``fabric`` and return ``trace.json``'s figures; the
    ``TraceResult`` and ``PreparedTrace`` ride along under the keys ``"_result"`` and ``"_prepared"``.
    ``gpus``: the GPU of each trace rank (default: the GPUs the trace records, else rank r on GPU r)."""
    say = progress or (lambda message: None)
    say(f"read {prefix}.<rank>.et")
    trace = chakra.read_trace(prefix, comm_groups=comm_groups)
    sysinfo = st.read_system(system) if system is not None else st.TraceSystem()
    options = fabric.options
    if sysinfo.step_latency is not None:
        if options.protocol == "nccl":
            raise ValueError(f"system: {system} sets a per-step latency (endpoint-delay), which model.protocol: nccl "
                             "does not take (NCCL's latencies hold it); run the trace with protocol simple")
        options = dataclasses.replace(options, step_latency=sysinfo.step_latency)
    say(f"match and route {trace.num_nodes} nodes of {trace.num_ranks} ranks")
    prepared = st.prepare_trace(trace, fabric.router, gpus=gpus, policy=fabric.policy, seed=fabric.seed, qps=fabric.qps,
                                algorithms=dict(sysinfo.algorithms), chunks=sysinfo.chunks, dims=fabric.dims,
                                dimensions=dict(sysinfo.dimensions), channels=sysinfo.channels,
                                reduce_bandwidth=sysinfo.reduce_bandwidth)
    say("simulate")
    result = st.simulate_trace(prepared, fabric.network.capacity, fabric.network.latency, options,
                               background=fabric.background)
    static = [float(t) for t in result.class_times]
    classes = [{"name": c.name, "timing": "start times, overlap shares links" if c.dynamic else "all groups at once",
                **({} if c.dynamic else {"time_per_call_s": static[i]})} for i, c in enumerate(prepared.classes)]
    finish = np.asarray(result.finish)
    return {"trace": prefix, "network": fabric.name, "ranks": trace.num_ranks, "nodes": trace.num_nodes,
            "makespan_s": float(result.makespan), "finish_s": finish.tolist(),
            "critical_path": result.critical_path, "classes": classes,
            "system": {"file": system, "algorithms": dict(sysinfo.algorithms), "chunks": sysinfo.chunks,
                       "ring_channels": "auto" if sysinfo.channels is None else sysinfo.channels,
                       "per_dimension": {k: list(v) for k, v in dict(sysinfo.dimensions).items()  # the kinds run so
                                         if fabric.dims and len(v) == len(fabric.dims)},
                       "step_latency_s": options.step_latency, "reduce_bandwidth": sysinfo.reduce_bandwidth,
                       "ignored": list(sysinfo.ignored),
                       "notes": list(sysinfo.notes)},
            "zero_time_nodes": zero_time_nodes(trace),
            "_result": result, "_prepared": prepared}


# Trace nodes the run gives no time, and why (trace.json's ``zero_time_nodes``)
_ZERO_TIME = {
    "barrier": "a barrier synchronises its members and moves no data",
    "single_rank_collective": "a collective on a group of one rank moves no data",
    "send_recv_without_peer": "a send or recv that names no peer has nothing to pair with and is skipped",
    "memory_load": "a memory load with no duration_micros: memory traffic is not modelled",
    "memory_store": "a memory store with no duration_micros: memory traffic is not modelled",
    "metadata": "a metadata node with no duration_micros",
}


def zero_time_nodes(trace) -> dict:
    """Per kind of trace node that takes no time in the run (see ``_ZERO_TIME``): how many and why.
    Kinds absent from the trace are left out."""
    sizes = np.array([len(g) for g in trace.groups] + [trace.num_ranks])  # group -1 is every rank
    counts = dict.fromkeys(_ZERO_TIME, 0)
    for rt in trace.ranks:
        types = rt.types
        coll = types == chakra.COLL
        barrier = coll & np.array([c == "barrier" for c in rt.comm], bool)
        counts["barrier"] += int(barrier.sum())
        counts["single_rank_collective"] += int((coll & ~barrier & (sizes[rt.group] == 1)).sum())
        p2p = (types == chakra.SEND) | (types == chakra.RECV)
        counts["send_recv_without_peer"] += int((p2p & (rt.peer < 0)).sum())
        for key, t in (("memory_load", chakra.MEM_LOAD), ("memory_store", chakra.MEM_STORE),
                       ("metadata", chakra.METADATA)):
            counts[key] += int(((types == t) & (rt.duration == 0)).sum())
    return {k: {"count": n, "why": _ZERO_TIME[k]} for k, n in counts.items() if n}


def nodes_csv(prepared, result) -> str:
    """``trace_nodes.csv``: rank, node id, name, kind, start_s, end_s of every trace node (ranks in
    order, each in file order)."""
    start, end = np.asarray(result.start).tolist(), np.asarray(result.end).tolist()
    kinds = prepared.node_kind[prepared.dag_of].tolist()
    buffer = io.StringIO()
    out = csv.writer(buffer, lineterminator="\n")
    out.writerow(["rank", "node", "name", "kind", "start_s", "end_s"])
    g = 0
    for r, rt in enumerate(prepared.trace.ranks):
        ids = rt.ids.tolist()
        out.writerows((r, ids[i], rt.names[i], _KINDS[kinds[g + i]], start[g + i], end[g + i])
                      for i in range(rt.num_nodes))
        g += rt.num_nodes
    return buffer.getvalue()


def timeline_spans(prepared, result, *, max_ranks: int = 48):
    """``plots.trace_timeline``'s arguments: (spans of up to ``max_ranks`` evenly spaced ranks by kind,
    makespan, critical path as (rank, start, duration))."""
    R = prepared.trace.num_ranks
    shown = sorted(set(np.linspace(0, R - 1, min(R, max_ranks)).round().astype(int).tolist()))
    start, end = np.asarray(result.start), np.asarray(result.end)
    kinds = prepared.node_kind[prepared.dag_of]
    offsets = np.concatenate([[0], np.cumsum([rt.num_nodes for rt in prepared.trace.ranks])])
    spans = {}
    for r in shown:
        sl = slice(int(offsets[r]), int(offsets[r + 1]))
        a, b, k = start[sl], end[sl], kinds[sl]
        spans[r] = {name: [(float(x), float(y - x)) for x, y, kk in zip(a, b, k) if kk == code and y > x]
                    for code, name in enumerate(_KINDS[:3])}
    critical = [(c["rank"], c["start_s"], c["end_s"] - c["start_s"]) for c in result.critical_path]
    return spans, float(result.makespan), critical


def safe_name(name: str) -> str:
    """A job name as a file prefix: letters, digits, ``._-``; anything else becomes ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "job"


def export(model, out: str, *, progress=None) -> dict:
    """Write every training job of a prepared scenario as a Chakra trace ``out/<job>.<rank>.et`` and
    return ``export-trace.json``'s figures (per job: prefix, ranks, nodes, GPUs, and the step time the
    trace should read back to: the job alone on the fabric, with the scenario's constant load)."""
    say = progress or (lambda message: None)
    jobs, taken = {}, set()
    for plan in model.plans:
        name = plan.job.name
        base = stem = safe_name(name)
        k = 1
        while stem in taken:  # "a b" and "a_b" must not share files
            k += 1
            stem = f"{base}_{k}"
        taken.add(stem)
        prefix = os.path.join(out, stem)
        say(f"export {name} to {prefix}.<rank>.et")
        summary = st.export_training(plan, prefix)
        alone = st.step_time(plan, model.network, model.options, info=model.info, background=model.fixed_load)
        jobs[name] = {"prefix": prefix, "ranks": summary["ranks"], "nodes": summary["nodes"],
                      "gpus": summary["gpus"], "step_time_s": float(alone.step_time),
                      "files": [f"{prefix}.<0..{summary['ranks'] - 1}>.et", f"{prefix}.comm_group.json",
                                f"{prefix}.system.json"]}
    return {"scenario": model.scenario.name, "jobs": jobs}
