"""Finishing a search on the exact model: rounding to allowed values, a first-order refinement within
the budget, the optimality check a result reports, and the least-cost point when budget buys nothing.

The gradient search (``minimize``) runs on the smooth step time; its end point is close to, not at,
an optimum of the exact one, and rounding to allowed values leaves budget unspent.

**The check** is first-order (KKT) on the box [0, 1]^K of knob positions and the budget b . z <= B:
there must be a multiplier lambda >= 0 (0 unless the budget binds) with, per knob, g_i + lambda b_i
= 0 inside its box, >= 0 at its lower end and <= 0 at its upper end. The exact step time has kinks
(a max over jobs and phases; bottleneck switches), where the gradient is one-sided, so the check
measures both one-sided derivatives of every knob by exact forward differences (2K evaluations):
g_i lies anywhere between them, and the conditions above are checked against that interval. At a
tie of several knobs (two links in series at equal capacity) the one-sided model of each knob alone
can hide a move that shifts budget from the tied knobs together to another one, so the check also
polls a few exact moves there (the tied knobs' capacities scaled together, the cost re-spent on the
best other knob, or taken from the cheapest one), and samples a small bundle of gradients on either
side of the tie (forward differences at a few displaced points) whose combination closest to the KKT
conditions gives one more move to poll: O(K) evaluations in all (2K, and 6K at a tie).

**The refinement** moves every knob at once by a diagonal Newton step built from the check's
differences (the budget multiplier keeping it within the budget), then takes the moves the check
ranks best (a knob up, a knob down, a budget-neutral pair, a tie poll), each with an exact line
search that finds a kink on the line by golden section, and checks again, a bounded number of
rounds. Pairwise and tie polls cannot see every descent at a tie of three or more jobs; such a point
may pass (as it passed the pairwise compass polls this replaces). With the exact gradient (``gradient=``),
SciPy's SLSQP polishes the continuous knobs first.

**Rounding**: every combination of allowed values when there are at most ``max_roundings``
(otherwise a coordinate rounding: nearest values, then each discrete knob moved one allowed value
while that improves), the continuous knobs re-optimised for each when that is cheap.

**Least cost**: when no knob's increase improves the step time beyond the check's tolerance, more
budget buys nothing, and the knobs are shrunk toward their cheap ends while the exact step time stays
the same (within ``same``): the result is the cheapest point found at the optimum's step time.

Stages that may take longer than ~2 s show a progress bar with an ETA on stderr (``progress=True``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence

import jax.numpy as jnp
import numpy as np

from ._search import Result, Space, project_budget

STEPS = tuple(4.0**-i for i in range(1, 7))  # line-search sizes 1/4 .. 1/4096, in knob positions (a box is [0, 1])
DIFFERENCE = 1e-4  # the one-sided difference step, in knob positions
SAME = 1e-6  # the least-cost point keeps the step time within this (relative) of the optimum's


class Infeasible(ValueError):
    """No combination of allowed values fits the budget."""


@dataclasses.dataclass(frozen=True)
class Check:
    """The first-order optimality check at a point.

    ``passed`` when the KKT conditions hold within ``tolerance`` (relative step time per unit of knob
    position) at the budget multiplier ``multiplier`` (relative step time per unit cost; 0 unless the
    budget ``binding``), and no poll at the ``ties`` (knobs at a kink) improved by more.
    ``residual`` is the largest KKT violation at that multiplier. ``best_move`` names the feasible
    move that improves most (to first order, or in a poll) and ``best_gain`` its relative improvement
    per unit move (<= 0: nothing improves). ``buys_nothing``: no knob's increase improves beyond the
    tolerance (more budget buys nothing). ``moves``: the exact evaluations the check spent.
    """

    passed: bool
    value: float
    tolerance: float
    multiplier: float
    residual: float
    binding: bool
    moves: int
    best_move: str | None
    best_gain: float
    ties: tuple[str, ...] = ()
    buys_nothing: bool = False

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class _Counted:
    """``f`` with a count of its evaluations (the figure benchmarks compare), ticking a progress bar."""

    def __init__(self, f: Callable[[np.ndarray], float]):
        self.f, self.count, self.bar = f, 0, None

    def __call__(self, z: np.ndarray) -> float:
        self.count += 1
        if self.bar is not None:
            self.bar.update(1)
        return float(self.f(z))

    @contextlib.contextmanager
    def watched(self, progress: bool, total: int, desc: str):
        outer, self.bar = self.bar, _bar(progress, total, desc)
        try:
            yield
        finally:
            self.bar.close()
            self.bar = outer


def _bar(progress: bool, total: int | None, desc: str, unit: str = "eval"):
    """A progress bar with an ETA on stderr, shown only once its stage has run for 2 s."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, disable=not progress, delay=2.0, leave=False, unit=unit)


