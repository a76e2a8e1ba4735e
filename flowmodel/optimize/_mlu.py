"""Traffic splitting for minimum maximum link utilisation (MLU): gradient search and its LP check.

``split_for_min_mlu`` parametrises each demand's split over its paths by a softmax of logits and
minimises a soft maximum of link utilisations with Adam, annealing the soft max's temperature
geometrically towards the exact maximum; it returns the best split seen (by exact MLU). It is one jitted
``lax.scan``, so it vmaps over demand matrices (and capacities). ``lp_min_mlu`` solves the same problem
exactly as a linear program with SciPy's HiGHS: the reference the tests hold the search to.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from .. import _checks
from .._types import Array, Float, Int
from ..kernels import link_bytes


def _segment_softmax(logits, owner, num):
    top = jax.ops.segment_max(logits, owner, num_segments=num)
    e = jnp.exp(logits - jax.lax.stop_gradient(top)[owner])
    return e / jax.ops.segment_sum(e, owner, num_segments=num)[owner]


def _utilisation(split, path_routes, path_owner, demand, capacity):
    load = link_bytes(path_routes, split * demand[path_owner], capacity.shape[0])
    return load / capacity


@eqx.filter_jit
def _search(path_routes, path_owner, demand, capacity, num_demands: int, steps: int, learning_rate: float,
            start_temperature: float, end_temperature: float):
    def mlu_of(logits):
        split = _segment_softmax(logits, path_owner, num_demands)
        return jnp.max(_utilisation(split, path_routes, path_owner, demand, capacity)), split

    base = jax.lax.stop_gradient(mlu_of(jnp.zeros(path_owner.shape[0], demand.dtype))[0])
    decay = (end_temperature / start_temperature) ** (1.0 / max(steps - 1, 1))
    opt = optax.adam(learning_rate)

    def loss(logits, temperature):
        split = _segment_softmax(logits, path_owner, num_demands)
        u = _utilisation(split, path_routes, path_owner, demand, capacity) / base
        return temperature * jax.nn.logsumexp(u / temperature)

    def step(carry, i):
        logits, state, best, best_logits = carry
        temperature = start_temperature * decay**i
        grad = jax.grad(loss)(logits, temperature)
        updates, state = opt.update(grad, state, logits)
        logits = optax.apply_updates(logits, updates)
        mlu, _ = mlu_of(logits)
        better = mlu < best
        best_logits = jnp.where(better, logits, best_logits)
        return (logits, state, jnp.minimum(mlu, best), best_logits), mlu

    logits = jnp.zeros(path_owner.shape[0], demand.dtype)
    init = (logits, opt.init(logits), base, logits)
    (_, _, best, best_logits), history = jax.lax.scan(step, init, jnp.arange(steps, dtype=demand.dtype))
    split = _segment_softmax(best_logits, path_owner, num_demands)
    return split, best, history


def split_for_min_mlu(
    path_routes: Int[Array, "P H"],
    path_owner: Int[Array, "P"],
    demand: Float[Array, "D"],
    capacity: Float[Array, "L"],
    *,
    steps: int = 1000,
    learning_rate: float = 0.05,
    start_temperature: float = 0.05,
    end_temperature: float = 2e-4,
    check: bool = True,
) -> tuple[Float[Array, "P"], Float[Array, ""]]:
    """Split each demand over its paths to minimise the maximum link utilisation.

    Args:
      path_routes: int[P, H] link indices of every candidate path, -1 pads.
      path_owner: int[P] the demand each path serves; every demand needs at least one path.
      demand: float[D] bytes/s >= 0.  capacity: float[L] bytes/s > 0.
      steps: Adam steps; temperatures are relative to the MLU of the even split and decay
        geometrically from ``start_temperature`` to ``end_temperature`` over the steps.

    Returns:
      (split float[P] >= 0 summing to 1 per demand, mlu = max over links of load / capacity) for the
      best split the search visited. Jittable and vmappable over demand and capacity.

    Example:
      >>> import flowmodel as fm, numpy as np
      >>> routes = np.array([[0, -1], [1, -1]]); owner = np.array([0, 0])
      >>> split, mlu = fm.optimize.split_for_min_mlu(routes, owner, np.array([3.0]), np.array([1.0, 2.0]))
      >>> round(float(mlu), 3)  # 1 unit on link 0, 2 on link 1
      1.0
    """
    num_links = np.shape(capacity)[0]
    _checks.check_routes(path_routes, num_links)
    P = np.shape(path_routes)[0]
    _checks.check_shape("path_owner", path_owner, (P,))
    if not (isinstance(steps, int) and steps >= 1):
        raise ValueError(f"steps: must be an integer >= 1, got {steps!r}")
    D = np.shape(demand)[0] if np.ndim(demand) == 1 else None
    if D is None:
        raise ValueError(f"demand must be 1-D [D], got shape {np.shape(demand)}")
    if check and not _checks.is_traced(path_owner):
        owner = np.asarray(path_owner)
        if owner.size and (owner.min() < 0 or owner.max() >= D):
            bad = int(np.flatnonzero((owner < 0) | (owner >= D))[0])
            raise ValueError(f"path_owner[{bad}] = {owner[bad]} is not a demand (0..{D - 1})")
        served = np.bincount(owner, minlength=D)
        if (served == 0).any():
            d = int(np.flatnonzero(served == 0)[0])
            raise ValueError(f"demand[{d}] has no path in path_owner")
    if check:
        _checks.check_values("demand", demand, nonnegative=True, allow_inf=False)
        _checks.check_values("capacity", capacity, positive=True, allow_inf=False)
    capacity = jnp.asarray(capacity)
    if not jnp.issubdtype(capacity.dtype, jnp.floating):
        capacity = capacity.astype(jnp.result_type(float))
    demand = jnp.asarray(demand, capacity.dtype)
    split, mlu, _ = _search(jnp.asarray(path_routes, jnp.int32), jnp.asarray(path_owner, jnp.int32), demand,
                            capacity, D, steps, learning_rate, start_temperature, end_temperature)
    return split, mlu


def lp_min_mlu(path_routes, path_owner, demand, capacity) -> tuple[np.ndarray, float]:
    """The exact minimum MLU and a split achieving it, from a linear program (SciPy HiGHS).

    Variables: split per path and the MLU t; minimise t subject to each demand's split summing to 1
    and every link's load <= t x capacity.
    """
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix, csr_matrix, hstack

    routes = np.asarray(path_routes)
    owner = np.asarray(path_owner)
    demand = np.asarray(demand, np.float64)
    capacity = np.asarray(capacity, np.float64)
    P, L, D = routes.shape[0], capacity.shape[0], demand.shape[0]
    rows, cols = np.nonzero(routes >= 0)
    links = routes[rows, cols]
    load = coo_matrix((demand[owner[rows]], (links, rows)), shape=(L, P)).tocsr()  # bytes/s on l per unit split
    a_ub = hstack([load, csr_matrix(-capacity[:, None])]).tocsr()
    a_eq = hstack([coo_matrix((np.ones(P), (owner, np.arange(P))), shape=(D, P)), csr_matrix((D, 1))]).tocsr()
    c = np.zeros(P + 1)
    c[-1] = 1.0
    res = linprog(c, A_ub=a_ub, b_ub=np.zeros(L), A_eq=a_eq, b_eq=np.ones(D),
                  bounds=[(0, None)] * P + [(0, None)], method="highs")
    if res.status != 0:
        raise RuntimeError(f"HiGHS did not solve the MLU program: {res.message}")
    return res.x[:P], float(res.x[-1])
