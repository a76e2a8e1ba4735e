"""flowmodel: a differentiable flow-level model of AI fleet networks, written in JAX.

Public kernels (units are SI: bytes, seconds, bytes/s):
  maxmin_rates          exact weighted max-min fair rates with per-flow caps
  maxmin_structure      the same, plus the bottleneck structure the solve found
  smooth_maxmin_rates   alpha-fair relaxation for gradient search
  completion_times      fluid finish times: flows start, share max-min rates, re-share on every event
  window_limited_rate, queueing_delay, scheduled_bound, soft_max, route_latency, rtt_weights
                        congestion and latency models (_congestion.py)
Submodules, in the order data flows: fabric (scale-up / Clos / scale-across builders, compilation,
link groups, failures, ASTRA-sim import), routing (candidate paths, ECMP / spray / QP scaling / WCMP),
traffic (collectives, models, parallelism), steptime (phase times, pipeline schedules, training steps,
several workloads), optimize (min-MLU splits, budgeted search); scenario (a typed scenario and its
prepared model: the one assembly every command uses), config (YAML -> scenario), sweep (vmap,
devices, processes), resilience (failure scenarios), cli (the ``flowmodel`` command);
reference (float64 oracles and certificates), peers.simgrid (the SimGrid cross-check).
"""

from . import config as config
from . import fabric as fabric
from . import optimize as optimize
from . import reference as reference
from . import resilience as resilience
from . import routing as routing
from . import scenario as scenario
from . import steptime as steptime
from . import sweep as sweep
from . import traffic as traffic
from ._congestion import link_bytes as link_bytes
from ._congestion import queueing_delay as queueing_delay
from ._congestion import route_latency as route_latency
from ._congestion import rtt_weights as rtt_weights
from ._congestion import scheduled_bound as scheduled_bound
from ._congestion import soft_max as soft_max
from ._congestion import window_limited_rate as window_limited_rate
from ._fluid import Events as Events
from ._fluid import completion_events as completion_events
from ._fluid import completion_times as completion_times
from ._maxmin import MaxMinStructure as MaxMinStructure
from ._maxmin import maxmin_rates as maxmin_rates
from ._maxmin import maxmin_structure as maxmin_structure
from ._smooth import smooth_maxmin_rates as smooth_maxmin_rates

__version__ = "0.1.0"