def _counted(f) -> _Counted:
    return f if isinstance(f, _Counted) else _Counted(f)


@dataclasses.dataclass(frozen=True)
class _Box:
    """The knobs as the finish sees them: cost slope ``b``, the slack left for them (budget - a),
    the knobs that may move, their names, and ``offset`` = the capacity-linear quantity at position 0
    over its span, so that scaling capacities by (1 + s) moves positions by s (offset + z)."""

    b: np.ndarray
    slack: float
    free: tuple[int, ...]
    names: tuple[str, ...]
    offset: np.ndarray

    def room(self, z: np.ndarray, d: np.ndarray) -> float:
        """The longest t with z + t d in the box and within the budget."""
        t = np.inf
        up, down = d > 1e-15, d < -1e-15
        if up.any():
            t = min(t, float(np.min((1.0 - z[up]) / d[up])))
        if down.any():
            t = min(t, float(np.min(z[down] / -d[down])))
        spend = float(self.b @ d)
        if np.isfinite(self.slack) and spend > 0:
            t = min(t, max(self.slack - float(self.b @ z), 0.0) / spend)
        return max(t, 0.0)


def _box(space: Space, budget: float | None, fixed: Sequence[int]) -> _Box:
    a, b = space.cost_line()
    slack = np.inf if budget is None else budget - a
    spans = [space._linear(k) for k in space.knobs]
    offset = np.array([lo / (hi - lo) if hi > lo else 0.0 for lo, hi in spans])
    free = tuple(i for i, (lo, hi) in enumerate(spans) if i not in set(fixed) and hi > lo)
    return _Box(b, slack, free, tuple(k.group for k in space.knobs), offset)


def _one_sided(f: _Counted, z: np.ndarray, value: float, box: _Box, h: float):
    """Per knob, the relative one-sided derivatives along +e_i and -e_i (nan where at the bound)."""
    up, down = np.full(len(z), np.nan), np.full(len(z), np.nan)
    for i in box.free:
        for sign, out in ((1.0, up), (-1.0, down)):
            t = min(h, 1.0 - z[i]) if sign > 0 else min(h, z[i])
            if t > 1e-12:
                w = z.copy()
                w[i] += sign * t
                out[i] = (f(w) - value) / (abs(value) * t)
    return up, down


def _multiplier(up: np.ndarray, down: np.ndarray, b: np.ndarray, binding: bool) -> tuple[float, float]:
    """The budget multiplier lambda >= 0 minimising the largest KKT violation, and that violation:
    a knob that can go up needs up_i + lambda b_i >= 0, one that can go down down_i - lambda b_i >= 0."""
    ok_up, ok_down = ~np.isnan(up), ~np.isnan(down)

    def violation(lam: float) -> float:
        v_up = -(up[ok_up] + lam * b[ok_up])
        v_down = -(down[ok_down] - lam * b[ok_down])
        return float(max(np.max(v_up, initial=0.0), np.max(v_down, initial=0.0), 0.0))

    at_zero = violation(0.0)
    if not binding or at_zero == 0.0:
        return 0.0, at_zero
    # convex and piecewise linear in lambda: its minimum lies at a breakpoint or a crossing; ternary search
    with np.errstate(divide="ignore", invalid="ignore"):
        marks = np.concatenate([-up[ok_up] / b[ok_up], down[ok_down] / b[ok_down]])
    marks = marks[np.isfinite(marks) & (marks > 0)]
    lo, hi = 0.0, float(marks.max()) if marks.size else 0.0
    for _ in range(200):
        m1, m2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        lo, hi = (lo, m2) if violation(m1) <= violation(m2) else (m1, hi)
    lam = 0.5 * (lo + hi)
    best = violation(lam)
    return (0.0, at_zero) if at_zero <= best else (lam, best)


