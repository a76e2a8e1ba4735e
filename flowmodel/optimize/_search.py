"""Gradient search over network parameters (oversubscription, capacities, routing logits) under a budget.

Every free link group is a *knob* moved in [0, 1] along the quantity its capacity is linear in: the
capacity itself for capacity groups (scale-across links, NICs), the uplink fraction 1/ratio for
oversubscription groups. The cost of ports and optics is linear in capacity, so the cost is linear
in the knobs and the budget is a half-space; each Adam update is followed by the exact Euclidean
projection onto [0, 1]^K intersected with it (bisection on its multiplier). Projection rather than a
penalty: every iterate is feasible and there is no penalty weight to tune. WCMP logits are free.

The search runs on whatever objective it is given (the smooth step time, for informative gradients);
results are reported with ``exact`` (the exact model) and restarts keep the best exact value.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from .. import _units
from ..fabric._build import CAPACITY
from ..fabric._network import FabricInfo, Network, apply_groups

GBPS = 1e9 / 8  # bytes/s in one Gbit/s


@dataclasses.dataclass(frozen=True)
class Knob:
    """A free link group and its box, in the group's unit (ratio for oversubscription, bytes/s for
    capacity); ``allowed`` lists the values a rounding step may snap to (port counts, optics sizes)."""

    group: str
    lower: float
    upper: float
    allowed: tuple[float, ...] | None = None

    def __post_init__(self):
        # as in a config: a number is a ratio or bytes/s, a string a bandwidth ("400Gbps")
        where = f"knobs[{self.group}]"
        for name in ("lower", "upper"):
            object.__setattr__(self, name, _units.coerce(getattr(self, name), "bandwidth", f"{where}.{name}"))
        if self.allowed is not None and not isinstance(self.allowed, str):
            object.__setattr__(self, "allowed", tuple(_units.coerce(v, "bandwidth", f"{where}.allowed[{i}]")
                                                      for i, v in enumerate(self.allowed)))
        for name in ("lower", "upper"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"knobs[{self.group}].{name}: must be > 0 and finite, got {v!r}")
        if self.lower > self.upper:
            raise ValueError(f"knobs[{self.group}]: bounds reversed, lower {self.lower} > upper {self.upper}")
        if self.allowed is not None:
            object.__setattr__(self, "allowed", tuple(sorted(self.allowed)))
            if not self.allowed or self.allowed[0] < self.lower or self.allowed[-1] > self.upper:
                raise ValueError(f"knobs[{self.group}].allowed: values must lie in [{self.lower}, {self.upper}], "
                                 f"got {list(self.allowed)}")


@dataclasses.dataclass(frozen=True)
class CostModel:
    """Price of capacity: per Gbit/s of each tier's links (ports and optics, both ends of a cable
    counted once per direction), plus per Gbit/s x km for links with a length (long-haul fibre)."""

    per_gbps: Mapping[str, float] = dataclasses.field(default_factory=dict)
    per_gbps_km: float = 0.0

    def link_prices(self, info: FabricInfo) -> np.ndarray:
        """float64[L]: cost per byte/s of capacity on each link."""
        unknown = set(self.per_gbps) - set(info.tier.tolist())
        if unknown:
            raise ValueError(f"cost.per_gbps: no link has tier {sorted(unknown)[0]!r}; tiers: {sorted(set(info.tier))}")
        per_tier = np.array([self.per_gbps.get(t, 0.0) for t in info.tier.tolist()])
        return (per_tier + self.per_gbps_km * info.length_km) / GBPS


class Position(eqx.Module):
    """What the search moves: knob positions in [0, 1] and WCMP logits per routed phase."""

    z: jax.Array
    logits: dict


@dataclasses.dataclass(frozen=True, eq=False)
class Space:
    """The knobs of a fabric: how positions map to capacities and to cost."""

    info: FabricInfo
    knobs: tuple[Knob, ...]
    cost: CostModel

    def __post_init__(self):
        seen = set()
        for k in self.knobs:
            if k.group not in self.info.groups:
                raise ValueError(f"knobs: unknown link group {k.group!r}; known: {', '.join(sorted(self.info.groups))}")
            if k.group in seen:
                raise ValueError(f"knobs: group {k.group!r} is listed twice")
            seen.add(k.group)

    def _linear(self, k: Knob) -> tuple[float, float]:
        """(value at z=0, value at z=1) of the capacity-linear quantity."""
        if self.info.groups[k.group].kind == CAPACITY:
            return k.lower, k.upper
        return 1.0 / k.upper, 1.0 / k.lower  # uplink fraction 1/ratio

    def values(self, z) -> dict:
        """Group values (ratio or bytes/s) at positions ``z``."""
        out = {}
        for i, k in enumerate(self.knobs):
            lo, hi = self._linear(k)
            q = lo + z[i] * (hi - lo)
            out[k.group] = q if self.info.groups[k.group].kind == CAPACITY else 1.0 / q
        return out

    def positions(self, values: Mapping[str, float]) -> np.ndarray:
        z = []
        for k in self.knobs:
            lo, hi = self._linear(k)
            v = values[k.group]
            q = v if self.info.groups[k.group].kind == CAPACITY else 1.0 / v
            z.append(0.0 if hi == lo else (q - lo) / (hi - lo))
        return np.clip(np.array(z), 0.0, 1.0)

    def network(self, base: Network, z) -> Network:
        return apply_groups(base, self.info, self.values(z))

    def _unit_costs(self) -> list[float]:
        """Per knob, the cost of one unit of its capacity-linear quantity: the physical capacity (a group
        whose links carry a fraction ``efficiency`` of it pays for all of it)."""
        price = self.cost.link_prices(self.info)
        groups = self.info.groups
        return [float(np.sum(price[groups[k.group].links] * groups[k.group].coef) / groups[k.group].efficiency)
                for k in self.knobs]

    def cost_at(self, values: Mapping[str, float]) -> float:
        """Cost of the knobs' links at group ``values`` (ratio or bytes/s), inside the box or not."""
        return sum(unit * (values[k.group] if self.info.groups[k.group].kind == CAPACITY else 1.0 / values[k.group])
                   for k, unit in zip(self.knobs, self._unit_costs()))

    def cost_line(self) -> tuple[float, np.ndarray]:
        """Cost of the knobs' links = a + b . z."""
        a, b = 0.0, []
        for k, unit in zip(self.knobs, self._unit_costs()):
            lo, hi = self._linear(k)
            a += unit * lo
            b.append(unit * (hi - lo))
        return a, np.array(b)


