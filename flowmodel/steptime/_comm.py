"""Time of communication phases on a fabric: route the flows, then run the kernels.

``route_phase`` does the discrete work once (candidate paths, policy, which domains the flows cross);
``phase_time`` is a pure function of capacity and latency, so it can be jitted, vmapped over fabrics
and differentiated. A phase's time is its bandwidth term, the makespan of its flows under fluid
max-min sharing (``completion_times``; the smooth model uses alpha-fair rates and a soft max), plus
its latency term ``steps x (longest route latency + step_latency)``, where ``step_latency`` is the
per-step software latency (a calibration parameter: NCCL's per-message overhead). :class:`Congestion`
switches on a transport window (rates capped at window / RTT) and queueing delay in the latency term.
:class:`Options` carries every choice of the model (exact or smooth rates, per-step latency,
congestion, transport profile, engine) as one frozen, hashable value: the key of every compiled
program.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import is_traced
from ..fabric import FabricInfo, Tier
from ..kernels import (
    Engine,
    HopPairs,
    Incidence,
    Transport,
    completion_times,
    incidence,
    link_bytes,
    pairs_of,
    queueing_delay,
    route_latency,
    smooth_maxmin_rates,
    soft_max,
    transport_inputs,
    transport_profile,
    window_limited_rate,
)
from ..routing import Candidates, Router, SubFlows, route, wcmp
from ..traffic._collectives import Phase
from ..traffic._nccl import ProtocolModel

DOMAINS = ("scale_up", "scale_out", "scale_across")


@dataclasses.dataclass(frozen=True)
class Congestion:
    """Congestion and latency effects the step-time model can switch on (all off by default).

    Attributes:
      window: bytes in flight per flow (all its paths and queue pairs together), or None for no
        window limit. A flow's rate is capped at ``window / RTT`` (RTT = twice its route latency); a
        sub-flow carrying a fraction of the flow gets that fraction of the window. This is what makes
        a 1,000 km link (RTT ~10 ms) need ~500 MB in flight to carry 50 GB/s.
      queueing: add each link's queueing delay (``queueing_delay``: M/M/1, bounded by the buffer) at
        the phase's mean utilisation (its bytes on the link over its bandwidth time) to the latency
        of every step.
      packet_bytes, buffer_bytes: of the queueing model (default buffer: 1,000 packets per port).
    """

    window: float | None = None
    queueing: bool = False
    packet_bytes: float = 4096.0
    buffer_bytes: float | None = None

    def __post_init__(self):
        if self.window is not None and not (np.isfinite(self.window) and self.window > 0):
            raise ValueError(f"congestion.window: must be > 0 bytes (or None), got {self.window!r}")
        if not (np.isfinite(self.packet_bytes) and self.packet_bytes > 0):
            raise ValueError(f"congestion.packet_bytes: must be > 0, got {self.packet_bytes!r}")
        if self.buffer_bytes is not None and not (np.isfinite(self.buffer_bytes) and self.buffer_bytes > 0):
            raise ValueError(f"congestion.buffer_bytes: must be > 0 (or None), got {self.buffer_bytes!r}")


RATES = ("exact", "smooth")
PROTOCOLS = ("simple", "nccl")


@dataclasses.dataclass(frozen=True)
class Options:
    """How phases are timed: one frozen value, passed whole through every layer (and the key of
    every compiled program).

    Attributes:
      rates: ``"exact"`` (fluid max-min with re-sharing at every completion: report with this) or
        ``"smooth"`` (alpha-fair rates, no re-sharing, soft max: informative gradients for search).
      sharpness: of the smooth relaxation (alpha of alpha-fair; soft max temperature = mean /
        sharpness); unused by the exact model.
      step_latency: per-step software latency of every collective step (s), e.g. NCCL's per-message
        overhead.
      congestion: window limit and queueing delay (:class:`Congestion`); None: both off.
      fleet_tol: relative change of every coupled job's step time at which the Gauss-Seidel sweeps
        of the mean-field coupling stop (jobs that share no link are never swept).
      fleet_iterations: the most sweeps a coupled group may take (``FleetResult.converged`` says
        whether ``fleet_tol`` was reached).
      transport: a transport profile (``"tcp"``, ``"cubic"``, ``"dctcp"`` or a ``Transport``; a name is
        turned into its profile) applied to every phase's flows; None: pure fluid.
      engine: the kernels every exact phase runs on (an ``Engine``; a name, ``"auto"``, ``"host"`` or
        ``"xla"``, is turned into one). ``AUTO``: host on a CPU backend, else xla. Routed phases carry
        their incidence, so xla keeps the sparse solve inside every compiled program.
      protocol: ``"simple"`` (every collective at the fluid rate, latency ``steps x (route latency +
        step_latency)``) or ``"nccl"``: a collective that carries NCCL's protocol model
        (``RoutedPhase.nccl``: the per-layer ring collectives of training jobs) runs the protocol NCCL
        2.22.3's tuning model picks for its size (LL, LL128 or Simple, ``traffic.protocol_model``), at
        that protocol's share of the fluid bus bandwidth and with its latency (its hardware latencies
        hold the scale-up hop; the longest route's latency counts as NCCL's network latency on the
        steps that cross nodes). The DP reductions (one merged phase, GB-sized) pay the Simple
        protocol's latency at the fluid rate (a tree's 0.92 bandwidth share is not applied). NCCL's
        latencies hold the software per-step latency, so ``step_latency`` must be 0.
      nccl_latency_scale, nccl_floor: the calibration of what NCCL's chosen protocol costs (its choice
        stays NCCL's own estimate): the tuning model's latency constants x the scale, and no
        collective call under the floor (s); 1 and 0 take the tuning model as it stands. Fitted on
        the 8x NVLink4 nccl-tests table (experiments/validation/nccl_anchors.py): 0.86 and 18.5 us.
        Only with ``protocol: nccl``. The merged DP reductions (GB-sized, far above any floor) take
        the scale on Simple's latency and no floor.
    """

    rates: str = "exact"
    sharpness: float = 64.0
    step_latency: float = 0.0
    congestion: Congestion | None = None
    fleet_tol: float = 1e-6
    fleet_iterations: int = 50
    transport: Transport | None = None
    engine: Engine = Engine.AUTO
    protocol: str = "simple"
    nccl_latency_scale: float = 1.0
    nccl_floor: float = 0.0

    def __post_init__(self):
        try:
            object.__setattr__(self, "transport", transport_profile(self.transport))
        except ValueError as e:
            raise ValueError(f"options.{e}") from None
        object.__setattr__(self, "engine", Engine.of(self.engine, "options.engine"))
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"options.protocol: must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        if self.protocol == "nccl" and self.step_latency:
            raise ValueError(f"options.step_latency: NCCL's protocol latencies already hold the per-step software "
                             f"latency; set it to 0 with protocol nccl, got {self.step_latency!r}")
        for name, minimum, strict in (("nccl_latency_scale", 0.0, True), ("nccl_floor", 0.0, False)):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)
                    and (value > minimum if strict else value >= minimum)):
                raise ValueError(f"options.{name}: must be {'>' if strict else '>='} 0 and finite, got {value!r}")
        if self.protocol != "nccl" and (self.nccl_latency_scale != 1.0 or self.nccl_floor != 0.0):
            raise ValueError(f"options.nccl_latency_scale / nccl_floor: calibrate protocol nccl only; protocol is "
                             f"{self.protocol!r} (got {self.nccl_latency_scale!r}, {self.nccl_floor!r})")
        if self.rates not in RATES:
            raise ValueError(f"options.rates: must be one of {', '.join(RATES)}, got {self.rates!r}")
        if not (isinstance(self.sharpness, (int, float)) and np.isfinite(self.sharpness) and self.sharpness > 0):
            raise ValueError(f"options.sharpness: must be > 0, got {self.sharpness!r}")
        if not (isinstance(self.step_latency, (int, float)) and np.isfinite(self.step_latency)
                and self.step_latency >= 0):
            raise ValueError(f"options.step_latency: must be >= 0 seconds, got {self.step_latency!r}")
        if self.congestion is not None and not isinstance(self.congestion, Congestion):
            raise ValueError(f"options.congestion: must be a Congestion or None, got {self.congestion!r}")
        if not (isinstance(self.fleet_iterations, int) and self.fleet_iterations >= 1):
            raise ValueError(f"options.fleet_iterations: must be an integer >= 1, got {self.fleet_iterations!r}")
        if not (isinstance(self.fleet_tol, (int, float)) and np.isfinite(self.fleet_tol) and self.fleet_tol > 0):
            raise ValueError(f"options.fleet_tol: must be > 0, got {self.fleet_tol!r}")

    @property
    def smooth(self) -> bool:
        return self.rates == "smooth"

    def exact(self) -> Options:
        """The same options with exact rates (what results are reported with)."""
        return dataclasses.replace(self, rates="exact")

    def relaxed(self) -> Options:
        """The same options with smooth rates (what a gradient search runs on)."""
        return dataclasses.replace(self, rates="smooth")

    def searched(self, search: str) -> Options:
        """What a gradient search runs on: ``"exact"`` rates (with their subgradients) or the
        ``"smooth"`` relaxation (``optimize.search``)."""
        if search not in RATES:
            raise ValueError(f"optimize.search: must be smooth or exact, got {search!r}")
        return self.relaxed() if search == "smooth" else self.exact()


EXACT = Options()


def _rate_limit(sub: SubFlows, latency, congestion: Congestion | None):
    if congestion is None or congestion.window is None:
        return None
    return window_limited_rate(sub.routes, latency, congestion.window * jnp.asarray(sub.fraction))


def _transported(options: Options, rp: RoutedPhase, sizes, capacity, latency, weights, limit):
    """``(sizes, capacity, weights, rate_limit, start delay or None)`` under the options' transport profile.

    The same transform as ``completion_times(..., transport=...)``, without the fluid activation
    latency, which the phase's latency term already counts. ACKs go back on the fabric's way back per
    link (``rp.reverse``, ``FabricInfo.reverse``), none beyond it. The profile runs on the fabric's
    packet links (``rp.packet_links``, ``FabricInfo.packet_links``): scale-up links and the flows that
    stay on them keep their fluid inputs.
    """
    if options.transport is None:
        return sizes, capacity, weights, limit, None
    sub, reverse = rp.sub, rp.reverse
    F = sizes.shape[0]
    weights = jnp.ones(F) if weights is None else jnp.broadcast_to(weights, (F,))
    limit = jnp.full(F, jnp.inf) if limit is None else limit
    if reverse is not None and reverse.shape[0] < capacity.shape[0]:  # appended links have no way back
        reverse = np.concatenate([reverse, np.full(capacity.shape[0] - reverse.shape[0], -1, np.int64)])
    packet = rp.packet_links
    if packet is not None and packet.shape[0] < capacity.shape[0]:  # appended links (PCIe, storage) carry no TCP
        packet = np.concatenate([packet, np.zeros(capacity.shape[0] - packet.shape[0], bool)])
    pairs = rp.hop_pairs if options.transport.contention else None
    return transport_inputs(options.transport, sub.routes, sizes, capacity, latency, weights, limit, reverse, pairs,
                            packet)


def _route_latencies(sub: SubFlows, sizes, capacity, latency, bandwidth_time, congestion: Congestion | None):
    """float[N] each sub-flow's route latency, plus queueing at the phase's mean utilisation when
    switched on."""
    routes = jnp.asarray(sub.routes)
    if congestion is None or not congestion.queueing:
        return route_latency(routes, latency)
    capacity = jnp.asarray(capacity)
    ok = bandwidth_time > 0
    load = link_bytes(routes, sizes, capacity.shape[0]) / jnp.where(ok, bandwidth_time, 1.0)
    delay = queueing_delay(jnp.where(ok, load, 0.0), capacity, packet_bytes=congestion.packet_bytes,
                           buffer_bytes=congestion.buffer_bytes)
    return route_latency(routes, latency + delay)


def _hop_latency(sub: SubFlows, sizes, capacity, latency, bandwidth_time, congestion: Congestion | None):
    """Longest route latency, plus queueing at the phase's mean utilisation when switched on."""
    return jnp.max(_route_latencies(sub, sizes, capacity, latency, bandwidth_time, congestion))