def _first_order_moves(up, down, box: _Box, binding: bool, z: np.ndarray):
    """Feasible moves ranked by their first-order relative gain per unit move: (gain, name, direction)."""
    K, b, moves = len(z), box.b, []
    free = np.array(box.free, dtype=int)
    for i in box.free:
        if not np.isnan(up[i]) and (not binding or b[i] <= 0):
            moves.append((-up[i], f"{box.names[i]} up", np.eye(K)[i]))
        if not np.isnan(down[i]):
            moves.append((-down[i], f"{box.names[i]} down", -np.eye(K)[i]))
    paid = free[b[free] > 0] if free.size else free
    if paid.size >= 2:  # budget-neutral pairs: i up by b_j / (b_i + b_j), j down by b_i / (b_i + b_j)
        bi, bj = b[paid][:, None], b[paid][None, :]
        gain = -(bj * up[paid][:, None] + bi * down[paid][None, :]) / (bi + bj)
        np.fill_diagonal(gain, -np.inf)
        gain = np.where(np.isnan(gain), -np.inf, gain)
        for flat in np.argsort(gain, axis=None)[::-1][: 4 * paid.size]:
            r, c = divmod(int(flat), paid.size)
            if not np.isfinite(gain[r, c]) or gain[r, c] <= 0:
                break
            i, j = int(paid[r]), int(paid[c])
            d = np.zeros(K)
            d[i], d[j] = b[j] / (b[i] + b[j]), -b[i] / (b[i] + b[j])
            moves.append((float(gain[r, c]), f"{box.names[i]} up, {box.names[j]} down", d))
    moves.sort(key=lambda m: -m[0])
    return moves


def _tie_polls(f: _Counted, z, value, up, down, box: _Box, tolerance: float, kinked=(), sizes=(1e-2, 1e-3)):
    """Exact polls at the knobs with a kink (one-sided derivatives far apart, or ``kinked``: a pair
    whose first-order gain the exact poll did not show): their capacities scaled together down (the
    cost re-spent on the other knob that gains most per cost) and up (the cost taken from the knob
    that loses least per cost, or the leftover budget)."""
    width = up + down
    ties = [i for i in box.free if i in kinked or (np.isfinite(width[i]) and width[i] > tolerance
                                                    and width[i] > 0.5 * max(abs(up[i]), abs(down[i])))]
    if len(ties) < 2:
        return ties, []
    b, others = box.b, [i for i in box.free if i not in ties]
    rate_up = {i: up[i] / b[i] for i in others if b[i] > 0 and np.isfinite(up[i])}
    rate_down = {i: down[i] / b[i] for i in others if b[i] > 0 and np.isfinite(down[i])}
    left = box.slack - float(b @ z)
    out = []
    for s in sizes:
        for sign in (-1.0, 1.0):
            d = np.zeros(len(z))
            d[ties] = sign * s * (box.offset[ties] + z[ties])
            spend = float(b @ d)
            if sign < 0 and rate_up and min(rate_up.values()) < 0:
                r = min(rate_up, key=rate_up.get)
                d[r] = -spend / b[r]
            elif sign > 0 and spend > max(left, 0.0):
                if not rate_down:
                    continue
                j = min(rate_down, key=rate_down.get)
                d[j] = -(spend - max(left, 0.0)) / b[j]
            t = min(1.0, box.room(z, d))
            if t * np.abs(d).sum() < 1e-12:
                continue
            w = np.clip(z + t * d, 0.0, 1.0)
            gain = (value - f(w)) / (abs(value) * np.abs(w - z).sum())
            name = f"{'+' if sign > 0 else '-'}{s:g} on {', '.join(box.names[i] for i in ties)}"
            out.append((gain, name, d))
    return ties, out


def _poll(f: _Counted, z, value, d, box: _Box, h: float):
    """The exact relative gain per unit move (sum of |position changes|) of a move of size ``h`` along ``d``."""
    t = min(h / float(np.abs(d).max()), box.room(z, d))
    w = np.clip(z + t * d, 0.0, 1.0)
    moved = float(np.abs(w - z).sum())
    return -np.inf if moved < 1e-15 else (value - f(w)) / (abs(value) * moved)


