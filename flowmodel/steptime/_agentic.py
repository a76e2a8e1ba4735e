"""Request latency of an agentic inference service (``traffic.Agentic``) on the fabric.

A request's KV-cache traffic is four pinned phases (``steptime/_attached.py``), each with one request
on every instance at once: ``kv_fetch`` (site storage -> down the scale-out fabric -> host link into
the GPU), ``kv_offload`` and ``kv_reload`` (over the host links, every tool call's summed),
``kv_write_back`` (host link out -> up the fabric -> site storage). Then

    latency = kv_fetch + prefill + decode + tool + kv_offload + kv_reload

(the write-back follows the answer: its bytes load the fabric, its time is not in the latency). The
service's average load is its bytes per request x ``requests_per_s``.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from ..fabric._network import FabricInfo, Network
from ..routing import Router
from ..traffic._agentic import Agentic
from ..traffic._collectives import bus_factor
from ._attached import Attached, climb, descents, fabric_bytes
from ._comm import DOMAINS, EXACT, Options, RoutedPhase, phase_time, residual_capacity
from ._training import StepResult, phase_bound

PHASES = ("kv_fetch", "kv_offload", "kv_reload", "kv_write_back")
LATENCY = ("kv_fetch", "kv_offload", "kv_reload")  # the transfers on a request's critical path


@dataclasses.dataclass(frozen=True, eq=False)
class AgenticPlan:
    """The pinned KV phases of one request per instance (None where nothing moves)."""

    job: Agentic
    phases_: dict[str, RoutedPhase]

    KIND = "agentic"  # the FleetResult field its results land in (steptime/_fleet.py's plan protocol)
    SERVICE = True  # open loop: its time is a request's latency, its load bytes per request x rate

    def rate(self) -> float:
        return self.job.requests_per_s

    @property
    def domains(self) -> dict[str, str]:
        return {name: ph.domain for name, ph in self.phases_.items()}

    def phases(self) -> dict[str, RoutedPhase]:
        return dict(self.phases_)

    def calls(self, name: str) -> float:
        return 1.0 / len(self.job.instances)  # every phase serves one request on each instance

    def bytes(self, num_links: int, *, logits=None):
        _no_logits(logits)
        total = jnp.zeros(num_links)
        for name, ph in self.phases_.items():
            total = total + self.calls(name) * fabric_bytes(ph, num_links)
        return total

    def evaluate(self, network: Network, options: Options = EXACT, *, info=None, background=None, logits=None):
        return request_time(self, network, options, info=info, background=background, logits=logits)

    def map_phases(self, fn) -> AgenticPlan:
        return dataclasses.replace(self, phases_={n: fn(n, ph) for n, ph in self.phases_.items()})

    def figures(self, result=None) -> dict:
        """run.json's extra figures: KV bytes per request by kind, and what the latency allows."""
        job = self.job
        out = {"kv_bytes_per_request": job.bytes(), "instances": len(job.instances), "batch": job.batch,
               "output_tokens_per_request": job.turns * job.output_tokens}
        if result is not None:
            latency = float(result.step_time)
            out["tokens_per_s_per_request"] = job.turns * job.output_tokens / latency
            out["max_requests_per_s"] = len(job.instances) * job.batch / latency
        return out


def _no_logits(logits):
    if logits:
        raise ValueError(f"logits: an agentic service's phases are pinned and take no split logits, got "
                         f"{', '.join(logits)}")


def plan_agentic(job: Agentic, info: FabricInfo, router: Router | None = None, *, policy: str = "ecmp",
                 seed: int = 0, qps: int = 4) -> AgenticPlan:
    """Place the service and pin its KV phases (routing policy and seed play no part: storage is
    reached by the even climb of ``steptime/_attached.py``)."""
    ranks = job.job_ranks(info.num_gpus)
    attached = Attached.of(info, ranks, job.host_bandwidth, job.storage_bandwidth)
    per_rank = {k: v / job.tp for k, v in job.bytes().items()}
    store = per_rank["kv_fetch"] > 0 or per_rank["kv_write_back"] > 0
    up = climb(info, ranks, f"agentic[{job.name}]") if store else None
    back = descents(info, up) if store else None
    paths = {
        "kv_fetch": lambda f, r: [attached.storage_out(r), *back[f], attached.host_in(r)],
        "kv_offload": lambda f, r: [attached.host_out(r)],
        "kv_reload": lambda f, r: [attached.host_in(r)],
        "kv_write_back": lambda f, r: [attached.host_out(r), *up[f], attached.storage_in(r)],
    }
    tool_calls = max(job.turns - 1, 1)
    phases = {}
    for name in PHASES:
        if per_rank[name] > 0:
            steps = tool_calls if name in ("kv_offload", "kv_reload") else 1
            phases[name] = attached.phase(ranks, [paths[name](f, int(r)) for f, r in enumerate(ranks)],
                                          per_rank[name], steps)
    return AgenticPlan(job, phases)


def request_time(plan: AgenticPlan, network: Network, options: Options = EXACT, *, info: FabricInfo | None = None,
                 background=None, logits=None) -> StepResult:
    """One request's latency on ``network`` (differentiable in its capacity and latency) as a
    ``StepResult``: ``breakdown`` (sums to ``step_time``) is ``kv_fetch``, ``prefill``, ``decode``,
    ``tool``, ``kv_offload`` and ``kv_reload``; ``collectives`` reports every KV phase, the
    write-back included."""
    residual_capacity(network.capacity, background, info)
    _no_logits(logits)
    job = plan.job
    capacity = network.capacity if background is None else network.capacity - background
    latency = network.latency
    zero = jnp.zeros((), capacity.dtype)
    times = {name: phase_time(ph, capacity, latency, options) for name, ph in plan.phases_.items()}
    c = job.compute_times()
    parts = {"kv_fetch": times.get("kv_fetch", zero), "prefill": c["prefill"] + zero, "decode": c["decode"] + zero,
             "tool": c["tool"] + zero, "kv_offload": times.get("kv_offload", zero),
             "kv_reload": times.get("kv_reload", zero)}
    total = sum(parts.values(), zero)
    by_domain = {d: zero for d in DOMAINS}
    report = {}
    size = job.bytes()
    for name, ph in plan.phases_.items():
        if name in LATENCY:
            by_domain[ph.domain] = by_domain[ph.domain] + times[name]
        bound = phase_bound(ph, capacity, latency, options.step_latency)
        per_rank = size[name] / job.tp
        report[name] = {"seconds": times[name], "bound_seconds": bound, "efficiency": bound / times[name],
                        "bytes": per_rank, "ranks": job.tp, "algbw": per_rank / times[name],
                        "busbw": per_rank / times[name] * bus_factor("send_recv", job.tp)}
    return StepResult(step_time=total, breakdown=parts, by_domain=by_domain, collectives=report,
                      dp_starts=jnp.zeros(0, capacity.dtype))
