"""flowmodel: a differentiable flow-level model of AI fleet networks, written in JAX.

Public kernels (``flowmodel.kernels``; units are SI: bytes, seconds, bytes/s):
  maxmin_rates          exact weighted max-min fair rates with per-flow caps
  maxmin_structure      the same, plus the bottleneck structure the solve found
  smooth_maxmin_rates   alpha-fair relaxation for gradient search
  completion_times      fluid finish times: flows start, share max-min rates, re-share on every event
  incidence, Incidence  the flows of each link, prepared once from routes and passed to the kernels
                        (also into your own jit/vmap) so that they keep the sparse solve
  Engine                which kernels a solve runs on: AUTO (default), HOST (compiled CPU), XLA (device)
  window_limited_rate, queueing_delay, scheduled_bound, soft_max, route_latency, rtt_weights, link_bytes
                        congestion and latency models (kernels/congestion.py)
  Transport, transport_profile   transport profiles for completion_times (fitted against ns-3)
Submodules, in the order data flows: hardware (accelerator presets: peak FLOP/s by dtype, HBM, scale-up
domain and NICs, with sources), fabric (scale-up / Clos / scale-across builders, compilation, link
groups, failures, ASTRA-sim import), routing (candidate paths, ECMP / spray / QP scaling / WCMP),
traffic (collectives, models, parallelism, Chakra execution traces), steptime (phase times, pipeline
schedules, training steps, several workloads, Chakra traces run on a fabric), optimize (min-MLU splits,
budgeted search); scenario (a typed scenario and its prepared model: the one assembly every command
uses), config (YAML -> scenario), sweep (vmap, devices, processes), resilience (failure scenarios),
reliability (time to train under failures, checkpoints and restarts), trace (Chakra traces on an ASTRA-
sim network or a scenario, and a scenario's jobs exported as traces), links (an evaluation's per-link
loads, hot links, utilisation by tier, flow-completion times), cli (the ``flowmodel`` command);
reference (float64 oracles and certificates), peers.simgrid (the SimGrid cross-check),
peers.ns3 (packet-level TCP).
"""

from . import config as config
from . import fabric as fabric
from . import hardware as hardware
from . import kernels as kernels
from . import links as links
from . import optimize as optimize
from . import reference as reference
from . import reliability as reliability
from . import resilience as resilience
from . import routing as routing
from . import scenario as scenario
from . import steptime as steptime
from . import sweep as sweep
from . import trace as trace
from . import traffic as traffic
from .kernels import Engine as Engine
from .kernels import Events as Events
from .kernels import Incidence as Incidence
from .kernels import MaxMinStructure as MaxMinStructure
from .kernels import Transport as Transport
from .kernels import completion_events as completion_events
from .kernels import completion_times as completion_times
from .kernels import incidence as incidence
from .kernels import link_bytes as link_bytes
from .kernels import maxmin_rates as maxmin_rates
from .kernels import maxmin_structure as maxmin_structure
from .kernels import queueing_delay as queueing_delay
from .kernels import route_latency as route_latency
from .kernels import rtt_weights as rtt_weights
from .kernels import scheduled_bound as scheduled_bound
from .kernels import smooth_maxmin_rates as smooth_maxmin_rates
from .kernels import soft_max as soft_max
from .kernels import transport_profile as transport_profile
from .kernels import window_limited_rate as window_limited_rate

__version__ = "0.1.0"