def _bundle_poll(f: _Counted, z, value, box: _Box, ties, binding: bool, h: float, samples: int, radius: float = 1e-3):
    """Gradients sampled on either side of a tie (the tied knobs displaced by +-``radius`` at random;
    forward differences, K evaluations each), the combination of them closest to the KKT conditions
    (weights on the simplex, a budget multiplier), and an exact poll along what is left of it: a
    descent for every sampled piece, found where the per-knob and pair views are blind."""
    from scipy.optimize import nnls

    free = np.array(box.free, dtype=int)
    rng = np.random.default_rng(len(free))
    grads = []
    for _ in range(samples):
        y = z.copy()
        y[ties] = np.clip(z[ties] + radius * rng.choice([-1.0, 1.0], len(ties)), 0.0, 1.0)
        fy, g = f(y), np.zeros(len(z))
        for i in free:
            t = h if y[i] + h <= 1.0 else -h
            w = y.copy()
            w[i] += t
            g[i] = (f(w) - fy) / (abs(value) * t)
        grads.append(g[free])
    # min || sum_k mu_k g_k + lam b ||, mu >= 0 summing to 1 (a heavy row), lam >= 0 (only when the budget binds);
    # components at a bound that push outward are dropped: they are feasible to leave as they are
    G = np.stack(grads, 1)
    cols = np.hstack([G, box.b[free][:, None]]) if binding else G
    keep = ~(((z[free] <= 1e-12) & (G.min(1) >= 0)) | ((z[free] >= 1 - 1e-12) & (G.max(1) <= 0)))
    A = np.vstack([cols[keep], 1e3 * np.r_[np.ones(len(grads)), np.zeros(cols.shape[1] - len(grads))]])
    coef, _ = nnls(A, np.r_[np.zeros(int(keep.sum())), 1e3])
    r = cols @ coef
    d = np.zeros(len(z))
    d[free] = -r
    d[free[(z[free] <= 1e-12) & (d[free] < 0)]] = 0.0
    d[free[(z[free] >= 1 - 1e-12) & (d[free] > 0)]] = 0.0
    if binding and float(box.b @ d) > 0:  # stay within the budget: take the spend out along b
        d[free] -= float(box.b @ d) / float(box.b[free] @ box.b[free]) * box.b[free]
    if np.abs(d).max() < 1e-12:
        return []
    d /= float(np.abs(d).max())
    return [(_poll(f, z, value, d, box, s), f"bundle of {samples} gradients at the tie, by {s:g}", d)
            for s in (1e-2, 1e-3)]


def _check(f: _Counted, z, box: _Box, value: float, tolerance: float, h: float, progress: bool, polls: int = 8,
           bundle: int = 4):
    """The check and the moves it ranks best: (check, [(gain, name, direction)] improving, (up, down)).

    A single knob's one-sided difference is an exact poll of that move; a pair's first-order gain
    combines two knobs' differences, which near a kink (closer than ``h``) may be measured on
    different sides of it, so the best ``polls`` pairs that seem to improve are polled exactly at
    size ``h``: the exact gain decides."""
    start = f.count
    left = box.slack - float(box.b @ z)
    binding = bool(np.isfinite(box.slack) and left <= 1e-6 * max(float(box.b[list(box.free)].sum()), 1e-300))
    total = (2 + bundle) * len(box.free) + bundle + 8 + polls  # at most: the bundle only where knobs tie
    with f.watched(progress, total, "certify: one-sided derivatives and polls"):
        up, down = _one_sided(f, z, value, box, h)
        moves, unresolved, kinked = [], False, set()
        for gain, name, d in _first_order_moves(up, down, box, binding, z):
            if "," in name and gain > tolerance:  # a pair: confirm it exactly
                if polls == 0:
                    unresolved = True
                    continue
                polls -= 1
                gain = _poll(f, z, value, d, box, h)
                if gain <= tolerance:  # its two knobs meet at a kink closer than h
                    kinked |= set(np.flatnonzero(np.abs(d) > 1e-15).tolist())
            moves.append((gain, name, d))
        ties, tied = _tie_polls(f, z, value, up, down, box, tolerance, kinked)
        newton = _newton(z, (up, down), box, h)
        if newton is not None and ties:  # the move of every knob at once, where the per-knob view is weakest
            d = newton / float(np.abs(newton).max())
            tied += [(_poll(f, z, value, d, box, s), f"all knobs along the projected gradient by {s:g}", d)
                     for s in (1e-2, 1e-3)]
        if len(ties) >= 2 and bundle > 0:
            tied += _bundle_poll(f, z, value, box, ties, binding, h, bundle)
    lam, residual = _multiplier(up, down, box.b, binding)
    ranked = sorted([m for m in tied + moves if m[0] > 0], key=lambda m: -m[0])
    best_gain, best_move = (ranked[0][0], ranked[0][1]) if ranked else (0.0, None)
    ok_up = ~np.isnan(up)
    buys_nothing = bool(np.max(-up[ok_up], initial=0.0) <= tolerance)
    check = Check(passed=bool(best_gain <= tolerance and not unresolved), value=value, tolerance=tolerance,
                  multiplier=lam, residual=residual, binding=binding, moves=f.count - start, best_move=best_move,
                  best_gain=float(best_gain), ties=tuple(box.names[i] for i in ties), buys_nothing=buys_nothing)
    return check, ranked, (up, down)


