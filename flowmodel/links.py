"""The link-level view of an evaluated scenario: what every link carries, how full it runs, which
collectives cross it, and each collective's flow-completion-time distribution.

``Model.links(fleet)`` builds a :class:`LinkView` from the routed phases the evaluation timed, each
replayed on the same kernel inputs (``steptime.fluid_inputs``) and the same capacity: the link's,
less what the fleet coupling reserved for the phase (constant-rate classes, inference's average KV
load, and the average load of the jobs its job is coupled with, at the evaluation's step times). The
DP reduction starts where the evaluation started it (``StepResult.dp_starts``). The fluid simulation
(``completion_events``) gives every flow's finish; ``interval_loads`` re-solves the max-min rates of
each interval between its events and keeps every link's largest sum of rates.

Per routed phase (one call of it) and link: ``bytes``; the time-averaged utilisation ``bytes /
(capacity x duration)``, where the duration runs from the phase's first byte to its last (its fluid
makespan, without the per-step latency term); the peak utilisation, the largest sum of the phase's
rates in any interval over the capacity. Per link over a step: ``step_bytes`` (every job's phases,
each times its calls per step); ``mean_util``, the mean-field load (sum over jobs of step bytes /
step time, plus the constant load) over the capacity; ``peak_util``, the largest phase peak plus the
constant load (which the phase shared the link with). A KV transfer (one request) is a phase of its
service with no calls per step: its average is in the constant load. The view uses exact rates.

>>> import jax; jax.config.update("jax_enable_x64", True)
>>> from flowmodel import fabric as fb, links, scenario as sc, traffic as tr
>>> site = fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=4, spines_per_pod=4)
>>> job = tr.Training(tr.Model("small", layers=4, hidden=1024, ffn_hidden=4096, heads=8, kv_heads=8,
...                            vocab=32000, seq_len=2048), tr.Parallelism(tp=8, dp=4), global_batch=8)
>>> model = sc.prepare(sc.Scenario("demo", fb.Fleet(sites=(fb.Site("a", scale_out=site),)), training=(job,)))
>>> view = model.links(model.evaluate())
>>> print(links.hot_table(view, 3))       # two DP rings hashed onto one uplink: it runs full
  link               tier          capacity    peak    mean  collectives
  a/leaf2->a/spine3  leaf_spine     800Gbps  100.0%   63.7%  dp_all_reduce
  a/spine3->a/leaf3  leaf_spine     800Gbps  100.0%   63.7%  dp_all_reduce
  a/spine0->a/leaf0  leaf_spine     800Gbps  100.0%   42.4%  dp_all_reduce
>>> dp = view.fct()["training"]["dp_all_reduce"]   # the rings that shared it finish last
>>> round(dp["p99_s"] / dp["p50_s"], 3)
2.0
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os

import numpy as np

from ._checks import is_traced
from .fabric import Tier
from .kernels import completion_events, interval_loads
from .steptime import average_load, fluid_inputs, plan_calls, plan_phases
from .steptime._rl import TRAIN

UNITS = {"_Bps": "bytes per second", "_bytes": "bytes", "_s": "seconds",
         "_util": "fraction of the link's capacity (1 = full)"}
HOT = 10  # links run.json names


def collective_of(phase: str) -> str:
    """The collective kind of the step report a routed phase belongs to (``pp_forward[2][0]`` ->
    ``pp_send_recv``, ``dp`` -> ``dp_all_reduce``, ``tp_all_gather[0]`` -> ``tp_all_gather``)."""
    base = phase.split("[")[0]
    return {"pp_forward": "pp_send_recv", "pp_backward": "pp_send_recv", "dp": "dp_all_reduce"}.get(base, base)


@dataclasses.dataclass(frozen=True, eq=False)
class PhaseLoad:
    """One routed phase, one call of it, replayed: ``workload`` (job or service) and ``phase`` name
    (``steptime.routed_phases``; ``kv_transfer`` for a service), its ``collective`` kind, ``calls`` per
    step, ``start_s`` (its first byte) and ``duration_s`` (first byte to last); per link (float64[L])
    ``bytes`` and ``peak_Bps`` (largest sum of its rates in an interval); per flow (float64[F])
    ``finish_s`` (the fluid kernel's finish, its sub-flows' last) and ``fct_s`` (finish less start)."""

    workload: str
    phase: str
    collective: str
    calls: float
    start_s: float
    duration_s: float
    bytes: np.ndarray
    peak_Bps: np.ndarray
    finish_s: np.ndarray
    fct_s: np.ndarray

    @property
    def label(self) -> str:
        return f"{self.workload}/{self.phase}"


class LinkView:
    """Every link of a prepared model under one evaluation (``build``; ``Model.links`` makes one).

    Attributes: ``info`` (the fabric's names and tags), ``capacity`` and ``background_Bps`` (float64[L]:
    the constant load of background classes and inference, bytes/s), ``step_time_s`` (job -> s) and
    ``phases`` (:class:`PhaseLoad`, every routed phase that moves bytes).
    """

    def __init__(self, info, capacity, background, step_time_s: dict[str, float], phases: tuple[PhaseLoad, ...]):
        self.info, self.capacity, self.background_Bps = info, capacity, background
        self.step_time_s, self.phases = step_time_s, phases

    @property
    def tier(self) -> np.ndarray:
        return self.info.tier

    @functools.cached_property
    def names(self) -> np.ndarray:
        """object[L] ``src->dst`` of every link (``FabricInfo.link_name``)."""
        nodes = np.asarray(self.info.nodes, dtype=object)
        return nodes[self.info.src] + "->" + nodes[self.info.dst]

    @functools.cached_property
    def step_bytes(self) -> np.ndarray:
        """float64[L] bytes every job puts on each link per step (each phase times its calls)."""
        return sum((p.calls * p.bytes for p in self.phases if p.calls), np.zeros(self.capacity.shape))

    @functools.cached_property
    def mean_util(self) -> np.ndarray:
        """float64[L] mean-field load over a step (every job's step bytes / step time, plus the
        constant load) over capacity."""
        load = self.background_Bps.copy()
        for p in self.phases:
            if p.calls:
                load += p.calls * p.bytes / self.step_time_s[p.workload]
        return load / self.capacity

    @functools.cached_property
    def peak_util(self) -> np.ndarray:
        """float64[L] the largest phase peak plus the constant load, over capacity."""
        peak = np.max([p.peak_Bps for p in self.phases], axis=0) if self.phases else np.zeros(self.capacity.shape)
        return (peak + self.background_Bps) / self.capacity

    def phase_mean_util(self, p: PhaseLoad) -> np.ndarray:
        """float64[L] ``bytes / (capacity x duration)`` of one call of ``p``."""
        return p.bytes / (self.capacity * p.duration_s) if p.duration_s > 0 else np.zeros(self.capacity.shape)

    def phase_peak_util(self, p: PhaseLoad) -> np.ndarray:
        return p.peak_Bps / self.capacity

    def _labels(self) -> list[tuple[str, str]]:
        """(workload, collective) pairs in phase order, each once."""
        return list(dict.fromkeys((p.workload, p.collective) for p in self.phases))

    def crossing(self) -> tuple[list[str], np.ndarray]:
        """(names, bool[K, L]): the collectives (``collective``, or ``workload/collective`` with
        several workloads) and the links each moves bytes on."""
        pairs = self._labels()
        one = len({w for w, _ in pairs}) == 1
        rows = {pair: np.zeros(self.capacity.shape, bool) for pair in pairs}
        for p in self.phases:
            rows[p.workload, p.collective] |= p.bytes > 0
        names = [c if one else f"{w}/{c}" for w, c in pairs]
        return names, np.stack([rows[pair] for pair in pairs]) if pairs else np.zeros((0,) + self.capacity.shape, bool)

    @functools.cached_property
    def collectives(self) -> np.ndarray:
        """object[L] the collectives that cross each link, ``;``-separated (empty: none)."""
        names, cross = self.crossing()
        code = np.zeros(self.capacity.shape, object if len(names) > 62 else np.int64)
        for k, row in enumerate(cross):  # each set of collectives as one integer, its bits
            code[row] += 1 << k
        patterns, which = np.unique(code, return_inverse=True)
        text = np.array([";".join(n for k, n in enumerate(names) if int(c) >> k & 1) for c in patterns], dtype=object)
        return text[which.reshape(-1)]

    def hot(self, n: int = HOT) -> np.ndarray:
        """int64[n] the links with the highest peak utilisation (to 9 decimals, so that rounding does
        not split a tie; ties: higher mean utilisation, then more step bytes, then the lower index)."""
        peak = np.round(self.peak_util, 9)
        order = np.lexsort((np.arange(self.capacity.size), -self.step_bytes, -self.mean_util, -peak))
        return order[:n]

    def by_tier(self) -> dict[str, dict]:
        """Per link tier: ``links``, links ``used`` (carrying bytes), and the mean and the max over
        every link of the tier (idle ones included) of its peak utilisation (``mean_peak_util``,
        ``max_peak_util``) and of its mean utilisation over the step (``mean_mean_util``,
        ``max_mean_util``)."""
        peak, mean, used = self.peak_util, self.mean_util, self.step_bytes > 0
        for p in self.phases:
            used |= p.bytes > 0
        present = list(dict.fromkeys(self.tier.tolist()))
        order = [t for t in Tier.ALL if t in present] + sorted(t for t in present if t not in Tier.ALL)
        out = {}
        for tier in order:
            m = self.tier == tier
            top_peak, top_mean = float(peak[m].max()), float(mean[m].max())
            out[tier] = {"links": int(m.sum()), "used": int(used[m].sum()),  # a mean never above the max by rounding
                         "mean_peak_util": min(float(peak[m].mean()), top_peak), "max_peak_util": top_peak,
                         "mean_mean_util": min(float(mean[m].mean()), top_mean), "max_mean_util": top_mean}
        return out

    def fct(self) -> dict[str, dict[str, dict]]:
        """workload -> collective -> its flows' completion times (every phase of it pooled): flows,
        p50_s, p99_s (``numpy.percentile``, linear) and max_s."""
        pooled: dict[tuple[str, str], list[np.ndarray]] = {}
        for p in self.phases:
            pooled.setdefault((p.workload, p.collective), []).append(p.fct_s)
        out: dict[str, dict[str, dict]] = {}
        for (workload, collective), parts in pooled.items():
            t = np.concatenate(parts)
            t = t[np.isfinite(t)]
            p50, p99, top = (*np.percentile(t, [50, 99]), t.max()) if t.size else (np.nan,) * 3
            out.setdefault(workload, {})[collective] = {"flows": int(t.size), "p50_s": float(p50),
                                                        "p99_s": float(p99), "max_s": float(top)}
        return out

    def hot_links(self, n: int = HOT) -> list[dict]:
        """The ``n`` hottest links (``hot``), each with its name, tier, capacity, utilisation, step
        bytes and collectives."""
        idx = self.hot(n)
        crossing, peak, mean, step = self.collectives[idx], self.peak_util, self.mean_util, self.step_bytes
        return [{"link": self.info.link_name(int(i)), "index": int(i), "tier": str(self.tier[i]),
                 "capacity_Bps": float(self.capacity[i]), "peak_util": float(peak[i]), "mean_util": float(mean[i]),
                 "step_bytes": float(step[i]), "collectives": [c for c in crossing[k].split(";") if c]}
                for k, i in enumerate(idx)]

    def summary(self, n: int = HOT) -> dict:
        """What run.json records: the hot links, utilisation by tier, flow-completion times."""
        return {"hot_links": self.hot_links(n), "by_tier": self.by_tier(), "flow_completion": self.fct()}

    def columns(self) -> dict[str, np.ndarray]:
        """links.csv's columns, each name ending in its unit (``UNITS``): the link's name, tier,
        capacity, constant load, step bytes, mean and peak utilisation and collectives, then per
        phase (``workload/phase``) its bytes, mean and peak utilisation."""
        cols = {"link": self.names, "tier": self.tier, "capacity_Bps": self.capacity,
                "background_Bps": self.background_Bps, "step_bytes": self.step_bytes, "mean_util": self.mean_util,
                "peak_util": self.peak_util, "collectives": self.collectives}
        for p in self.phases:
            cols[f"{p.label}_bytes"] = p.bytes
            cols[f"{p.label}_mean_util"] = self.phase_mean_util(p)
            cols[f"{p.label}_peak_util"] = self.phase_peak_util(p)
        return cols

    def csv(self) -> str:
        """links.csv: one row per link, numbers as the shortest text that reads back the same float."""
        cols = self.columns()
        text = [c.astype(str) if c.dtype == object or c.dtype.kind == "U" else _numbers(c) for c in cols.values()]
        buffer = io.StringIO()
        buffer.write(",".join(cols) + "\n")
        for row in zip(*text):
            buffer.write(",".join(row) + "\n")
        return buffer.getvalue()


def _numbers(values: np.ndarray) -> np.ndarray:
    """float64 values as text: 0 as ``0``, else ``repr`` (it reads back exactly); each distinct value
    formatted once (a fabric's links share few values)."""
    distinct, which = np.unique(values, return_inverse=True)
    text = np.array(["0" if v == 0 else repr(v) for v in distinct.tolist()], dtype=object)
    return text[which.reshape(-1)]


def _per_link(routes, values, num_links: int) -> np.ndarray:
    """float64[L] per-link sums of per-flow ``values`` over every hop (NumPy: a report compiles nothing)."""
    routes = np.asarray(routes)
    hops = (routes >= 0) & (routes < num_links)  # a host or storage link beside the fabric is not reported
    values = np.broadcast_to(np.asarray(values, np.float64)[:, None], routes.shape)
    return np.bincount(routes[hops], weights=values[hops], minlength=num_links)


def _sizes(rp) -> np.ndarray:
    """float64[N] bytes of each sub-flow of a routed phase (``SubFlows.sizes``, in NumPy)."""
    return np.asarray(rp.sizes, np.float64)[rp.sub.parent] * np.asarray(rp.sub.fraction, np.float64)


def replay_phase(workload, name, rp, calls, capacity, latency, options, start_times=None) -> PhaseLoad:
    """One routed phase through the exact kernels, as ``phase_time`` / ``phase_finish`` run it (at the
    fluid rates: under ``protocol: nccl`` an LL or LL128 collective runs slower than its replay)."""
    sub = rp.sub
    L = capacity.shape[0]
    sizes, cap, weights, limit, starts = fluid_inputs(rp, capacity, latency, options, start_times)
    incidence = None if options.engine.on_host else rp.incidence
    finish, events = completion_events(sub.routes, sizes, cap, weights=weights, rate_limit=limit,
                                       start_times=starts, incidence=incidence, engine=options.engine)
    loads = interval_loads(sub.routes, cap, events, weights=weights, rate_limit=limit, incidence=incidence,
                           engine=options.engine)
    flow_finish = np.full(sub.num_flows, -np.inf)  # each flow's last sub-flow (SubFlows.flow_finish)
    np.maximum.at(flow_finish, sub.parent, np.asarray(finish, np.float64))
    flow_finish[sub.unreachable] = np.inf
    begin = np.zeros(flow_finish.shape) if start_times is None else np.asarray(start_times, np.float64)
    first = float(np.asarray(events.time)[0])
    last = float(np.max(np.asarray(finish)))
    return PhaseLoad(workload, name, collective_of(name), float(calls), first, last - first,
                     _per_link(sub.routes, sizes, L), np.asarray(loads.peak, np.float64)[:L],
                     flow_finish, flow_finish - begin)


def build(model, fleet, *, network=None, options=None, logits=None) -> LinkView:
    """The :class:`LinkView` of ``fleet``, a concrete evaluation of ``model`` (``Model.evaluate``) on
    ``network`` with ``options`` and WCMP ``logits`` (defaults: the model's; exact rates either way)."""
    from .steptime._fleet import job_logits

    network = model.network if network is None else network
    options = (model.options if options is None else options).exact()
    if is_traced(*(r.step_time for r in fleet.every.values()), *fleet.kv_transfer_s.values()):
        raise ValueError("links: needs a concrete evaluation (Model.evaluate), not one inside jit or vmap")
    capacity = np.asarray(network.capacity, np.float64)
    latency = network.latency
    fixed = np.asarray(model.fixed_load, np.float64)
    L = capacity.shape[0]
    plans = list(model.all_plans)
    steps = fleet.every
    names = [plan.job.name for plan in plans]
    if sorted(steps) != sorted(names):
        raise ValueError(f"links: the evaluation has jobs {sorted(steps)}, the model {sorted(names)}")
    times = {n: float(steps[n].step_time) for n in names}
    resolved = []
    for j, plan in enumerate(plans):
        phases = plan_phases(plan)
        for name, split in (job_logits(logits, j) or {}).items():
            phases[name] = phases[name].with_logits(split)
        resolved.append({n: rp for n, rp in phases.items() if rp.sub is not None})
    per_step = [sum((plan_calls(plan, n) * _per_link(rp.sub.routes, _sizes(rp), L)
                     for n, rp in phases.items()), np.zeros(L)) for plan, phases in zip(plans, resolved)]
    mean_load = [average_load(plan, per_step[j], times[names[j]]) for j, plan in enumerate(plans)]
    out = []
    for group in model.groups:  # each job on the capacity its step was timed on
        for j in group:
            reserved = fixed + sum((mean_load[i] for i in group if i != j), np.zeros(L))
            left = capacity - reserved
            dp_starts = np.asarray(steps[names[j]].dp_starts, np.float64)
            plan = plans[j]
            for name, rp in resolved[j].items():
                trainer = getattr(plan, "trainer", plan)  # an RL plan's DP reduction is its trainer's
                starts = dp_starts[trainer.dp_stage] if name in ("dp", TRAIN + "dp") else None
                out.append(replay_phase(names[j], name, rp, plan_calls(plan, name), left, latency, options, starts))
    left = capacity - fixed - sum(mean_load, np.zeros(L))  # a KV request on top of every workload's mean
    for name, rp in model.transfers:
        if rp.sub is not None:
            out.append(replay_phase(name, "kv_transfer", rp, 0.0, left, latency, options))
    return LinkView(model.info, capacity, fixed, times, tuple(out))


def hot_table(view: LinkView, n: int = HOT) -> str:
    """The console's hot-link table: name, tier, capacity (in Gbps, as configs write it), peak and
    mean utilisation (%), collectives."""
    from ._units import show

    rows = view.hot_links(n)
    width = max([len(r["link"]) for r in rows] + [4])
    tiers = max([len(r["tier"]) for r in rows] + [4])
    lines = [f"  {'link':<{width}}  {'tier':<{tiers}}  {'capacity':>10}  {'peak':>6}  {'mean':>6}  collectives"]
    for r in rows:
        lines.append(f"  {r['link']:<{width}}  {r['tier']:<{tiers}}  {show(r['capacity_Bps'], 'bytes/s'):>10}  "
                     f"{r['peak_util']:>6.1%}  {r['mean_util']:>6.1%}  {', '.join(r['collectives']) or '-'}")
    return "\n".join(lines)


def report(model, fleet, out: str, n: int = HOT) -> tuple[dict, str]:
    """``run --links``: write ``out/links.csv`` and ``out/links.png`` (each atomically) and return
    run.json's ``links`` section (``LinkView.summary``) and the console's hot-link table."""
    from . import plots
    from .results import write_text

    view = model.links(fleet)
    summary = view.summary(n)
    write_text(os.path.join(out, "links.csv"), view.csv())
    plots.link_utilisation(summary["by_tier"], summary["hot_links"], os.path.join(out, "links.png"))
    title = f"hot links (peak utilisation over the step; {len(view.phases)} phases replayed)"
    return summary, title + "\n" + hot_table(view, n)
