"""Time to train under failures: checkpoints, restarts, lost work and degraded periods.

The model is the renewal-reward one of Young (1974) and Daly (2006), extended to several kinds of
interruption. Work is done in segments of ``interval`` seconds, each followed by a checkpoint of
``checkpoint`` seconds during which the job pauses. Interruptions arrive as a Poisson process of rate
``rate`` (the sum over every component the job cannot run without); each loses the work since the last
checkpoint and costs a restart (detection, rescheduling, reading the checkpoint back, and for a
component the job must wait for, its repair) during which further interruptions may strike. The
expected wall-clock time of one segment is exactly

    E[segment] = (exp(rate * (interval + checkpoint)) - 1) / (rate * q),   q = sum_k pi_k exp(-rate * R_k)

where interruption kind k has share pi_k of the rate and restart time R_k (one kind: Daly's
``exp(rate * R)`` factor). The work is ``work / interval`` segments (the last one counted pro rata).
Elements whose loss the fabric routes around do not interrupt the job: they slow it for their repair
time, so the job's mean step time is the healthy one plus, per kind, the expected number of elements
down at once (``count * rate * repair / (1 + rate * repair)``, the alternating-renewal unavailability)
times the extra step time one of them costs (first order: degradations are rare and independent).

Every function is a pure ``jax.numpy`` function of its inputs: differentiable in the step time (and so
in the network), the checkpoint and restart times, and the interval. ``simulate`` is the seeded
Monte Carlo of the same process (NumPy), with Weibull inter-arrival times as an option.

>>> import jax; jax.config.update("jax_enable_x64", True)
>>> from flowmodel import steptime as st
>>> rate = 419 / (54 * 86400)                      # Llama 3: 419 unexpected interruptions in 54 days
>>> tau = float(st.optimal_interval(60.0, rate))   # a one-minute checkpoint
>>> round(tau / 60, 1), round(float(st.young_daly(60.0, rate)) / 60, 1)   # minutes: exact, Young/Daly
(18.6, 19.3)
>>> wall = st.expected_wall_time(50 * 86400.0, tau, 60.0, rate, restart=600.0)
>>> round(50 * 86400 / float(wall), 3)             # effective training time with 10-minute restarts
0.853
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from .._checks import check_number
from ..fabric._tags import Kind, Tier

DAY = 86400.0


@dataclasses.dataclass(frozen=True)
class Component:
    """Failures of one kind of component: ``rate_per_day`` per component, ``repair`` seconds to repair
    or replace it (what a degraded period lasts; an interrupted job restarts on spares without it)."""

    rate_per_day: float = 0.0
    repair: float = 0.0

    def check(self, where: str) -> None:
        check_number(f"{where}.rate_per_day", self.rate_per_day)
        check_number(f"{where}.repair", self.repair)


SWITCHES = (Kind.SCALE_UP_SWITCH, Kind.LEAF, Kind.SPINE, Kind.AGGREGATION, Kind.BORDER)  # of a built fabric
CHECKPOINT_MODES = ("pause", "overlap")
CABLES = Tier.ALL


@dataclasses.dataclass(frozen=True)
class Reliability:
    """The reliability section of a scenario (SI units: seconds, bytes, bytes/s).

    Attributes:
      gpu, host, nic, site_power: failures of each GPU (with its HBM), host (``gpus_per_host`` GPUs),
        NIC (one per GPU) and site (a whole site's power; the job waits for its repair to restart).
      switches: switch kind (``SWITCHES``) -> :class:`Component`; cables: link tier (``CABLES``) ->
        :class:`Component`, per cable (both directions).
      bytes_per_parameter: checkpoint bytes per model parameter (bf16 weights 2 + fp32 master weights
        4 + Adam moments 8 = 14); checkpoint_size: bytes, overrides it.
      checkpoint_mode: ``"pause"`` (the job waits while the checkpoint is written) or ``"overlap"``
        (the job pauses ``snapshot`` seconds to copy its state to host memory, and the write shares
        the fabric with the running job).
      interval: seconds of work between checkpoints; None: the exact optimum.
      storage_bandwidth: bytes/s into (and out of) each site's storage; storage_capacity: bytes it
        holds (None: unbounded).
      detection, rescheduling: seconds from an interruption to its detection, and to the job
        rescheduled on spares (the checkpoint's read comes on top).
      weibull_shape: shape of the Monte Carlo's inter-arrival times (1: exponential, the analytic
        model's); runs, seed: the Monte Carlo's.
    """

    gpu: Component = Component()
    host: Component = Component()
    nic: Component = Component()
    site_power: Component = Component()
    switches: tuple[tuple[str, Component], ...] = ()
    cables: tuple[tuple[str, Component], ...] = ()
    gpus_per_host: int = 8
    bytes_per_parameter: float = 14.0
    checkpoint_size: float | None = None
    checkpoint_mode: str = "pause"
    snapshot: float = 0.0
    interval: float | None = None
    storage_bandwidth: float = 100e9
    storage_capacity: float | None = None
    detection: float = 0.0
    rescheduling: float = 0.0
    weibull_shape: float = 1.0
    runs: int = 1000
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "switches", tuple(dict(self.switches).items()))
        object.__setattr__(self, "cables", tuple(dict(self.cables).items()))
        for key in ("gpu", "host", "nic", "site_power"):
            getattr(self, key).check(f"reliability.{key}")
        for section, known, items in (("switches", SWITCHES, self.switches), ("cables", CABLES, self.cables)):
            for name, component in items:
                if name not in known:
                    raise ValueError(f"reliability.{section}.{name}: unknown; known: {', '.join(known)}")
                component.check(f"reliability.{section}.{name}")
        check_number("reliability.gpus_per_host", self.gpus_per_host, minimum=1, integer=True)
        check_number("reliability.checkpoint.bytes_per_parameter", self.bytes_per_parameter, strict=True)
        for key, value in (("checkpoint.size", self.checkpoint_size), ("checkpoint.interval", self.interval),
                           ("storage.bandwidth", self.storage_bandwidth),
                           ("storage.capacity", self.storage_capacity)):
            if value is not None:
                check_number(f"reliability.{key}", value, strict=True)
        if self.checkpoint_mode not in CHECKPOINT_MODES:
            raise ValueError(f"reliability.checkpoint.mode: must be one of {', '.join(CHECKPOINT_MODES)}, "
                             f"got {self.checkpoint_mode!r}")
        check_number("reliability.checkpoint.snapshot", self.snapshot)
        check_number("reliability.restart.detection", self.detection)
        check_number("reliability.restart.rescheduling", self.rescheduling)
        check_number("reliability.monte_carlo.weibull_shape", self.weibull_shape, strict=True)
        check_number("reliability.monte_carlo.runs", self.runs, minimum=2, integer=True)
        check_number("reliability.monte_carlo.seed", self.seed, integer=True)


def young_daly(checkpoint, rate):
    """Young/Daly's first-order optimal interval sqrt(2 C M), M = 1 / rate the mean time between
    interruptions."""
    return jnp.sqrt(2.0 * checkpoint / rate)


def optimal_interval(checkpoint, rate, iterations: int = 60):
    """The interval that minimises ``expected_wall_time`` exactly: x = rate * interval solves
    (1 - x) exp(x) = exp(-rate * checkpoint), i.e. x = 1 + W0(-exp(-1 - rate * checkpoint)).

    Newton's method from x = 1 (right of the root; the function is concave and decreasing on (0, 1),
    so the iterates fall monotonically onto it), a fixed number of steps: differentiable."""
    a = rate * checkpoint
    target = jnp.exp(-a)
    x = jnp.ones_like(a)
    for _ in range(iterations):
        x = x + ((1.0 - x) * jnp.exp(x) - target) / (x * jnp.exp(x))
    return x / rate


def expected_wall_time(work, interval, checkpoint, rate, *, restart=0.0, shares=None):
    """Expected wall-clock seconds to finish ``work`` seconds of computation (module docstring).

    Args:
      work: seconds of computation at the job's mean step time.
      interval, checkpoint: seconds of work between checkpoints, and the pause of one checkpoint.
      rate: interruptions per second (> 0).
      restart: seconds from an interruption to the job running again, one per kind (float[K]), with
        ``shares`` (float[K], summing to 1) of the rate; a scalar for one kind.
    """
    restart = jnp.atleast_1d(jnp.asarray(restart, jnp.result_type(float)))
    shares = jnp.ones_like(restart) / restart.shape[0] if shares is None else jnp.asarray(shares)
    q = jnp.sum(shares * jnp.exp(-rate * restart))
    segment = jnp.expm1(rate * (interval + checkpoint)) / (rate * q)
    return work / interval * segment


def mean_step_time(healthy, degraded, counts, rates_per_day, repairs):
    """The step time averaged over degraded periods: ``healthy`` plus, per kind (float[K]), the
    expected number of its ``counts`` elements down at once times the extra time each costs."""
    lam = jnp.asarray(rates_per_day) / DAY
    down = jnp.asarray(counts) * lam * jnp.asarray(repairs) / (1.0 + lam * jnp.asarray(repairs))
    return healthy + jnp.sum(down * (jnp.asarray(degraded) - healthy))


def simulate(work: float, interval: float, checkpoint: float, rate: float, *, restart=0.0, shares=None,
             runs: int = 1000, seed: int = 0, weibull_shape: float = 1.0) -> np.ndarray:
    """float64[runs] wall-clock seconds of seeded Monte Carlo runs of the process ``expected_wall_time``
    describes: segments of ``interval`` work (the last one shorter) plus ``checkpoint``; interruptions
    with inter-arrival times of mean 1 / rate (exponential, or Weibull of ``weibull_shape``, renewed
    at each interruption); each costs a restart of its kind, during which another may strike."""
    rng = np.random.default_rng(seed)
    restart = np.atleast_1d(np.asarray(restart, np.float64))
    shares = np.full(restart.shape, 1.0 / restart.size) if shares is None else np.asarray(shares, np.float64)
    k = float(weibull_shape)
    scale = 1.0 / (rate * math.gamma(1.0 + 1.0 / k))  # Weibull scale of mean 1 / rate

    def next_failure(age):
        """Time until the next interruption of runs whose process has run ``age`` since its last one."""
        u = rng.random(age.shape)
        return scale * ((age / scale) ** k - np.log1p(-u)) ** (1.0 / k) - age

    clock = np.zeros(runs)
    done = np.zeros(runs)  # work checkpointed
    age = np.zeros(runs)
    recovering = np.zeros(runs)  # restart time still to serve (0: running)
    left = np.full(runs, True)
    while left.any():
        idx = np.flatnonzero(left)
        gap = next_failure(age[idx])
        restarting = recovering[idx] > 0
        chunk = np.minimum(interval, work - done[idx])
        need = np.where(restarting, recovering[idx], chunk + checkpoint)
        ok = gap >= need
        step = np.where(ok, need, gap)
        clock[idx] += step
        age[idx] = np.where(ok, age[idx] + step, 0.0)
        done[idx] += np.where(ok & ~restarting, chunk, 0.0)
        hit = ~ok
        kinds = rng.choice(restart.size, size=int(hit.sum()), p=shares)
        recovering[idx] = np.where(ok, 0.0, recovering[idx])
        recovering[idx[hit]] = restart[kinds]
        left[idx] = done[idx] < work * (1 - 1e-12)
    return clock