def project_budget(y, b, slack):
    """Euclidean projection of ``y`` onto {z in [0, 1]^K : b . z <= slack} (b >= 0), by bisection."""
    if y.shape[0] == 0:
        return y
    z0 = jnp.clip(y, 0.0, 1.0)

    def spent(lam):
        return jnp.dot(b, jnp.clip(y - lam * b, 0.0, 1.0))

    hi = jnp.max(jnp.abs(y) + 1.0) / jnp.maximum(jnp.min(jnp.where(b > 0, b, jnp.inf)), 1e-300)

    def body(_, bounds):
        lo_, hi_ = bounds
        mid = 0.5 * (lo_ + hi_)
        over = spent(mid) > slack
        return jnp.where(over, mid, lo_), jnp.where(over, hi_, mid)

    _, lam = jax.lax.fori_loop(0, 100, body, (jnp.zeros_like(hi), hi))
    return jnp.where(jnp.dot(b, z0) <= slack, z0, jnp.clip(y - lam * b, 0.0, 1.0))


@dataclasses.dataclass(frozen=True)
class Result:
    """Outcome of ``minimize``: baseline and optimised exact objective, parameters with units, cost,
    per-step history of the searched objective (best restart), and the optimised network and logits."""

    baseline: float
    optimized: float
    parameters: dict
    cost: float
    history: np.ndarray
    network: Network
    logits: dict
    restarts: list