def nccl_models(rp: RoutedPhase, options: Options) -> tuple[ProtocolModel, ...] | None:
    """The NCCL protocol model of each of the phase's collectives where ``protocol: nccl`` applies,
    with the options' calibration."""
    if options.protocol != "nccl" or rp.nccl is None:
        return None
    models = rp.nccl if isinstance(rp.nccl, tuple) else (rp.nccl,)
    return tuple(m.calibrated(options.nccl_latency_scale, options.nccl_floor) for m in models)


def _latency_terms(rp: RoutedPhase, hops, options: Options, collective_of_flow, collective_steps):
    """float[N] the latency term of each sub-flow: ``steps x (longest route latency + step_latency)``
    over the whole phase, or per collective when the phase merges several (``collective_of_flow``:
    int[F] which one each flow belongs to; ``collective_steps``: int[C] their step counts). Under
    ``protocol: nccl`` a collective with NCCL's model pays the Simple protocol's latency on its
    longest route instead (a merged reduction's messages are far past NCCL's switch to Simple)."""
    sub = rp.sub
    models = nccl_models(rp, options)
    if collective_of_flow is None:
        if models is None:
            return rp.steps * (jnp.max(hops) + options.step_latency)
        return models[0].latency("Simple", jnp.max(hops))
    which = jnp.asarray(np.asarray(collective_of_flow, np.int64)[sub.parent])
    steps = np.asarray(collective_steps, np.float64)
    longest = jnp.maximum(jax.ops.segment_max(hops, which, num_segments=steps.size), 0.0)
    if models is None:
        return (steps * (longest + options.step_latency))[which]
    return jnp.stack([m.latency("Simple", longest[c]) for c, m in enumerate(models)])[which]


