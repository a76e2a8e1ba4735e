"""Step time: communication phases timed on a fabric, pipeline schedules, training steps, and several
workloads sharing one fabric.

A collective's phases are routed (``route_phase``) and timed by the exact fluid model
(``phase_time``). On one 8-GPU NVSwitch domain at 400 GB/s per GPU, a ring all-reduce reaches the
link rate as its bus bandwidth, as nccl-tests would report:

>>> import numpy as np
>>> from flowmodel import fabric as fb, routing as rt, steptime as st, traffic as tr
>>> fleet = fb.Fleet(sites=(fb.Site("a", scale_up=fb.ScaleUp(size=8, bandwidth=400e9, latency=0.0)),))
>>> network, info = fb.compile_fabric(fb.build(fleet))
>>> coll = tr.all_reduce(np.arange(8)[None, :], 2**30)
>>> phases = [st.route_phase(ph, rt.Router(info)) for ph in coll.phases]
>>> seconds = sum(float(st.phase_time(rp, network.capacity, network.latency)) for rp in phases)
>>> algbw, busbw = coll.bus_bandwidth(seconds)
>>> round(busbw / 1e9, 3)
400.0

``plan_training`` + ``step_time`` do the same for every collective of a training step (see the
README's example); ``evaluate_fleet`` for several workloads at once.
"""

from ._agentic import AgenticPlan as AgenticPlan
from ._agentic import plan_agentic as plan_agentic
from ._agentic import request_time as request_time
from ._comm import DOMAINS as DOMAINS
from ._comm import EXACT as EXACT
from ._comm import Congestion as Congestion
from ._comm import Options as Options
from ._comm import RoutedPhase as RoutedPhase
from ._comm import background_load as background_load
from ._comm import fluid_inputs as fluid_inputs
from ._comm import phase_finish as phase_finish
from ._comm import phase_time as phase_time
from ._comm import residual_capacity as residual_capacity
from ._comm import ring_channels as ring_channels
from ._comm import route_phase as route_phase
from ._fleet import KINDS as KINDS
from ._fleet import FleetResult as FleetResult
from ._fleet import average_load as average_load
from ._fleet import check_workloads as check_workloads
from ._fleet import constant_load as constant_load
from ._fleet import coupling_groups as coupling_groups
from ._fleet import evaluate_fleet as evaluate_fleet
from ._fleet import fixed_point as fixed_point
from ._fleet import plan_bytes as plan_bytes
from ._fleet import plan_calls as plan_calls
from ._fleet import plan_kind as plan_kind
from ._fleet import plan_phases as plan_phases
from ._fleet import plan_time as plan_time
from ._recommendation import RecommendationPlan as RecommendationPlan
from ._recommendation import iteration_time as iteration_time
from ._recommendation import plan_recommendation as plan_recommendation
from ._recommendation import recommendation_bytes as recommendation_bytes
from ._reliability import CABLES as CABLES
from ._reliability import SWITCHES as SWITCHES
from ._reliability import Component as Component
from ._reliability import Reliability as Reliability
from ._reliability import expected_wall_time as expected_wall_time
from ._reliability import mean_step_time as mean_step_time
from ._reliability import optimal_interval as optimal_interval
from ._reliability import simulate as simulate
from ._reliability import young_daly as young_daly
from ._rl import RLPlan as RLPlan
from ._rl import iteration_time as rl_iteration_time  # noqa: F401  (public, renamed beside recommendation's)
from ._rl import plan_rl as plan_rl
from ._schedule import Schedule as Schedule
from ._schedule import ScheduleTimes as ScheduleTimes
from ._schedule import evaluate_schedule as evaluate_schedule
from ._schedule import one_f_one_b as one_f_one_b
from ._trace import IMPLEMENTATIONS as IMPLEMENTATIONS
from ._trace import TRACE_NODE_KINDS as TRACE_NODE_KINDS
from ._trace import PreparedTrace as PreparedTrace
from ._trace import TraceResult as TraceResult
from ._trace import TraceSystem as TraceSystem
from ._trace import export_training as export_training
from ._trace import prepare_trace as prepare_trace
from ._trace import read_system as read_system
from ._trace import simulate_trace as simulate_trace
from ._trace import trace_class_times as trace_class_times
from ._trace import trace_makespan as trace_makespan
from ._training import StepResult as StepResult
from ._training import TrainingPlan as TrainingPlan
from ._training import calls_per_step as calls_per_step
from ._training import compute_times as compute_times
from ._training import dp_groups as dp_groups
from ._training import map_training_phases as map_training_phases
from ._training import plan_training as plan_training
from ._training import routed_phases as routed_phases
from ._training import step_bytes as step_bytes
from ._training import step_time as step_time