def baseline_value(exact: Callable, network: Network, logits=None) -> float:
    """``exact`` at the fabric's own knob values: what ``minimize`` reports as its baseline.

    The network is evaluated as given (not rebuilt from knob positions), so the baseline is the
    scenario's own step time exactly, also where a build value lies outside its knob's box.
    """
    return float(exact(network, {k: jnp.asarray(v) for k, v in (logits or {}).items()}))


def minimize(objective: Callable, network: Network, space: Space, *, exact: Callable | None = None,
             logits: Mapping | None = None, budget: float | None = None, steps: int = 200,
             optimizer: optax.GradientTransformation | None = None, restarts: int = 1, seed: int = 0,
             frozen_logits: bool = False, callback: Callable[[int, float], None] | None = None) -> Result:
    """Minimise ``objective(network, logits)`` over the knobs of ``space`` and WCMP ``logits``.

    Args:
      objective: differentiable scalar of (Network, logits dict) - e.g. the smooth step time.
      exact: the same quantity for reporting (default: ``objective``).
      logits: initial WCMP logits per routed phase name (``steptime.routed_phases``), or None.
      budget: at most this cost for the knobs' links (``space.cost``); None for no budget.
      restarts: runs from different starting points (the first from the fabric's own values,
        projected onto the budget); the best by ``exact`` wins.
      callback: called as ``callback(step, objective)`` after every step (progress bars).

    Example (two buildings 100 km apart; a ring all-reduce over all 16 GPUs; buy long-haul capacity
    at 1 per Gbit/s x km, both directions, with a budget of 160,000):

      >>> from flowmodel import fabric as fb, optimize, routing as rt, steptime as st, traffic as tr
      >>> site = fb.Clos(tiers=2, gpus_per_leaf=4, leaves_per_pod=2, spines_per_pod=2)
      >>> fleet = fb.Fleet(sites=(fb.Site("a", scale_out=site), fb.Site("b", scale_out=site)),
      ...                  long_haul=(fb.LongHaul("a", "b", capacity=10e9, length_km=100.0),))
      >>> network, info = fb.compile_fabric(fb.build(fleet))
      >>> ring = [st.route_phase(p, rt.Router(info)) for p in tr.all_reduce(range(16), 1e9).phases]
      >>> def seconds(net, logits, options=st.EXACT):
      ...     return sum(st.phase_time(p, net.capacity, net.latency, options) for p in ring)
      >>> space = optimize.Space(info, (optimize.Knob("long_haul/a-b", 10e9, 400e9),),
      ...                        optimize.CostModel(per_gbps_km=1.0))
      >>> smooth = st.Options(rates="smooth")
      >>> res = optimize.minimize(lambda n, lg: seconds(n, lg, smooth), network, space, budget=160_000,
      ...                         exact=lambda n, lg: float(seconds(n, lg)), steps=60)
      >>> round(res.parameters["long_haul/a-b"]["value"] / 1e9)  # GB/s: the whole budget
      100
      >>> res.optimized < res.baseline
      True
    """
    if not space.knobs and not logits:
        raise ValueError("minimize: nothing to optimise (no knobs and no logits)")
    if not (isinstance(steps, int) and steps >= 1):
        raise ValueError(f"steps: must be an integer >= 1, got {steps!r}")
    if not (isinstance(restarts, int) and restarts >= 1):
        raise ValueError(f"restarts: must be an integer >= 1, got {restarts!r}")
    exact = exact or objective
    a, b = space.cost_line()
    slack = np.inf if budget is None else budget - a
    if budget is not None and slack < 0:
        raise ValueError(f"budget: {budget:.6g} is infeasible; the knobs' lower-cost ends already cost {a:.6g}")
    b_j = jnp.asarray(b)
    slack_j = jnp.asarray(slack if np.isfinite(slack) else 1e300)
    opt = optimizer or optax.adam(0.05)
    logits0 = {k: jnp.asarray(v) for k, v in (logits or {}).items()}

    def loss(pos: Position):
        return objective(space.network(network, pos.z), pos.logits)

    @eqx.filter_jit
    def update(pos: Position, state):
        value, grad = jax.value_and_grad(loss)(pos)
        if frozen_logits:
            grad = Position(grad.z, jax.tree.map(jnp.zeros_like, grad.logits))
        updates, state = opt.update(grad, state, pos)
        pos = optax.apply_updates(pos, updates)
        return Position(project_budget(pos.z, b_j, slack_j), pos.logits), state, value

    base_z = space.positions({k.group: space.info.groups[k.group].value for k in space.knobs})
    baseline = baseline_value(exact, network, logits0)
    rng = np.random.default_rng(seed)
    runs = []
    for r in range(restarts):
        z0 = base_z if r == 0 else rng.uniform(0, 1, len(space.knobs))
        lg = logits0 if r == 0 else {k: v + 0.5 * rng.normal(size=v.shape) for k, v in logits0.items()}
        pos = Position(project_budget(jnp.asarray(z0, jnp.result_type(float)), b_j, slack_j), lg)
        state = opt.init(pos)
        history = []
        for i in range(steps):
            pos, state, value = update(pos, state)
            history.append(float(value))
            if callback is not None:
                callback(r * steps + i, history[-1])
        final = float(exact(space.network(network, pos.z), pos.logits))
        runs.append((final, pos, np.array(history)))
    final, pos, history = min(runs, key=lambda run: run[0])
    values = space.values(np.asarray(pos.z))
    params = {k.group: {"value": float(values[k.group]), "unit": space.info.groups[k.group].unit}
              for k in space.knobs}
    return Result(baseline=baseline, optimized=final, parameters=params,
                  cost=float(a + np.dot(b, np.asarray(pos.z))), history=history,
                  network=space.network(network, pos.z), logits=dict(pos.logits),
                  restarts=[run[0] for run in runs])