def optimality_check(f: Callable[[np.ndarray], float], z, space: Space, *, budget: float | None = None,
                     fixed: Sequence[int] = (), tolerance: float = 1e-3, value: float | None = None,
                     difference: float = DIFFERENCE, bundle: int = 4, progress: bool = False) -> Check:
    """The first-order check of knob positions ``z`` (``fixed`` knobs stay) on the exact objective ``f``;
    ``bundle``: gradients sampled at a tie (K evaluations each; 0 for none)."""
    counted, box = _counted(f), _box(space, budget, fixed)
    z = np.asarray(z, np.float64)
    own = value is None
    value = counted(z) if own else float(value)
    check, _, _ = _check(counted, z, box, value, tolerance, difference, progress, bundle=bundle)
    return dataclasses.replace(check, moves=check.moves + own)


def _line_search(f: _Counted, z, value, d, box: _Box, h: float, steps=STEPS):
    """The best point found along ``d`` from ``z``: sizes ``steps`` (largest first) down to ``h`` until
    one improves ``value``, then a golden-section search of the bracket down to ``h / 4`` (a kink on
    the line, where the bottleneck switches, is found to that precision): (z, value, improved)."""
    d = d / float(np.abs(d).max())
    room = box.room(z, d)
    sizes = sorted({min(t, room) for t in (*steps, h) if t >= h}, reverse=True)
    best_t, best_v, above = 0.0, value, None
    for t in sizes:
        if t < 1e-12:
            continue
        v = f(np.clip(z + t * d, 0.0, 1.0))
        if v < value * (1 - 1e-12):
            best_t, best_v = t, v
            break
        above = t
    if best_t == 0.0:
        return z, value, False
    if above is None:  # the longest step improved: take it
        return np.clip(z + best_t * d, 0.0, 1.0), best_v, True
    lo, hi = 0.0, above
    ratio = (math.sqrt(5) - 1) / 2

    def at(t):
        nonlocal best_t, best_v
        v = f(np.clip(z + t * d, 0.0, 1.0))
        if v < best_v:
            best_t, best_v = t, v
        return v

    a, c = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    va, vc = at(a), at(c)
    while hi - lo > h / 4:  # golden section: one evaluation per step, the bracket shrinks by 0.618
        if va <= vc:
            hi, c, vc = c, a, va
            a = hi - ratio * (hi - lo)
            va = at(a)
        else:
            lo, a, va = a, c, vc
            c = lo + ratio * (hi - lo)
            vc = at(c)
    return np.clip(z + best_t * d, 0.0, 1.0), best_v, True


def _newton(z, derivatives, box: _Box, h: float) -> np.ndarray | None:
    """A diagonal Newton move of every knob at once from the check's differences: gradient g = (up -
    down) / 2, curvature c = (up + down) / h (a kink's is large, so a tied knob barely moves), and the
    budget multiplier that keeps the move within the budget (budget-neutral when it binds)."""
    up, down = derivatives
    free = np.array(box.free, dtype=int)
    if free.size == 0:
        return None
    u, dn, b = up[free], down[free], box.b[free]
    g = np.where(np.isnan(u), -dn, np.where(np.isnan(dn), u, 0.5 * (u - dn)))
    c = (u + dn) / h
    c = np.where(np.isfinite(c) & (c > 0), c, np.nan)
    c = np.where(np.isnan(c), np.nanmedian(c) if np.isfinite(c).any() else 1.0, c)
    lo, hi = -z[free], 1.0 - z[free]

    def move(lam):
        return np.clip(-(g + lam * b) / c, lo, hi)

    left = box.slack - float(box.b @ z)
    if np.isfinite(box.slack) and float(b @ move(0.0)) > max(left, 0.0):
        top = 1.0
        while float(b @ move(top)) > max(left, 0.0) and top < 1e300:
            top *= 4.0
        bottom = 0.0
        for _ in range(100):  # bisection: the spend falls as lambda grows
            mid = 0.5 * (bottom + top)
            bottom, top = (mid, top) if float(b @ move(mid)) > max(left, 0.0) else (bottom, mid)
        step = move(top)
    else:
        step = move(0.0)
    d = np.zeros(len(z))
    d[free] = step
    return d if np.abs(d).max() > 1e-12 else None


