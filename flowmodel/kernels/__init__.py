"""The kernels: array-only JAX functions of routes and per-link / per-flow values (imports nothing above it
but ``flowmodel._checks`` and ``flowmodel._types``); the host engine runs compiled code behind a callback.

  maxmin.py       maxmin_rates, maxmin_structure (exact weighted max-min with caps; custom VJP)
  fluid.py        completion_times, completion_events (fluid event loop; custom VJP), interval_loads
  smooth.py       smooth_maxmin_rates (alpha-fair relaxation)
  congestion.py   latency, window, queueing and bound models
  _transport.py   Transport profiles (goodput, start delay, RTT sharing, window) fitted against ns-3; HopPairs
  _incidence.py   Incidence / incidence (the flows of each link, prepared once), padding, per-link sums, checks
  _engine.py      Engine: which kernels a solve runs on (auto / host / xla), a static, hashable choice
  _host.py        the compiled CPU engine (Numba): max-min and the fluid event loop, via pure_callback
  _waterfill.py   MaxMinStructure, the dense solve, the sparse passes, resumable fill state and snapshots
  _adjoint.py     the max-min VJP (replay of the passes)
"""

from ._engine import Engine as Engine
from ._incidence import Incidence as Incidence
from ._incidence import incidence as incidence
from ._transport import PROFILES as PROFILES
from ._transport import HopPairs as HopPairs
from ._transport import Transport as Transport
from ._transport import pairs_of as pairs_of
from ._transport import stacked_hop_pairs as stacked_hop_pairs
from ._transport import transport_inputs as transport_inputs
from ._transport import transport_profile as transport_profile
from ._waterfill import MaxMinStructure as MaxMinStructure
from .congestion import link_bytes as link_bytes
from .congestion import queueing_delay as queueing_delay
from .congestion import route_latency as route_latency
from .congestion import rtt_weights as rtt_weights
from .congestion import scheduled_bound as scheduled_bound
from .congestion import soft_max as soft_max
from .congestion import window_limited_rate as window_limited_rate
from .fluid import Events as Events
from .fluid import IntervalLoads as IntervalLoads
from .fluid import completion_events as completion_events
from .fluid import completion_times as completion_times
from .fluid import event_count as event_count
from .fluid import interval_loads as interval_loads
from .maxmin import maxmin_rates as maxmin_rates
from .maxmin import maxmin_structure as maxmin_structure
from .smooth import smooth_maxmin_rates as smooth_maxmin_rates
