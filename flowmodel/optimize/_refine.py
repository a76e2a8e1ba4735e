"""Finishing a search on the exact model: discrete roundings, a pattern search within the budget, and
the first-order optimality check a result reports.

The gradient search (``minimize``) runs on the smooth step time; its end point is close to, not at,
an optimum of the exact one, and rounding to allowed values leaves budget unspent. ``refine``
polls the exact step time around a point with *moves* of a few sizes: each knob up or down (an up
move clipped to the budget, so leftover budget is always tried), and every budget-neutral pair swap
(one knob up, another down by the same cost). It takes improving moves until none improves by more
than ``tolerance``: that is exactly the check ``optimality_check`` certifies. A compass search
needs no gradient of the exact model (whose kinks make gradients at a max-min bottleneck change
one-sided), only compiled forward evaluations, and its result is a local optimum in the sense the
check states. ``finish`` does the discrete part first: every combination of allowed values (or,
when there are many, the two values around each searched one), each with the continuous knobs
re-optimised; the best wins. Given the exact model's gradient (``gradient=``: the exact step time
is piecewise smooth and its gradient costs a few forward evaluations), the continuous knobs are
first polished by SciPy's SLSQP (bounds, the budget as a linear constraint), then ``refine``
certifies the point.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Callable, Sequence

import jax.numpy as jnp
import numpy as np

from ._search import Result, Space, project_budget

STEPS = tuple(4.0**-i for i in range(1, 7))  # move sizes 1/4 .. 1/4096, in knob positions (a box is [0, 1])


class Infeasible(ValueError):
    """No combination of allowed values fits the budget."""


@dataclasses.dataclass(frozen=True)
class Check:
    """The first-order optimality check at a point: ``passed`` when no move of ``moves`` tried
    (single-knob moves and budget-neutral pair swaps of sizes ``steps``, within bounds and budget)
    improves the exact value by more than ``tolerance`` (relative). ``best_move`` names the move
    that improved most and ``best_gain`` its relative improvement (<= 0: nothing improved)."""

    passed: bool
    value: float
    tolerance: float
    steps: tuple[float, ...]
    moves: int
    best_move: str | None
    best_gain: float

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class _Counted:
    """``f`` with a count of its evaluations (the figure benchmarks compare)."""

    def __init__(self, f: Callable[[np.ndarray], float]):
        self.f, self.count = f, 0

    def __call__(self, z: np.ndarray) -> float:
        self.count += 1
        return float(self.f(z))


def _moves(z: np.ndarray, b: np.ndarray, slack: float, free: Sequence[int], step: float, names: Sequence[str]):
    """Every feasible move of size ``step`` from ``z``: (name, new z)."""
    spent = float(b @ z)
    for i in free:
        room = 1.0 - z[i] if b[i] <= 0 else min(1.0 - z[i], max(slack - spent, 0.0) / b[i])
        up = min(step, room)
        if up > 1e-12:
            yield f"{names[i]} up", _with(z, {i: z[i] + up})
        down = min(step, z[i])
        if down > 1e-12:
            yield f"{names[i]} down", _with(z, {i: z[i] - down})
    for i, j in itertools.permutations(free, 2):
        if b[i] <= 0 or b[j] <= 0:
            continue  # a free knob's moves are single moves
        up = min(step, 1.0 - z[i], z[j] * b[j] / b[i])
        if up > 1e-12:
            yield f"{names[i]} up, {names[j]} down", _with(z, {i: z[i] + up, j: z[j] - up * b[i] / b[j]})


def _around(values: list[float], x: float) -> list[float]:
    """The sorted ``values`` just below and just above ``x`` (one when ``x`` is outside them)."""
    i = bisect.bisect_left(values, x)
    return sorted({values[max(i - 1, 0)], values[min(i, len(values) - 1)]})


def _with(z: np.ndarray, changes: dict[int, float]) -> np.ndarray:
    out = z.copy()
    for i, v in changes.items():
        out[i] = min(max(v, 0.0), 1.0)
    return out


def _setting(space: Space, budget: float | None, fixed: Sequence[int]):
    a, b = space.cost_line()
    slack = np.inf if budget is None else budget - a
    free = [i for i in range(len(space.knobs)) if i not in set(fixed)]
    return b, slack, free, [k.group for k in space.knobs]


def optimality_check(f: Callable[[np.ndarray], float], z, space: Space, *, budget: float | None = None,
                     fixed: Sequence[int] = (), tolerance: float = 1e-3, steps: Sequence[float] = STEPS,
                     value: float | None = None) -> Check:
    """Poll every move around knob positions ``z`` (``fixed`` knobs stay) and report the best one."""
    b, slack, free, names = _setting(space, budget, fixed)
    z = np.asarray(z, np.float64)
    value = float(f(z)) if value is None else value
    best, best_move, moves = 0.0, None, 0
    for step in steps:
        for name, w in _moves(z, b, slack, free, step, names):
            moves += 1
            gain = (value - float(f(w))) / value
            if gain > best:
                best, best_move = gain, f"{name} by {step:g}"
    return Check(passed=best <= tolerance, value=value, tolerance=tolerance, steps=tuple(steps), moves=moves,
                 best_move=best_move, best_gain=best)


def refine(f: Callable[[np.ndarray], float], z0, space: Space, *, budget: float | None = None,
           fixed: Sequence[int] = (), tolerance: float = 1e-3, steps: Sequence[float] = STEPS,
           max_evaluations: int = 400) -> tuple[np.ndarray, float, Check, int]:
    """Compass search on the exact objective ``f`` of knob positions from ``z0`` (feasible) until no
    move improves by more than ``tolerance``: (positions, value, the check there, evaluations)."""
    counted = _Counted(f)
    b, slack, free, names = _setting(space, budget, fixed)
    z = np.asarray(z0, np.float64)
    value = counted(z)
    size = 0  # index into steps: keep a move size while it improves, then shrink it
    while size < len(steps) and counted.count < max_evaluations:
        for _, w in _moves(z, b, slack, free, steps[size], names):  # opportunistic: the first improving move
            v = counted(w)
            if v < value * (1 - 1e-12):
                z, value = w, v
                break
            if counted.count >= max_evaluations:
                break
        else:
            size += 1
    check = optimality_check(counted, z, space, budget=budget, fixed=fixed, tolerance=tolerance, steps=steps,
                             value=value)
    return z, value, check, counted.count


@dataclasses.dataclass(frozen=True)
class Finish:
    """What ``finish`` did: the refined result, its optimality check, the roundings tried, the exact
    forward evaluations spent and the exact gradients (value and gradient) taken by the polish."""

    result: Result
    check: Check
    roundings: int
    evaluations: int
    gradients: int = 0
    budget: float | None = None


def polish(value_and_grad: Callable, z0, space: Space, *, budget: float | None = None, fixed: Sequence[int] = (),
           max_iterations: int = 50) -> tuple[np.ndarray, float, int]:
    """SLSQP on the exact objective from ``z0`` over the knobs not ``fixed``: (positions, value,
    calls). ``value_and_grad(z) -> (float, float[K])``."""
    from scipy.optimize import minimize as sp_minimize

    b, slack, free, _ = _setting(space, budget, fixed)
    z0 = np.asarray(z0, np.float64)
    if not free:
        return z0, float(value_and_grad(z0)[0]), 1
    calls = [0]

    def full(x):
        z = z0.copy()
        z[free] = np.clip(x, 0.0, 1.0)
        return z

    def fun(x):
        calls[0] += 1
        v, g = value_and_grad(full(x))
        return float(v), np.asarray(g, np.float64)[free]

    held = [i for i in range(len(z0)) if i not in free]
    rest = float(slack - b[held] @ z0[held])
    constraints = [] if not np.isfinite(slack) else [
        {"type": "ineq", "fun": lambda x: rest - b[free] @ x, "jac": lambda x: -b[free]}]
    out = sp_minimize(fun, z0[free], jac=True, method="SLSQP", bounds=[(0.0, 1.0)] * len(free),
                      constraints=constraints, options={"maxiter": max_iterations, "ftol": 1e-12})
    z = full(out.x)
    if np.isfinite(slack) and b @ z > slack:  # SLSQP may end a hair outside the budget
        z[free] = np.asarray(project_budget(jnp.asarray(z[free]), jnp.asarray(b[free]), max(rest, 0.0)))
    v = float(value_and_grad(z)[0])
    v0 = float(value_and_grad(z0)[0])
    calls[0] += 2
    return (z, v, calls[0]) if v <= v0 else (z0, v0, calls[0])


def finish(result: Result, network, space: Space, exact: Callable, *, budget: float | None = None,
           gradient: Callable | None = None, tolerance: float = 1e-3, max_roundings: int = 64,
           max_evaluations: int = 400) -> Finish:
    """Round ``result`` (from ``minimize``) to the knobs' allowed values and refine it on ``exact``
    (a function of (network, logits)) within the budget; every rounding tried is re-optimised.
    ``gradient``: the exact step time as a differentiable function of (network, logits); with it,
    SLSQP polishes the continuous knobs of each rounding before the compass search."""
    logits = result.logits
    counted = _Counted(lambda z: exact(space.network(network, jnp.asarray(z)), logits))
    value_and_grad = None
    if gradient is not None:
        import jax

        compiled = jax.jit(jax.value_and_grad(lambda z: gradient(space.network(network, z), logits)))
        value_and_grad = lambda z: compiled(jnp.asarray(z))  # noqa: E731
    polished = 0
    a, b = space.cost_line()
    slack = np.inf if budget is None else budget - a
    values = {g: p["value"] for g, p in result.parameters.items()}
    searched = space.positions(values)
    discrete = [i for i, k in enumerate(space.knobs) if k.allowed]
    choices = [sorted({float(space.positions({**values, space.knobs[i].group: v})[i]) for v in space.knobs[i].allowed})
               for i in discrete]  # each discrete knob's allowed values, as positions
    combos = list(itertools.product(*choices))
    if len(combos) > max_roundings:  # the allowed values on either side of each searched position
        near = [_around(c, searched[i]) for i, c in zip(discrete, choices)]
        combos = sorted(itertools.product(*near), key=lambda c: sum(abs(v - searched[i]) for i, v in zip(discrete, c)))
        combos = combos[:max_roundings]
    continuous = [i for i in range(len(space.knobs)) if i not in discrete]
    best = None
    for combo in combos:
        z = searched.copy()
        z[discrete] = combo
        left = slack - float(b[discrete] @ np.asarray(combo)) if discrete else slack
        if left < -1e-12 * max(1.0, abs(slack)):
            continue  # this rounding alone is over budget
        if continuous:
            z[continuous] = np.asarray(project_budget(jnp.asarray(z[continuous]), jnp.asarray(b[continuous]),
                                                      max(left, 0.0)))
            if value_and_grad is not None:
                z, _, calls = polish(value_and_grad, z, space, budget=budget, fixed=discrete)
                polished += calls
        z, value, check, _ = refine(counted, z, space, budget=budget, fixed=discrete, tolerance=tolerance,
                                    max_evaluations=max_evaluations)
        if best is None or value < best[1]:
            best = (z, value, check)
    if best is None:
        raise Infeasible(f"rounding: no combination of allowed values fits the budget {budget:.6g}")
    z, value, check = best
    values = space.values(z)
    params = {g: {"value": float(v), "unit": space.info.groups[g].unit} for g, v in values.items()}
    refined = dataclasses.replace(result, optimized=value, parameters=params, cost=float(a + b @ z),
                                  network=space.network(network, jnp.asarray(z)))
    return Finish(refined, check, len(combos), counted.count, polished, budget)


def pareto(result: Result, network, space: Space, exact: Callable, budgets: Sequence[float], *,
           gradient: Callable | None = None, tolerance: float = 1e-3) -> list[Finish]:
    """The cost / step-time front: ``finish`` at each budget (ascending), each warm-started from the
    previous point's optimum (projected onto the budget when it is lower); budgets no rounding of
    the allowed values fits are left out."""
    points, start = [], result
    for budget in sorted(budgets):
        try:
            point = finish(start, network, space, exact, budget=budget, gradient=gradient, tolerance=tolerance)
        except Infeasible:
            continue  # below the cheapest rounding: no buildable point at this budget
        points.append(point)
        start = point.result
    return points


def budget_range(space: Space, points: int) -> np.ndarray:
    """``points`` budgets from the knobs' cheapest setting (every knob at its cheap end) to their
    dearest (every knob at its dear end)."""
    a, b = space.cost_line()
    return np.linspace(a, a + b.sum(), points)