def _refine(f: _Counted, z, box: _Box, tolerance: float, rounds: int, moves_per_round: int, h: float,
            progress: bool, bundle: int = 4):
    value = f(z)
    for _ in range(rounds):
        check, moves, derivatives = _check(f, z, box, value, tolerance, h, progress, bundle=bundle)
        if check.passed:
            return z, value, check, derivatives
        improved, used = False, set()
        newton = _newton(z, derivatives, box, h)
        if newton is not None:
            scale = float(np.abs(newton).max())
            z, value, improved = _line_search(f, z, value, newton, box, h,
                                              steps=tuple(scale * 2.0**-i for i in range(0, 12, 2)))
        for _, _, d in moves:
            knobs = set(np.flatnonzero(np.abs(d) > 1e-15).tolist())
            if knobs & used:
                continue
            used |= knobs
            z, value, ok = _line_search(f, z, value, d, box, h)
            improved |= ok
            if len(used) >= 2 * moves_per_round:
                break
        if not improved:
            return z, value, check, derivatives
    check, _, derivatives = _check(f, z, box, value, tolerance, h, progress, bundle=bundle)
    return z, value, check, derivatives


def refine(f: Callable[[np.ndarray], float], z0, space: Space, *, budget: float | None = None,
           fixed: Sequence[int] = (), tolerance: float = 1e-3, rounds: int = 8, moves_per_round: int = 8,
           difference: float = DIFFERENCE, bundle: int = 4, progress: bool = False
           ) -> tuple[np.ndarray, float, Check, int]:
    """First-order refinement on the exact objective ``f`` of knob positions from ``z0`` (feasible):
    up to ``rounds`` rounds of the check, each followed by a line search along its best
    ``moves_per_round`` moves on distinct knobs: (positions, value, the check there, evaluations).
    Each round costs 2K + O(1) evaluations."""
    counted, box = _counted(f), _box(space, budget, fixed)
    start = counted.count
    z, value, check, _ = _refine(counted, np.asarray(z0, np.float64), box, tolerance, rounds, moves_per_round,
                                 difference, progress, bundle)
    return z, value, check, counted.count - start


@dataclasses.dataclass(frozen=True)
class Finish:
    """What ``finish`` did: the refined result, its optimality check, the roundings tried, the exact
    forward evaluations spent and the exact gradients (value and gradient) taken by the polish.
    ``buys_nothing``: more budget buys nothing, so the result is the cheapest point found at the
    optimum's step time; ``saved`` is what that shrinking saved against the refined point."""

    result: Result
    check: Check
    roundings: int
    evaluations: int
    gradients: int = 0
    budget: float | None = None
    buys_nothing: bool = False
    saved: float = 0.0


def polish(value_and_grad: Callable, z0, space: Space, *, budget: float | None = None, fixed: Sequence[int] = (),
           max_iterations: int = 50, progress: bool = False) -> tuple[np.ndarray, float, int]:
    """SLSQP on the exact objective from ``z0`` over the knobs not ``fixed``: (positions, value,
    calls). ``value_and_grad(z) -> (float, float[K])``."""
    from scipy.optimize import minimize as sp_minimize

    box = _box(space, budget, fixed)
    free, b, slack = list(box.free), box.b, box.slack
    z0 = np.asarray(z0, np.float64)
    if not free:
        return z0, float(value_and_grad(z0)[0]), 1
    calls = [0]

    def full(x):
        z = z0.copy()
        z[free] = np.clip(x, 0.0, 1.0)
        return z

    with _bar(progress, max_iterations, "polish: SLSQP on the exact gradient", unit="gradient") as bar:
        def fun(x):
            calls[0] += 1
            bar.update(1)
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


def _nearest(values: list[float], x: float) -> int:
    return int(np.argmin([abs(v - x) for v in values]))


