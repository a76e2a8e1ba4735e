"""What a planner minimises, on a prepared model: the objectives of ``flowmodel optimize``.

- ``step_time``: the slowest training job's step time.
- ``throughput``: the GPU-weighted mean step time over the training jobs, sum_j G_j t_j / sum_j G_j,
  plus ``kv_weight`` x each inference service's KV transfer time (``Model.score``), so that every
  job's bottleneck has a gradient, not only the slowest one's.
- ``expected``: over the failures section's scenarios, (w_h t_h + sum_i p_i t_i) / (w_h + sum_i p_i)
  with ``healthy_weight`` w_h and each failure's ``probability`` p_i (``resilience.expected_cases``).
- ``time_to_train``: the expected time to train from the reliability section
  (``reliability.objective``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from .scenario import Model

OBJECTIVES = ("step_time", "throughput", "expected", "time_to_train")
SEARCHES = ("smooth", "exact")


class Objective(NamedTuple):
    """Functions of (network, logits): ``search`` (differentiable: on smooth rates, or exact ones with
    their subgradients), ``exact`` (a float, what results report) and ``differentiable`` (the exact
    model's differentiable value: what the optimality check differentiates)."""

    search: Callable
    exact: Callable
    differentiable: Callable


def planning_objective(model: Model, objective: str = "step_time", *, kv_weight: float = 0.0,
                       search: str = "exact", seeds=None) -> Objective:
    """The functions ``optimize.minimize`` and ``optimize.finish`` need for ``objective`` on ``model``;
    an error names the key or the section it needs. ``seeds``: routing seeds whose mean ``step_time``
    and ``throughput`` are (``seeds.SeedSet.objective``; default, and for ``expected`` and
    ``time_to_train``: the model's own seed)."""
    sc = model.scenario
    if objective not in OBJECTIVES:
        raise ValueError(f"optimize.objective: unknown objective {objective!r}; known: {', '.join(OBJECTIVES)}")
    if search not in SEARCHES:
        raise ValueError(f"optimize.search: must be smooth or exact, got {search!r}")
    if objective in ("step_time", "throughput") and seeds is not None and len(seeds) > 1:
        from .seeds import SeedSet

        return Objective(*SeedSet(model, seeds).objective(objective=objective, kv_weight=kv_weight, search=search))
    if objective in ("step_time", "throughput"):
        during, exact = model.objective(objective=objective, kv_weight=kv_weight, search=search)
        return Objective(during, exact, model.objective(objective=objective, kv_weight=kv_weight, search="exact")[0])
    if objective == "expected":
        from . import resilience

        if sc.failures is None:
            raise ValueError("optimize.objective: expected needs a failures section")
        groups = [k.group for k in sc.optimize.knobs] if sc.optimize else list(model.info.groups)
        cases, _ = resilience.expected_cases(model, resilience.failure_scenarios(model),
                                             healthy_weight=sc.failures.weight_of_healthy)
        during, exact = model.options.searched(search), model.options.exact()

        def value(net, options):
            return resilience.expected_step_time(model, cases, groups, net, options)

        return Objective(lambda net, lg: value(net, during),
                         lambda net, lg: float(sum(w * m.evaluate(resilience.carry_groups(model, m, net, groups),
                                                                  exact).step_time for w, m in cases)),
                         lambda net, lg: value(net, exact))
    from . import reliability

    if sc.reliability is None:
        raise ValueError("optimize.objective: time_to_train needs a reliability section")
    if all(job.training_steps is None for job in sc.training):
        raise ValueError("optimize.objective: time_to_train needs tokens or steps on a training job")
    during, exact = reliability.objective(model, search=search)
    return Objective(during, exact, reliability.objective(model, search="exact")[0])