def _best_of(candidates: np.ndarray, exact: Callable, network: Network, space: Space, budget, logits, who: str):
    a, b = space.cost_line()
    best, best_z, evals = np.inf, None, 0
    for z in candidates:
        if budget is not None and a + float(np.dot(b, z)) > budget * (1 + 1e-12):
            continue
        evals += 1
        value = float(exact(space.network(network, jnp.asarray(z)), logits or {}))
        if value < best:
            best, best_z = value, z
    if best_z is None:
        raise ValueError(f"{who}: no candidate point fits the budget")
    return best, space.values(best_z), evals


def grid_search(exact: Callable, network: Network, space: Space, points: int | Sequence[int], *,
                budget: float | None = None, logits=None) -> tuple[float, dict, int]:
    """Best exact objective over a grid of knob positions within the budget: (value, parameters, evaluations)."""
    counts = [points] * len(space.knobs) if isinstance(points, int) else list(points)
    axes = [np.linspace(0, 1, n) for n in counts]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(space.knobs))
    return _best_of(grid, exact, network, space, budget, logits, "grid_search")


def random_search(exact: Callable, network: Network, space: Space, evaluations: int, *,
                  budget: float | None = None, logits=None, seed: int = 0) -> tuple[float, dict, int]:
    """Best exact objective over uniformly drawn knob positions, projected onto the budget."""
    rng = np.random.default_rng(seed)
    a, b = space.cost_line()
    slack = 1e300 if budget is None else budget - a
    draws = rng.uniform(0, 1, (evaluations, len(space.knobs)))
    points = np.stack([np.asarray(project_budget(jnp.asarray(z), jnp.asarray(b), slack)) for z in draws])
    return _best_of(points, exact, network, space, budget, logits, "random_search")