def nccl_time(model: ProtocolModel, bandwidth, inter, *, bound: bool = False):
    """NCCL's time for a collective whose Simple-protocol (fluid) bandwidth time is ``bandwidth`` and
    whose longest route has latency ``inter``. NCCL picks the protocol its own estimate makes
    cheapest (``ProtocolModel.seconds``: its latency, NCCL's hardware latencies holding the scale-up
    hop and the route's latency counting as NCCL's network latency on the steps that cross nodes,
    plus the bandwidth time at its bus bandwidth ``min(factor x bw, cap)``); that protocol then costs
    its calibrated latency (``ProtocolModel.latency``) plus the same bandwidth time, and no less than
    the model's floor. Differentiable in ``bandwidth`` and ``inter`` through the chosen protocol (the
    choice itself is piecewise constant). With a calibration (scale != 1) the time steps where NCCL
    switches protocol, as NCCL's own does where its estimate is off: a switch can even make a slower
    network faster. ``bound``: the least cost over the protocols instead, which no choice at this or
    any lower bandwidth time can beat (what a lower bound must be)."""
    estimate, cost = [], []
    for p, latency, factor, cap, per_inter in model.costs:
        transfer = jnp.maximum(bandwidth / factor, model.size / (cap * model.ratio))
        estimate.append(latency + per_inter * inter + transfer)
        cost.append(model.latency(p, inter) + transfer)
    chosen = jnp.argmin(jax.lax.stop_gradient(jnp.stack(cost if bound else estimate)))
    return jnp.maximum(jnp.stack(cost)[chosen], model.floor)


