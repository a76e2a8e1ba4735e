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
the schedule are simulated apart, except the DP reductions (above).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..fabric._network import FabricInfo, Network
from ..kernels import link_bytes, route_latency, scheduled_bound
from ..routing import Router
from ..traffic._collectives import Phase, all_gather, all_reduce, all_to_all, bus_factor, reduce_scatter, send_recv
from ..traffic._workload import Training
from ._comm import DOMAINS, EXACT, Options, RoutedPhase, phase_finish, phase_time, residual_capacity, route_phase
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
    dp: RoutedPhase | None  # every virtual stage's DP reduction in one phase
    dp_stage: np.ndarray  # int64[F] virtual stage of each DP flow
    schedule: Schedule  # the 1F1B DAG, prepared once
    domains: dict[str, str]
    sizes: dict[str, tuple[str, float, int]]  # per-layer kind -> (collective, bytes, ranks per group)


def _stage_layers(layers: int, V: int) -> np.ndarray:
    return np.array([len(a) for a in np.array_split(np.arange(layers), V)], np.int64)


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
        return [route_phase(ph, router, policy, seed=seed, qps=qps) for ph in collective.phases]

    tp_groups = grid.reshape(-1, par.tp)
    collectives: dict[str, list[RoutedPhase]] = {}
    if par.tp > 1:
        activation = b * seq * h * dt
        collectives["tp_all_gather"] = rp(all_gather(tp_groups, activation), "tp_all_gather")
        collectives["tp_reduce_scatter"] = rp(reduce_scatter(tp_groups, activation), "tp_reduce_scatter")
    if par.cp > 1:
        cp_groups = grid.transpose(0, 1, 3, 2).reshape(-1, par.cp)
        kv = 2 * b * model.seq_len * model.kv_dim * dt / par.tp
        collectives["cp_all_gather"] = rp(all_gather(cp_groups, kv), "cp_all_gather")
        collectives["cp_reduce_scatter"] = rp(reduce_scatter(cp_groups, kv), "cp_reduce_scatter")
    if model.experts and par.ep > 1:
        ep_groups = grid.reshape(par.dp // par.ep, par.ep, par.pp, par.cp, par.tp).transpose(0, 2, 3, 4, 1)
        tokens = b * seq / par.tp
        collectives["ep_all_to_all"] = rp(all_to_all(ep_groups.reshape(-1, par.ep), tokens * model.top_k * h * dt),
                                          "ep_all_to_all")

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
    layers = _stage_layers(model.layers, V)
    dp_plan, dp_stage = None, np.zeros(0, np.int64)
    if par.dp * par.cp > 1:
        embed = model.vocab * model.hidden
        params = layers * model.layer_params + embed * ((np.arange(V) == 0) + (np.arange(V) == V - 1))
        src, dst, size, stage = [], [], [], []
        steps = 0
        for k in range(V):
            groups = grid[:, k % p].transpose(2, 0, 1).reshape(par.tp, -1)  # DP x CP ranks per TP rank
            ph = all_reduce(groups, params[k] / par.tp * job.grad_bytes, job.algorithm).phases
            if len(ph) != 1:
                raise ValueError(f"training.algorithm: {job.algorithm!r} has {len(ph)} phases; the overlapped DP "
                                 "reduction takes a one-phase all-reduce (ring or tree)")
            src.append(ph[0].src)
            dst.append(ph[0].dst)
            size.append(ph[0].bytes)
            stage.append(np.full(ph[0].num_flows, k))
            steps = ph[0].steps
        merged = Phase(np.concatenate(src), np.concatenate(dst), np.concatenate(size), steps)
        per_rank = [params[s::p].sum() / par.tp * job.grad_bytes for s in range(p)]  # a rank holds v stages
        sizes["dp_all_reduce"] = ("all_reduce", float(max(per_rank)), par.dp * par.cp)
        dp_plan, dp_stage = route_phase(merged, router, policy, seed=seed, qps=qps), np.concatenate(stage)

    domains = {name: phases[0].domain for name, phases in collectives.items()}
    if p > 1:
        domains["pp_send_recv"] = pp_fwd[0][0].domain
    if dp_plan is not None:
        domains["dp_all_reduce"] = dp_plan.domain
    return TrainingPlan(job, grid, layers, collectives, pp_fwd, pp_bwd, dp_plan, dp_stage,
                        Schedule.build(one_f_one_b(p, job.micro_batches, v)), domains, sizes)


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
    links of bytes / capacity, plus the same latency term), efficiency = bound / time, and
    nccl-tests' algbw (bytes / time, bytes/s; ``bytes`` per rank, for DP the fullest rank's
    gradients) and busbw (algbw x the collective's factor, bytes/s); the plan's ``domains`` says
    which domain each kind crosses.
    """

    step_time: object
    breakdown: dict
    by_domain: dict
    collectives: dict


jax.tree_util.register_dataclass(StepResult, data_fields=["step_time", "breakdown", "by_domain", "collectives"],
                                 meta_fields=[])


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


def calls_per_step(plan: TrainingPlan, name: str) -> float:
    """How many times a step runs the named phase (per-layer kinds: per layer of one pipeline rank)."""
    par, m = plan.job.parallelism, plan.job.micro_batches
    layers = plan.job.model.layers / par.pp
    kind = name.split("[")[0]
    if kind in ("tp_all_gather", "tp_reduce_scatter", "ep_all_to_all"):
        return 4.0 * m * layers
    if kind in ("cp_all_gather", "cp_reduce_scatter"):
        return float(m * layers)
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
    finish, parts, by_domain, report = _step_numbers(plan, network.capacity, network.latency, background, logits,
                                                     options)
    return StepResult(step_time=finish, breakdown=parts, by_domain=by_domain, collectives=report)


def compute_times(job: Training) -> tuple[np.ndarray, np.ndarray]:
    """float64[pp] each: seconds of one micro-batch's forward compute on each pipeline rank, per layer
    and of the output head (used on the last rank, which holds the last virtual stage), at the rank's
    own peak (``Training.rank_peak_flops``); a backward computes twice as long."""
    par, model = job.parallelism, job.model
    tokens = job.micro_batch * model.seq_len
    rate = job.rank_peak_flops * job.efficiency
    layer = model.layer_flops_per_token() * tokens / (par.tp * par.cp) / rate
    head = 2 * model.hidden * model.vocab * tokens / (par.tp * par.cp) / rate
    return layer, head


def _step_numbers(plan: TrainingPlan, capacity, latency, background, logits, options: Options):
    """The numbers of a ``StepResult``."""
    job, par = plan.job, plan.job.parallelism
    capacity = capacity if background is None else capacity - background
    phases = _resolve(plan, logits)
    seconds = {name: phase_time(ph, capacity, latency, options) for name, ph in phases.items() if name != "dp"}

    def t(prefix):
        return sum((v for k, v in seconds.items() if k.startswith(prefix + "[")), 0.0)

    tp = 2 * t("tp_all_gather") + 2 * t("tp_reduce_scatter")  # per layer, each direction
    cp_f, cp_b = t("cp_all_gather"), t("cp_reduce_scatter")
    ep = 2 * t("ep_all_to_all")
    layer_compute, head_compute = compute_times(job)
    V = len(plan.layers)
    on_rank = np.arange(V) % par.pp  # virtual stage k runs on pipeline rank k mod pp, at that rank's compute
    compute_f = plan.layers * layer_compute[on_rank] + np.where(np.arange(V) == V - 1, head_compute[on_rank], 0.0)
    comm_f, comm_b = tp + cp_f + ep, tp + cp_b + ep
    t_forward = [compute_f[k] + plan.layers[k] * comm_f for k in range(V)]
    t_backward = [2 * compute_f[k] + plan.layers[k] * comm_b for k in range(V)]
    send_f = [t(f"pp_forward[{s}]") for s in range(par.pp)]
    send_b = [t(f"pp_backward[{s}]") for s in range(par.pp)]

    times = evaluate_schedule(plan.schedule, t_forward, t_backward, send_f, send_b)
    pipeline_end = jnp.max(times.free)
    finish, dp_exposed = pipeline_end, 0.0
    m = job.micro_batches
    if "dp" in phases:
        # each stage's reduction starts when its gradients are complete: at the end of its last backward
        starts = times.last_backward.astype(capacity.dtype)[plan.dp_stage]
        if options.smooth:
            dp_finish = phase_time(phases["dp"], capacity, latency, options, start_times=starts)
        else:
            dp_finish = jnp.max(phase_finish(phases["dp"], capacity, latency, starts, options))
        finish = jnp.maximum(pipeline_end, dp_finish)
        dp_exposed = finish - pipeline_end

    # the busiest rank: most layer compute (uniform accelerators: most layers; ties: the first)
    per_rank_layers = [int(plan.layers[s::par.pp].sum()) for s in range(par.pp)]
    rank = int(np.argmax(np.array(per_rank_layers) * layer_compute))
    compute = m * sum(3 * compute_f[k] for k in range(rank, V, par.pp))
    n_layers = m * per_rank_layers[rank]
    parts = {"compute": compute, "tp": n_layers * 2 * tp, "cp": n_layers * (cp_f + cp_b), "ep": n_layers * 2 * ep}
    parts["pipeline"] = pipeline_end - sum(parts.values())
    parts["dp"] = dp_exposed
    by_domain = {d: 0.0 for d in DOMAINS}
    for kind, key in (("tp_all_gather", "tp"), ("cp_all_gather", "cp"), ("ep_all_to_all", "ep"),
                      ("dp_all_reduce", "dp")):
        if kind in plan.domains:
            by_domain[plan.domains[kind]] = by_domain[plan.domains[kind]] + parts[key]
    report = {}
    for kind in plan.sizes:
        if kind == "pp_send_recv":  # per call: the slowest rank's send (forward; backward is the same size)
            per_rank = [[n for n in seconds if n.startswith(f"pp_forward[{r}][")] for r in range(par.pp)]
            time = _max_all([sum(seconds[n] for n in names) for names in per_rank if names])
            bound = _max_all([sum(_bound(phases[n], capacity, latency, options.step_latency) for n in names)
                              for names in per_rank if names])
        elif kind == "dp_all_reduce":  # from the first stage's reduction start to the last one's end
            time = dp_finish - jnp.min(starts)
            bound = _bound(phases["dp"], capacity, latency, options.step_latency)
        else:
            names = [n for n in seconds if n.startswith(kind + "[")]
            time = sum(seconds[n] for n in names)
            bound = sum(_bound(phases[n], capacity, latency, options.step_latency) for n in names)
        collective, size, n = plan.sizes[kind]
        report[kind] = {"seconds": time, "bound_seconds": bound, "efficiency": bound / time,
                        "bytes": size, "ranks": n, "algbw": size / time,
                        "busbw": size / time * bus_factor(collective, n)}
    return finish, parts, by_domain, report


def _bound(ph: RoutedPhase, capacity, latency, step_latency):
    if ph.sub is None:
        return 0.0
    hop = jnp.max(route_latency(jnp.asarray(ph.sub.routes), latency))
    return scheduled_bound(ph.sub.routes, ph.sub.sizes(ph.sizes), capacity) + ph.steps * (hop + step_latency)


def _max_all(values):
    values = list(values)
    out = values[0]
    for x in values[1:]:
        out = max(out, x) if isinstance(out, float) and isinstance(x, float) else jnp.maximum(out, x)
    return out