def _roundings(f: _Counted, searched, discrete, choices, continuous, box_all: _Box, max_roundings: int,
               progress: bool):
    """Candidate roundings of the discrete knobs, best first: [(value, z)], and how many were tried.
    Every combination when there are at most ``max_roundings``; otherwise a coordinate rounding."""
    b, slack = box_all.b, box_all.slack

    def point(combo):
        z = searched.copy()
        z[discrete] = combo
        left = slack - float(b[discrete] @ np.asarray(combo))
        if left < -1e-12 * max(1.0, abs(slack)):
            return None  # this rounding alone is over budget
        if continuous:
            z[continuous] = np.asarray(project_budget(jnp.asarray(z[continuous]), jnp.asarray(b[continuous]),
                                                      max(left, 0.0) if np.isfinite(left) else 1e300))
        return z

    if math.prod(len(c) for c in choices) <= max_roundings:
        tried = []
        combos = list(itertools.product(*choices))
        with f.watched(progress, len(combos), "round: every combination of allowed values"):
            for combo in combos:
                z = point(combo)
                if z is not None:
                    tried.append((f(z), z))
        return sorted(tried, key=lambda t: t[0]), len(combos)
    pos = [_nearest(c, searched[i]) for i, c in zip(discrete, choices)]

    def at(p):
        return point([c[k] for c, k in zip(choices, p)])

    while at(pos) is None:  # over budget: lower the knob whose next value down saves most
        saving = [b[i] * (c[k] - c[k - 1]) if k > 0 else -np.inf for i, c, k in zip(discrete, choices, pos)]
        d = int(np.argmax(saving))
        if not np.isfinite(saving[d]):
            return [], 1
        pos[d] -= 1
    with f.watched(progress, 1 + 4 * len(discrete), "round: coordinate rounding of the allowed values"):
        z = at(pos)
        value, tried = f(z), 1
        for _ in range(2):  # passes: each discrete knob one allowed value down or up while that improves
            changed = False
            for d, c in enumerate(choices):
                for k in (pos[d] - 1, pos[d] + 1):
                    if not 0 <= k < len(c):
                        continue
                    w = at(pos[:d] + [k] + pos[d + 1:])
                    if w is None:
                        continue
                    v, tried = f(w), tried + 1
                    if v < value * (1 - 1e-12):
                        pos[d], z, value, changed = k, w, v, True
                        break
            if not changed:
                break
    return [(value, z)], tried


def _least_cost(f: _Counted, z, value, box: _Box, discrete, choices, derivatives, tolerance: float, same: float,
                bisections: int, progress: bool):
    """Shrink knobs toward their cheap ends while the exact value stays within ``same`` of ``value``:
    continuous knobs by bisection on their position, discrete ones an allowed value at a time; the
    dearest first. A bounded number of evaluations: (1 + bisections) per continuous knob."""
    limit = value * (1 + same)
    b = box.b
    _, down = derivatives
    cont = [i for i in box.free if i not in discrete and b[i] > 0 and z[i] > 0
            and not (np.isfinite(down[i]) and down[i] > tolerance)]  # a decrease that costs to first order: keep
    order = sorted(cont + [i for i in discrete if b[i] > 0], key=lambda i: -b[i] * z[i])
    total = len(cont) * (1 + bisections) + sum(len(c) for c in choices)
    with f.watched(progress, total, "least cost: shrink what buys nothing"):
        for i in order:
            if i in discrete:
                values = choices[discrete.index(i)]
                for v in sorted((v for v in values if v < z[i] - 1e-12), reverse=True):
                    w = z.copy()
                    w[i] = v
                    got = f(w)
                    if got > limit:
                        break
                    z = w
                continue
            w = z.copy()
            w[i] = 0.0
            got = f(w)
            if got <= limit:
                z = w
                continue
            lo, hi = 0.0, z[i]  # lo: too low; hi: within the limit
            for _ in range(bisections):
                w = z.copy()
                w[i] = 0.5 * (lo + hi)
                got = f(w)
                lo, hi = (lo, w[i]) if got <= limit else (w[i], hi)
            w = z.copy()
            w[i] = hi
            z = w
    return z, f(z)