def domain_of(info: FabricInfo, routes: np.ndarray) -> str:
    """The widest domain any of the routes crosses: scale_across (long-haul), scale_out, scale_up."""
    used = routes[routes >= 0]
    tiers = set(info.tier[np.unique(used)].tolist()) if used.size else set()
    if Tier.LONG_HAUL in tiers:
        return "scale_across"
    if tiers - {Tier.SCALE_UP}:
        return "scale_out"
    return "scale_up"


def ring_channels(info: FabricInfo, groups: np.ndarray, limit: int | None = None) -> tuple[int, int]:
    """``(local_size, channels)`` of the NCCL-style parallel rings over ``groups`` (int64[G, n]): when
    every group splits into blocks of ``d`` consecutive members, each block in its own scale-up domain
    and at the same positions in it (so a block's k-th member is on the same rail in every block),
    ``d`` channels (at most ``limit``) so that every member's NIC carries the ring between domains
    (``traffic.channel_orders``); else one flat ring, ``(1, 1)``."""
    groups = np.asarray(groups, np.int64)
    n = groups.shape[1] if groups.ndim == 2 else 0
    if n < 2 or groups.size == 0:
        return 1, 1
    dom = info.gpu_domain[groups]
    d = int(np.cumprod(dom[0] == dom[0, 0]).sum())
    if d < 2 or d == n or n % d or (dom < 0).any():
        return 1, 1
    blocks = dom.reshape(groups.shape[0], n // d, d)
    heads = np.sort(blocks[..., 0], axis=1)
    if not (blocks == blocks[..., :1]).all() or (np.diff(heads, axis=1) == 0).any():
        return 1, 1
    on = np.flatnonzero(info.gpu_domain >= 0)
    first = np.full(int(info.gpu_domain.max()) + 1, info.num_gpus, np.int64)
    np.minimum.at(first, info.gpu_domain[on], on)  # each domain's first GPU
    position = (groups - first[dom]).reshape(blocks.shape)
    if not (position == position[:, :1, :]).all():
        return 1, 1
    return d, min(d, limit or d)


@dataclasses.dataclass(frozen=True, eq=False)
class RoutedPhase:
    """A phase with its flows routed: sub-flows, their bytes and the domain they cross.

    ``incidence`` is the :class:`~flowmodel.Incidence` of its routes (the flows of each link), built
    from the NumPy routes on first use and kept: inside a compiled program the routes are traced, and
    without it the xla engine would take the dense solve. Only the xla engine reads it; the host
    engine reads the routes, so a CPU run never pays for the table (int32[L+1, largest degree]).

    With the ``wcmp`` policy it keeps its candidate paths, and ``with_logits`` re-splits the flows
    (differentiably) for new per-candidate logits; the routes, hence the incidence, stay the same.

    A phase may also cross links beside the fabric's (``attached``: float64[A] capacities of links
    ``L .. L + A - 1``, latency 0; a GPU's host link, a site's storage: ``steptime/_attached.py``).
    Its routes are then pinned (given, not drawn by a policy, so no routing seed changes them), and
    the kernels time it on the fabric's capacities with these appended (``extended``).
    """

    phase: Phase
    sub: SubFlows | None  # None for an empty phase
    sizes: np.ndarray
    domain: str
    candidates: Candidates | None = None
    num_links: int = 0  # of the fabric the routes index (with the attached links, when there are some)
    attached: np.ndarray | None = None
    nccl: ProtocolModel | tuple[ProtocolModel, ...] | None = None  # per collective where the phase merges several
    reverse: np.ndarray | None = None  # int64[num fabric links]: each link's way back, for a profile's ACKs
    packet_links: np.ndarray | None = None  # bool[num fabric links]: where a profile's transport runs (None: all)

    @functools.cached_property
    def incidence(self) -> Incidence | None:
        if self.sub is None:
            return None
        with jax.ensure_compile_time_eval():  # first use may be inside a trace: keep the table concrete
            return incidence(self.sub.routes, self.num_links)

    @functools.cached_property
    def hop_pairs(self) -> HopPairs | None:
        """Its flows' hop pairs grouped by link pair, which a transport profile's contention reads: built
        from the NumPy routes on first use and kept (``kernels.pairs_of``)."""
        if self.sub is None:
            return None
        with jax.ensure_compile_time_eval():
            return pairs_of(self.sub.routes)

    @property
    def steps(self) -> int:
        return self.phase.steps

    @property
    def num_candidates(self) -> int:
        return 0 if self.candidates is None else self.candidates.links.shape[0]

    def with_logits(self, logits) -> RoutedPhase:
        if self.candidates is None:
            raise ValueError("logits: only a phase routed with the 'wcmp' policy takes split logits")
        split = dataclasses.replace(self, sub=wcmp(self.candidates, logits))
        for table in ("incidence", "hop_pairs"):  # same routes: keep the tables already built
            if table in self.__dict__:
                split.__dict__[table] = self.__dict__[table]
        return split


def extended(rp: RoutedPhase, capacity, latency):
    """(capacity, latency) of the fabric's links with the phase's attached links appended (as given
    without any)."""
    if rp.attached is None:
        return capacity, latency
    extra = jnp.asarray(rp.attached, jnp.asarray(capacity).dtype)
    return jnp.concatenate([capacity, extra]), jnp.concatenate([latency, jnp.zeros_like(extra)])


def _incidence_for(rp: RoutedPhase, options: Options) -> Incidence | None:
    """What the exact kernels need to keep the sparse solve: the phase's incidence for xla, nothing
    for the host engine (it reads the routes)."""
    return None if options.engine.on_host else rp.incidence


def route_phase(phase: Phase, router: Router, policy: str = "ecmp", *, seed: int = 0, qps: int = 4,
                logits=None) -> RoutedPhase:
    """Route a phase's flows with ``policy`` (see ``flowmodel.routing.route``)."""
    if phase.num_flows == 0:
        return RoutedPhase(phase, None, np.zeros(0), "scale_up")
    if policy == "wcmp":
        cands = router.candidates(phase.src, phase.dst)
        sub = wcmp(cands, jnp.zeros(cands.links.shape[0]) if logits is None else logits)
    else:
        sub, cands = route(router, phase.src, phase.dst, policy, seed=seed, qps=qps, logits=logits), None
    return RoutedPhase(phase, sub, phase.bytes, domain_of(router.info, sub.routes), cands, router.info.num_links,
                       reverse=router.info.reverse, packet_links=router.info.packet_links)


def background_load(router: Router, src, dst, rate, *, policy: str = "ecmp", seed: int = 0, qps: int = 4,
                    unreachable: str = "raise") -> np.ndarray:
    """float64[L] bytes/s that constant-rate background flows ``src -> dst`` put on each link
    (``unreachable="report"``: flows without a path carry nothing instead of raising)."""
    rate = np.broadcast_to(np.asarray(rate, np.float64), np.shape(src))
    bad = np.flatnonzero(~(np.isfinite(rate) & (rate > 0)))
    if bad.size:
        raise ValueError(f"background.rate[{bad[0]}]: must be > 0 and finite bytes/s, got {rate[bad[0]]}")
    sub = route(router, src, dst, policy, seed=seed, qps=qps, unreachable=unreachable)
    return np.asarray(link_bytes(jnp.asarray(sub.routes), jnp.asarray(sub.sizes(rate)), router.info.num_links))


def residual_capacity(capacity, background, info: FabricInfo | None = None):
    """Capacity left to the modelled traffic once background classes take theirs (served first).

    Raises if background traffic alone fills a link: the fabric cannot carry it, let alone the job.
    """
    if background is None:
        return capacity
    left = capacity - background
    if not is_traced(left):
        full = np.flatnonzero(np.asarray(left) <= 0)
        if full.size:
            link = full[0]
            name = info.link_name(link) if info is not None else f"link {link}"
            raise ValueError(f"background: {name} carries {float(np.asarray(background)[link]):.4g} bytes/s of "
                             f"background traffic, more than its capacity {float(np.asarray(capacity)[link]):.4g}")
    return left


def fluid_inputs(rp: RoutedPhase, capacity, latency, options: Options = EXACT, start_times=None):
    """What the rate kernels get for ``rp``'s sub-flows: ``(sizes, capacity, weights, rate_limit,
    start times or None)``, under the options' window and transport profile (``phase_time`` and
    ``phase_finish`` time a phase with these; the link view replays them). ``start_times``: float[F]
    per flow, or None."""
    sub = rp.sub
    capacity, latency = extended(rp, capacity, latency)
    sizes = sub.sizes(rp.sizes)
    limit = _rate_limit(sub, latency, options.congestion)
    starts = None if start_times is None else jnp.asarray(start_times)[sub.parent]
    sizes, cap, weights, limit, delay = _transported(options, rp, sizes, capacity, latency, sub.weights(), limit)
    if delay is not None:
        starts = delay if starts is None else starts + delay
    return sizes, cap, weights, limit, starts


def phase_time(rp: RoutedPhase, capacity, latency, options: Options = EXACT, *, start_times=None):
    """Seconds from the phase's start until its last flow finishes, latency term included.

    Args:
      capacity, latency: float[L] (after background reservations).
      options: exact or smooth rates, per-step latency, congestion (:class:`Options`).
      start_times: optional float[F] per-flow offsets (s) within the phase.
    """
    if rp.sub is None:
        return jnp.zeros((), jnp.asarray(capacity).dtype)
    sub = rp.sub
    sizes, cap, weights, limit, starts = fluid_inputs(rp, capacity, latency, options, start_times)
    capacity, latency = extended(rp, capacity, latency)
    if not options.smooth:
        finish = completion_times(sub.routes, sizes, cap, weights=weights, rate_limit=limit, start_times=starts,
                                  incidence=_incidence_for(rp, options), engine=options.engine)
        bandwidth = jnp.max(sub.flow_finish(finish))
    else:
        rates = smooth_maxmin_rates(sub.routes, cap, weights=weights, rate_limit=limit,
                                    sharpness=options.sharpness)
        times = sizes / rates + (0.0 if starts is None else starts)
        bandwidth = soft_max(times, jax.lax.stop_gradient(jnp.mean(times)) / options.sharpness)
    busy = bandwidth - (0.0 if starts is None else jnp.min(starts))
    hop = _hop_latency(sub, sizes, capacity, latency, busy, options.congestion)
    if options.protocol == "nccl" and isinstance(rp.nccl, ProtocolModel):
        return bandwidth - busy + nccl_time(nccl_models(rp, options)[0], busy, hop)
    return bandwidth + rp.steps * (hop + options.step_latency)


def phase_finish(rp: RoutedPhase, capacity, latency, start_times, options: Options = EXACT, *,
                 collective_of_flow=None, collective_steps=None):
    """float[F] absolute finish of every flow of ``rp`` started at ``start_times`` (exact model),
    each plus the phase's latency term; flows of different start times share links while they overlap.

    A phase that merges several collectives (the dense and expert gradient reductions of a step:
    their flows run at once and share links) gives each its own latency term: ``collective_of_flow``
    int[F] names each flow's collective, ``collective_steps`` int[C] their step counts, and a flow
    pays its collective's steps x (the collective's longest route latency + step latency).
    """
    sub = rp.sub
    sizes, cap, weights, limit, starts = fluid_inputs(rp, capacity, latency, options, start_times)
    capacity, latency = extended(rp, capacity, latency)
    finish = completion_times(sub.routes, sizes, cap, weights=weights, rate_limit=limit, start_times=starts,
                              incidence=_incidence_for(rp, options), engine=options.engine)
    busy = jnp.max(finish) - jnp.min(jnp.asarray(start_times)[sub.parent])
    hops = _route_latencies(sub, sizes, capacity, latency, busy, options.congestion)
    return sub.flow_finish(finish + _latency_terms(rp, hops, options, collective_of_flow, collective_steps))


def smooth_phase_finish(rp: RoutedPhase, capacity, latency, start_times, options: Options, *,
                        collective_of_flow=None, collective_steps=None):
    """(float[N], temperature): the smooth model's finish of every sub-flow (alpha-fair rates, no
    re-sharing) started at ``start_times`` (float[F]), each plus its latency term as in
    ``phase_finish``, and the soft max temperature of ``phase_time``: their soft max at it is the
    smooth ``phase_time`` from 0."""
    sub = rp.sub
    sizes, cap, weights, limit, starts = fluid_inputs(rp, capacity, latency, options, start_times)
    capacity, latency = extended(rp, capacity, latency)
    rates = smooth_maxmin_rates(sub.routes, cap, weights=weights, rate_limit=limit, sharpness=options.sharpness)
    times = sizes / rates + starts
    temperature = jax.lax.stop_gradient(jnp.mean(times)) / options.sharpness
    busy = soft_max(times, temperature) - jnp.min(jnp.asarray(start_times)[sub.parent])
    hops = _route_latencies(sub, sizes, capacity, latency, busy, options.congestion)
    return times + _latency_terms(rp, hops, options, collective_of_flow, collective_steps), temperature
