"""Step time of a training job: Megatron-style traffic, an interleaved 1F1B pipeline, overlapped DP.

Per layer and micro-batch, tensor parallelism with sequence parallelism runs two all-gathers and two
reduce-scatters of the ``b x s x h`` activation in the forward pass and again in the backward pass,
blocking (docs/sources.md); context parallelism all-gathers K and V forward and reduce-scatters their
gradients backward; MoE layers run two all-to-alls (dispatch, combine) each way. A virtual stage's
forward time is its layers' compute plus that communication; backward compute is twice forward.
Pipeline stages send ``b x s x h / (tp x cp)`` bytes per rank per micro-batch each way. Each
virtual stage's DP gradient all-reduce starts when its last backward ends; all of them, across
stages, run in one fluid simulation with those start times, so DP rings that overlap in time share
links. The step ends when the pipeline and every DP reduction have finished.

Every collective kind is simulated with all its groups at once (all TP groups of the job run their
all-gather together), so the groups contend on shared links; kinds that run at different moments of
the schedule are simulated apart, except the DP reductions (above). A ring collective whose groups
have several members per scale-up domain (DP with tp below the domain size, TP across domains) runs
parallel NCCL-style channels, one per member of a domain (``Training.channels`` caps them), so every
member's NIC carries the ring between domains, not one NIC per domain.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..fabric._network import FabricInfo, Network
from ..kernels import link_bytes, route_latency, scheduled_bound, soft_max
from ..routing import Router
from ..traffic._collectives import Phase, all_gather, all_reduce, all_to_all, bus_factor, reduce_scatter, send_recv
from ..traffic._nccl import ProtocolModel, protocol_model
from ..traffic._workload import Training
from ._comm import (
    DOMAINS,
    EXACT,
    Options,
    RoutedPhase,
    domain_of,
    extended,
    nccl_models,
    nccl_time,
    phase_finish,
    phase_time,
    residual_capacity,
    ring_channels,
    route_phase,
    smooth_phase_finish,
)
from ._schedule import Schedule, evaluate_schedule, one_f_one_b


@dataclasses.dataclass(frozen=True, eq=False)
class TrainingPlan:
    """The discrete part of a training step on a fabric: placement, collectives, routes."""

    job: Training
    grid: np.ndarray  # int64[dp, pp, cp, tp]
    layers: np.ndarray  # int64[V] layers per virtual stage
    collectives: dict[str, list[RoutedPhase]]  # per-layer kinds: tp_all_gather, ..., each a list of phases
    pp_forward: list[list[RoutedPhase] | None]  # per rank s: s -> s+1
    pp_backward: list[list[RoutedPhase] | None]
    dp: RoutedPhase | None  # every virtual stage's gradient reductions, dense and expert, in one phase
    dp_stage: np.ndarray  # int64[F] virtual stage of each DP flow
    schedule: Schedule  # the 1F1B DAG, prepared once
    domains: dict[str, str]
    sizes: dict[str, tuple[str, float, int]]  # kind -> (collective, bytes per rank, ranks per group)
    moe_layers: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))  # int64[V]
    dp_kinds: tuple[str, ...] = ()  # the reductions merged in ``dp``: dp_all_reduce, dp_expert_all_reduce
    dp_collective: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))  # int64[F]
    dp_steps: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))  # int64[len(dp_kinds)]


DP_KINDS = ("dp_all_reduce", "dp_expert_all_reduce")
LAYER_KINDS = {  # per-layer collective kind -> the groups it runs on
    "tp_all_gather": "tp", "tp_reduce_scatter": "tp", "etp_all_gather": "tp", "etp_reduce_scatter": "tp",
    "cp_all_gather": "cp", "cp_reduce_scatter": "cp", "ep_all_to_all": "ep"}
_BUILD = {"tp_all_gather": all_gather, "tp_reduce_scatter": reduce_scatter, "etp_all_gather": all_gather,
          "etp_reduce_scatter": reduce_scatter, "cp_all_gather": all_gather, "cp_reduce_scatter": reduce_scatter,
          "ep_all_to_all": all_to_all}


def dp_groups(job: Training, grid: np.ndarray, s: int, expert: bool) -> np.ndarray:
    """int64[G, n] the gradient-reduction groups of pipeline rank ``s``: for dense parameters the DP x CP
    ranks of each TP rank (n = dp x cp); for routed experts the ranks holding the same expert shard,
    the same TP rank and position in their EP group (n = dp x cp / ep; Megatron-Core's expert data
    parallel group)."""
    par = job.parallelism
    block = grid[:, s]  # [dp, cp, tp]
    if not expert:
        return block.transpose(2, 0, 1).reshape(par.tp, -1)
    block = block.reshape(par.dp // par.ep, par.ep, par.cp, par.tp)
    return block.transpose(1, 3, 0, 2).reshape(par.ep * par.tp, -1)


def ep_groups(job: Training, grid: np.ndarray) -> np.ndarray:
    """int64[G, ep] the expert-parallel groups: ``ep`` consecutive DP ranks of the same (pp, cp, tp)."""
    par = job.parallelism
    g = grid.reshape(par.dp // par.ep, par.ep, par.pp, par.cp, par.tp).transpose(0, 2, 3, 4, 1)
    return g.reshape(-1, par.ep)


def nccl_model(info: FabricInfo, kind: str, size: float, groups: np.ndarray, algorithm: str) -> ProtocolModel | None:
    """NCCL's protocol model (``traffic.protocol_model``) of a ring or tree collective over ``groups``,
    its nodes the scale-up domains of the first group (a GPU without one is its own node); None for
    other collectives."""
    groups = np.asarray(groups)
    n = groups.shape[-1]
    if kind not in ("all_reduce", "all_gather", "reduce_scatter") or algorithm not in ("ring", "tree") or n < 2:
        return None
    if algorithm == "tree" and kind != "all_reduce":
        return None
    dom = info.gpu_domain[groups.reshape(-1, n)[0]]
    nodes = np.unique(dom[dom >= 0]).size + int((dom < 0).sum())
    return protocol_model(kind, size, n, nodes=nodes, algorithm=algorithm)


def plan_training(job: Training, info: FabricInfo, router: Router, *, policy: str = "ecmp", seed: int = 0,
                  qps: int = 4) -> TrainingPlan:
    """Place the job, turn its traffic into collectives and route them (``policy`` as in routing)."""
    par, model = job.parallelism, job.model
    ranks = job.job_ranks(info.num_gpus)
    grid = par.grid(ranks)  # [dp, pp, cp, tp]
    if not par.tp_across_domains and par.tp > 1:
        dom = info.gpu_domain[grid]
        split = np.argwhere((dom != dom[..., :1]).any(axis=-1) | (dom[..., 0] < 0))
        if split.size:
            d, s, c = split[0]
            raise ValueError(f"parallelism.tp: TP group {grid[d, s, c].tolist()} spans scale-up domains "
                             f"(tp = {par.tp}); place it inside one domain or set tp_across_domains")
    b, h, dt = job.micro_batch, model.hidden, model.dtype_bytes
    seq = model.seq_len // par.cp

    sizes: dict[str, tuple[str, float, int]] = {}

    def rp(collective, name=None):
        if name is not None:
            sizes[name] = (collective.kind, collective.size, collective.group_size)
        routed = [route_phase(ph, router, policy, seed=seed, qps=qps) for ph in collective.phases]
        model = nccl_model(info, collective.kind, collective.size, collective.groups, collective.algorithm)
        return [dataclasses.replace(r, nccl=model) for r in routed] if model and len(routed) == 1 else routed

    groups = {"tp": grid.reshape(-1, par.tp), "cp": grid.transpose(0, 1, 3, 2).reshape(-1, par.cp)}
    if model.moe_layers and par.ep > 1:
        groups["ep"] = ep_groups(job, grid)
    def rings(g):  # NCCL-style channels where the groups have several members per scale-up domain
        local_size, channels = ring_channels(info, g, job.channels)
        return {"local_size": local_size, "channels": channels}

    collectives: dict[str, list[RoutedPhase]] = {}
    for kind, nbytes in job.layer_traffic().items():
        g = groups[LAYER_KINDS[kind]]
        collectives[kind] = rp(_BUILD[kind](g, nbytes, **(rings(g) if _BUILD[kind] is not all_to_all else {})), kind)

    p, v = par.pp, par.virtual_stages
    pp_fwd, pp_bwd = [None] * p, [None] * p
    if p > 1:
        shard = b * seq * h * dt / par.tp
        links = range(p) if v > 1 else range(p - 1)  # interleaving also sends from the last rank to the first
        for s in links:
            a, c = grid[:, s].reshape(-1), grid[:, (s + 1) % p].reshape(-1)
            pp_fwd[s] = rp(send_recv(a, c, shard))
            pp_bwd[s] = rp(send_recv(c, a, shard))
        sizes["pp_send_recv"] = ("send_recv", shard, 2)

    V = p * v
    layers, moe_layers = job.stage_layout()
    # Dense gradients are reduced over DP x CP, routed experts' over their expert-DP group: separate
    # collectives (own groups, bytes and step counts) whose flows run at once in one phase.
    reductions = []
    for expert, per_stage, n in ((False, job.dp_gradients()[0], par.dp * par.cp),
                                 (True, job.dp_gradients()[1], job.expert_dp)):
        if n > 1 and per_stage.any():
            reductions.append((DP_KINDS[expert], expert, per_stage, n))
    dp_plan, dp_stage = None, np.zeros(0, np.int64)
    dp_collective, dp_steps = np.zeros(0, np.int64), np.zeros(0, np.int64)
    dp_domains = {}
    if reductions:
        src, dst, size, stage, which, steps = [], [], [], [], [], []
        for c, (kind, expert, per_stage, n) in enumerate(reductions):
            steps.append(0)
            for k in range(V):
                if per_stage[k] <= 0:
                    continue
                g = dp_groups(job, grid, k % p, expert)
                ph = all_reduce(g, per_stage[k], job.algorithm, **(rings(g) if job.algorithm == "ring" else {})).phases
                if len(ph) != 1:
                    raise ValueError(f"training.algorithm: {job.algorithm!r} has {len(ph)} phases; the overlapped DP "
                                     "reduction takes a one-phase all-reduce (ring or tree)")
                src.append(ph[0].src)
                dst.append(ph[0].dst)
                size.append(ph[0].bytes)
                stage.append(np.full(ph[0].num_flows, k))
                which.append(np.full(ph[0].num_flows, c))
                steps[c] = ph[0].steps
            per_rank = [per_stage[s::p].sum() for s in range(p)]  # a rank holds v stages
            sizes[kind] = ("all_reduce", float(max(per_rank)), n)
        dp_steps = np.array(steps, np.int64)
        merged = Phase(np.concatenate(src), np.concatenate(dst), np.concatenate(size), int(dp_steps.max()))
        dp_plan, dp_stage = route_phase(merged, router, policy, seed=seed, qps=qps), np.concatenate(stage)
        models = tuple(nccl_model(info, "all_reduce", sizes[kind][1], dp_groups(job, grid, 0, expert), job.algorithm)
                       for kind, expert, *_ in reductions)
        if all(models):
            dp_plan = dataclasses.replace(dp_plan, nccl=models)
        dp_collective = np.concatenate(which)
        for c, (kind, *_) in enumerate(reductions):
            routes = np.asarray(dp_plan.sub.routes)[dp_collective[dp_plan.sub.parent] == c]
            dp_domains[kind] = domain_of(router.info, routes)

    domains = {name: phases[0].domain for name, phases in collectives.items()}
    if p > 1:
        domains["pp_send_recv"] = pp_fwd[0][0].domain
    domains.update(dp_domains)
    return TrainingPlan(job, grid, layers, collectives, pp_fwd, pp_bwd, dp_plan, dp_stage,
                        Schedule.build(one_f_one_b(p, job.micro_batches, v)), domains, sizes, moe_layers,
                        tuple(r[0] for r in reductions), dp_collective, dp_steps)


@dataclasses.dataclass(frozen=True)
class StepResult:
    """Step time (s) and where it goes; every value a number (so it passes through ``jax.jit``).

    ``breakdown`` sums to ``step_time``: ``compute`` and the blocking communication (``tp``, ``cp``,
    ``ep``) of the busiest pipeline rank, ``pipeline`` (bubble and waits for point-to-point sends on
    that rank), ``dp`` (DP reduction left exposed after the pipeline drains). ``by_domain`` puts the
    exposed communication into scale-up / scale-out / scale-across by the links its flows cross.
    ``collectives`` gives every collective kind of the step (per-layer ``tp_all_gather``, ...,
    ``pp_send_recv``: the slowest rank's send, ``dp_all_reduce``: from the first stage's reduction
    start to the last one's end) its time per call (``seconds``), its bandwidth bound (max over
    links of bytes / capacity, timed as the collective is: the same latency term, or under
    ``protocol: nccl`` NCCL's protocol at that bandwidth), efficiency = bound / time, and
    nccl-tests' algbw (bytes / time, bytes/s; ``bytes`` per rank, for DP the fullest rank's
    gradients) and busbw (algbw x the collective's factor, bytes/s); the plan's ``domains`` says
    which domain each kind crosses. ``dp_starts`` (float[V], s) is when each virtual stage's DP
    reduction starts, the end of its last backward (empty without DP): the link view replays the
    reduction from these.
    """

    step_time: object
    breakdown: dict
    by_domain: dict
    collectives: dict
    dp_starts: object


jax.tree_util.register_dataclass(StepResult, data_fields=["step_time", "breakdown", "by_domain", "collectives",
                                                          "dp_starts"], meta_fields=[])


def routed_phases(plan: TrainingPlan) -> dict[str, RoutedPhase]:
    """Every routed phase of the plan by name: ``tp_all_gather[0]``, ``pp_forward[3][0]``, ``dp``, ..."""
    out = {}
    for kind, phases in plan.collectives.items():
        out.update({f"{kind}[{i}]": ph for i, ph in enumerate(phases)})
    for direction, per_rank in (("pp_forward", plan.pp_forward), ("pp_backward", plan.pp_backward)):
        for s, phases in enumerate(per_rank):
            out.update({f"{direction}[{s}][{i}]": ph for i, ph in enumerate(phases or [])})
    if plan.dp is not None:
        out["dp"] = plan.dp
    return out


def map_training_phases(plan: TrainingPlan, fn) -> TrainingPlan:
    """``plan`` with every routed phase replaced by ``fn(name, phase)`` (the names of ``routed_phases``)."""

    def per_rank(direction, phases):
        return [None if ps is None else [fn(f"{direction}[{s}][{i}]", ph) for i, ph in enumerate(ps)]
                for s, ps in enumerate(phases)]

    return dataclasses.replace(
        plan, collectives={k: [fn(f"{k}[{i}]", ph) for i, ph in enumerate(v)] for k, v in plan.collectives.items()},
        pp_forward=per_rank("pp_forward", plan.pp_forward), pp_backward=per_rank("pp_backward", plan.pp_backward),
        dp=None if plan.dp is None else fn("dp", plan.dp))


def _layer_calls(job: Training, moe: bool) -> dict[str, int]:
    """Calls of each per-layer kind per layer and micro-batch, forward and backward (and the forward's
    again under full recomputation)."""
    out = dict(job.layer_calls(moe))
    for kind, n in job.layer_calls(moe, backward=True).items():
        out[kind] = out.get(kind, 0) + n
    if job.recomputes:
        for kind, n in job.layer_calls(moe).items():
            out[kind] += n
    return out


def calls_per_step(plan: TrainingPlan, name: str) -> float:
    """How many times a step runs the named phase (per-layer kinds: per layer of one pipeline rank,
    on average over the ranks)."""
    job = plan.job
    par, m = job.parallelism, job.micro_batches
    kind = name.split("[")[0]
    if kind in LAYER_KINDS:
        moe = job.model.moe_layers
        calls = ((job.model.layers - moe) * _layer_calls(job, False).get(kind, 0)
                 + moe * _layer_calls(job, True).get(kind, 0))
        return float(m * calls / par.pp)
    if kind in ("pp_forward", "pp_backward"):
        last = int(name.split("[")[1].rstrip("]")) == par.pp - 1
        return float(m * (par.virtual_stages - 1 if last else par.virtual_stages))
    return 1.0


def _resolve(plan: TrainingPlan, logits) -> dict[str, RoutedPhase]:
    phases = routed_phases(plan)
    for name, value in (logits or {}).items():
        if name not in phases:
            raise ValueError(f"logits: the plan has no phase {name!r}; phases: {', '.join(list(phases)[:6])}, ...")
        phases[name] = phases[name].with_logits(value)
    return phases


def step_bytes(plan: TrainingPlan, num_links: int, *, logits=None):
    """float[L] bytes the job puts on each link per step."""
    total = jnp.zeros(num_links)
    for name, ph in _resolve(plan, logits).items():
        if ph.sub is not None:
            total = total + calls_per_step(plan, name) * link_bytes(ph.sub.routes, ph.sub.sizes(ph.sizes), num_links)
    return total


def step_time(plan: TrainingPlan, network: Network, options: Options = EXACT, *, info: FabricInfo | None = None,
              background=None, logits=None) -> StepResult:
    """Evaluate a planned training step on ``network`` (differentiable in its capacity and latency).

    A pure function of the arrays: jit it (``jax.jit(lambda n: step_time(plan, n).step_time)``) or
    evaluate a whole scenario through ``flowmodel.scenario.Model``, which holds its compiled program.

    Args:
      options: exact or smooth rates, per-step latency, congestion (:class:`Options`).
      info: names the link in the error when ``background`` fills one.
      background: optional float[L] bytes/s taken first by constant-rate background classes
        (``background_load``).
      logits: for a plan routed with ``wcmp``, ``{phase name: float[candidates]}`` split logits
        (names from ``routed_phases``); the step time is differentiable in them.
    """
    residual_capacity(network.capacity, background, info)  # validates concrete inputs, names the link
    _resolve(plan, logits)  # unknown phase names fail here, before any work
    finish, parts, by_domain, report, dp_starts = _step_numbers(plan, network.capacity, network.latency, background,
                                                                logits, options)
    return StepResult(step_time=finish, breakdown=parts, by_domain=by_domain, collectives=report, dp_starts=dp_starts)


def compute_times(job: Training) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float64[pp] each: seconds of one micro-batch's forward compute on each pipeline rank, at the
    rank's own peak (``Training.rank_peak_flops``): per dense layer, per MoE layer, and of the output
    head (used on the last rank, which holds the last virtual stage); a backward computes twice as
    long (and recomputes the layers' forward under full recomputation)."""
    par, model = job.parallelism, job.model
    tokens = job.micro_batch * model.seq_len
    rate = job.rank_peak_flops * job.efficiency
    dense, moe = (model.layer_flops_per_token(flag) * tokens / (par.tp * par.cp) / rate for flag in (False, True))
    head = 2 * model.hidden * model.vocab * tokens / (par.tp * par.cp) / rate
    return dense, moe, head


def _step_numbers(plan: TrainingPlan, capacity, latency, background, logits, options: Options):
    """The numbers of a ``StepResult``."""
    job, par = plan.job, plan.job.parallelism
    capacity = capacity if background is None else capacity - background
    phases = _resolve(plan, logits)
    seconds = {name: phase_time(ph, capacity, latency, options) for name, ph in phases.items() if name != "dp"}

    def t(prefix):
        return sum((v for k, v in seconds.items() if k.startswith(prefix + "[")), 0.0)

    def comm(moe: bool, backward: bool, category=None):
        calls = job.layer_calls(moe, backward=backward)
        return sum((n * t(k) for k, n in calls.items() if category in (None, LAYER_KINDS[k])), 0.0)

    r = float(job.recomputes)  # the backward pass first recomputes the forward, collectives included
    dense_compute, moe_compute, head_compute = compute_times(job)
    V = len(plan.layers)
    on_rank = np.arange(V) % par.pp  # virtual stage k runs on pipeline rank k mod pp, at that rank's compute
    n_moe = plan.moe_layers if plan.moe_layers.size else np.zeros(V, np.int64)
    n_dense = plan.layers - n_moe
    layer_f = n_dense * dense_compute[on_rank] + n_moe * moe_compute[on_rank]
    compute_f = layer_f + np.where(np.arange(V) == V - 1, head_compute[on_rank], 0.0)
    comm_f = {flag: comm(flag, False) for flag in (False, True)}
    comm_b = {flag: comm(flag, True) + r * comm_f[flag] for flag in (False, True)}
    t_forward = [compute_f[k] + n_dense[k] * comm_f[False] + n_moe[k] * comm_f[True] for k in range(V)]
    t_backward = [2 * compute_f[k] + r * layer_f[k] + n_dense[k] * comm_b[False] + n_moe[k] * comm_b[True]
                  for k in range(V)]
    send_f = [t(f"pp_forward[{s}]") for s in range(par.pp)]
    send_b = [t(f"pp_backward[{s}]") for s in range(par.pp)]

    times = evaluate_schedule(plan.schedule, t_forward, t_backward, send_f, send_b)
    pipeline_end = jnp.max(times.free)
    finish, dp_exposed = pipeline_end, 0.0
    dp_starts = jnp.zeros(0, capacity.dtype)
    m = job.micro_batches
    dp_times = {}
    if "dp" in phases:
        # each stage's reductions start when its gradients are complete: at the end of its last backward;
        # dense and expert reductions share links, each with its own latency term
        starts = times.last_backward.astype(capacity.dtype)[plan.dp_stage]
        ph, which = phases["dp"], plan.dp_collective
        extra = dict(collective_of_flow=which, collective_steps=plan.dp_steps)
        if options.smooth:
            ends, temperature = smooth_phase_finish(ph, capacity, latency, starts, options, **extra)
            sub_of = which[ph.sub.parent]
            dp_finish = soft_max(ends, temperature)
            for c, kind in enumerate(plan.dp_kinds):
                own = soft_max(jnp.where(jnp.asarray(sub_of == c), ends, -jnp.inf), temperature)
                dp_times[kind] = own - jnp.min(starts[which == c])
        else:
            ends = phase_finish(ph, capacity, latency, starts, options, **extra)
            dp_finish = jnp.max(ends)
            for c, kind in enumerate(plan.dp_kinds):
                dp_times[kind] = jnp.max(ends[which == c]) - jnp.min(starts[which == c])
        finish = jnp.maximum(pipeline_end, dp_finish)
        dp_exposed = finish - pipeline_end
        dp_starts = times.last_backward.astype(capacity.dtype)

    # the busiest rank: most layer compute time, at each rank's own peak (ties: the first)
    work = [float(layer_f[s::par.pp].sum()) for s in range(par.pp)]
    rank = int(np.argmax(work))
    own = range(rank, V, par.pp)
    compute = m * sum(3 * compute_f[k] + r * layer_f[k] for k in own)
    parts = {"compute": compute}
    for category in ("tp", "cp", "ep"):
        per = {flag: comm(flag, False, category) * (1 + r) + comm(flag, True, category) for flag in (False, True)}
        parts[category] = m * sum(n_dense[k] * per[False] + n_moe[k] * per[True] for k in own)
    parts["pipeline"] = pipeline_end - sum(parts.values())
    parts["dp"] = dp_exposed
    by_domain = {d: 0.0 for d in DOMAINS}
    for kind, key in (("tp_all_gather", "tp"), ("cp_all_gather", "cp"), ("ep_all_to_all", "ep")):
        if kind in plan.domains:
            by_domain[plan.domains[kind]] = by_domain[plan.domains[kind]] + parts[key]
    if plan.dp is not None:
        by_domain[plan.dp.domain] = by_domain[plan.dp.domain] + parts["dp"]
    report = {}
    for kind in plan.sizes:
        if kind == "pp_send_recv":  # per call: the slowest rank's send (forward; backward is the same size)
            per_rank = [[n for n in seconds if n.startswith(f"pp_forward[{r}][")] for r in range(par.pp)]
            time = _max_all([sum(seconds[n] for n in names) for names in per_rank if names])
            bound = _max_all([sum(_bound(phases[n], capacity, latency, options.step_latency) for n in names)
                              for names in per_rank if names])  # point-to-point: no NCCL protocol model
        elif kind in DP_KINDS:  # from the collective's first stage's start to its last flow's end
            c = plan.dp_kinds.index(kind)
            time = dp_times[kind]
            bound = _bound(phases["dp"], capacity, latency, options.step_latency,
                           sub_mask=plan.dp_collective[phases["dp"].sub.parent] == c, steps=int(plan.dp_steps[c]),
                           nccl=_nccl_of(phases["dp"], options, c))
        else:
            names = [n for n in seconds if n.startswith(kind + "[")]
            time = sum(seconds[n] for n in names)
            bound = sum(_bound(phases[n], capacity, latency, options.step_latency, nccl=_nccl_of(phases[n], options))
                        for n in names)
        collective, size, n = plan.sizes[kind]
        report[kind] = {"seconds": time, "bound_seconds": bound, "efficiency": bound / time,
                        "bytes": size, "ranks": n, "algbw": size / time,
                        "busbw": size / time * bus_factor(collective, n)}
    return finish, parts, by_domain, report, dp_starts


def _nccl_of(ph: RoutedPhase, options: Options, collective: int = 0) -> ProtocolModel | None:
    """The NCCL protocol model of the phase's ``collective``-th collective where ``protocol: nccl``
    applies to it."""
    models = nccl_models(ph, options)
    return None if models is None else models[collective]


def _bound(ph: RoutedPhase, capacity, latency, step_latency, *, sub_mask=None, steps=None,
           nccl: ProtocolModel | None = None):
    """Bandwidth bound (max over links of bytes / capacity) plus the latency term of the phase, or of
    the sub-flows in ``sub_mask`` with ``steps`` steps (one collective of a merged phase); with
    ``nccl`` (``protocol: nccl``) the bound as the phase is timed: the cheapest protocol's cost at the
    bound's bus bandwidth (the least of them, so that a calibrated cost stays a bound wherever NCCL's choice
    switches), or, for one collective of a merged phase, the Simple protocol's latency."""
    if ph.sub is None:
        return 0.0
    capacity, latency = extended(ph, capacity, latency)
    routes, sizes = ph.sub.routes, ph.sub.sizes(ph.sizes)  # NumPy, or traced (seeds batched by flowmodel.seeds)
    if sub_mask is not None:
        routes, sizes = routes[sub_mask], sizes[np.flatnonzero(sub_mask)]
    hop = jnp.max(route_latency(jnp.asarray(routes), latency))
    steps = ph.steps if steps is None else steps
    bandwidth = scheduled_bound(routes, sizes, capacity)
    if nccl is None:
        return bandwidth + steps * (hop + step_latency)
    return nccl_time(nccl, bandwidth, hop, bound=True) if sub_mask is None else bandwidth + nccl.latency("Simple", hop)


phase_bound = _bound  # the name other step models (recommendation) import


def _max_all(values):
    values = list(values)
    out = values[0]
    for x in values[1:]:
        out = max(out, x) if isinstance(out, float) and isinstance(x, float) else jnp.maximum(out, x)
    return out