def finish(result: Result, network, space: Space, exact: Callable, *, budget: float | None = None,
           gradient: Callable | None = None, tolerance: float = 1e-3, max_roundings: int = 64,
           rounds: int = 8, same: float = SAME, bundle: int = 4, progress: bool = False) -> Finish:
    """Round ``result`` (from ``minimize``) to the knobs' allowed values and refine it on ``exact``
    (a function of (network, logits)) within the budget; then, when more budget buys nothing, shrink it
    to the cheapest point found with the same step time.

    ``gradient``: the exact step time as a differentiable function of (network, logits); with it,
    SLSQP polishes the continuous knobs before the refinement. ``progress``: bars on stderr.
    """
    logits = result.logits
    counted = _Counted(lambda z: exact(space.network(network, jnp.asarray(z)), logits))
    value_and_grad = None
    if gradient is not None:
        import jax

        compiled = jax.jit(jax.value_and_grad(lambda z: gradient(space.network(network, z), logits)))
        value_and_grad = lambda z: compiled(jnp.asarray(z))  # noqa: E731
    polished = 0
    a, b = space.cost_line()
    values = {g: p["value"] for g, p in result.parameters.items()}
    searched = space.positions(values)
    discrete = [i for i, k in enumerate(space.knobs) if k.allowed]
    choices = [sorted({float(space.positions({**values, space.knobs[i].group: v})[i]) for v in space.knobs[i].allowed})
               for i in discrete]  # each discrete knob's allowed values, as positions
    continuous = [i for i in range(len(space.knobs)) if i not in discrete]
    box = _box(space, budget, discrete)
    candidates, roundings = _roundings(counted, searched, discrete, choices, continuous, _box(space, budget, ()),
                                       max_roundings, progress)
    if not candidates:
        raise Infeasible(f"rounding: no combination of allowed values fits the budget {budget:.6g}")
    # re-optimise the continuous knobs of every rounding when that is cheap, else of the best few
    keep = len(candidates) if len(candidates) * max(len(continuous), 1) <= 256 else min(4, len(candidates))
    best = None
    with _bar(progress and keep > 1, keep, "refine each rounding", unit="rounding") as bar:
        for _, z in candidates[:keep]:
            if continuous and value_and_grad is not None:
                z, _, calls = polish(value_and_grad, z, space, budget=budget, fixed=discrete, progress=progress)
                polished += calls
            z, value, check, derivatives = _refine(counted, z, box, tolerance, rounds, 8, DIFFERENCE, progress, bundle)
            if best is None or value < best[1] * (1 - 1e-12):
                best = (z, value, check, derivatives)
            bar.update(1)
    z, value, check, derivatives = best
    saved = 0.0
    buys_nothing = (check.passed and check.buys_nothing
                    and _discrete_buys_nothing(counted, z, value, discrete, choices, tolerance))
    if buys_nothing:
        before = float(b @ z)
        z, value = _least_cost(counted, z, value, box, discrete, choices, derivatives, tolerance, same, 6, progress)
        saved = before - float(b @ z)
        if saved > 0:
            check, _, _ = _check(counted, z, box, value, tolerance, DIFFERENCE, progress, bundle=bundle)
    values = space.values(z)
    params = {g: {"value": float(v), "unit": space.info.groups[g].unit} for g, v in values.items()}
    refined = dataclasses.replace(result, optimized=value, parameters=params, cost=float(a + b @ z),
                                  network=space.network(network, jnp.asarray(z)))
    return Finish(refined, check, roundings, counted.count, polished, budget, buys_nothing, saved)


def _discrete_buys_nothing(f: _Counted, z, value, discrete, choices, tolerance: float) -> bool:
    """No discrete knob's next allowed value up improves beyond ``tolerance`` per unit move."""
    for i, c in zip(discrete, choices):
        above = [v for v in c if v > z[i] + 1e-12]
        if above:
            w = z.copy()
            w[i] = above[0]
            if (value - f(w)) / (abs(value) * (above[0] - z[i])) > tolerance:
                return False
    return True


def pareto(result: Result, network, space: Space, exact: Callable, budgets: Sequence[float], *,
           gradient: Callable | None = None, tolerance: float = 1e-3, progress: bool = False) -> list[Finish]:
    """The cost / step-time front: ``finish`` at each budget (ascending), each warm-started from the
    previous point's optimum (projected onto the budget when it is lower); budgets no rounding of
    the allowed values fits are left out."""
    points, start = [], result
    for budget in sorted(budgets):
        try:
            point = finish(start, network, space, exact, budget=budget, gradient=gradient, tolerance=tolerance,
                           progress=progress)
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
