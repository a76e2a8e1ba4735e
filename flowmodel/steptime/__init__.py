"""Step time: communication phases timed on a fabric, pipeline schedules, training steps, and several
workloads sharing one fabric."""

from ._comm import DOMAINS as DOMAINS
from ._comm import RoutedPhase as RoutedPhase
from ._comm import background_load as background_load
from ._comm import phase_finish as phase_finish
from ._comm import phase_time as phase_time
from ._comm import residual_capacity as residual_capacity
from ._comm import route_phase as route_phase
from ._fleet import Background as Background
from ._fleet import FleetResult as FleetResult
from ._fleet import Inference as Inference
from ._fleet import constant_load as constant_load
from ._fleet import evaluate_fleet as evaluate_fleet
from ._schedule import evaluate_schedule as evaluate_schedule
from ._schedule import one_f_one_b as one_f_one_b
from ._training import StepResult as StepResult
from ._training import TrainingPlan as TrainingPlan
from ._training import calls_per_step as calls_per_step
from ._training import plan_training as plan_training
from ._training import routed_phases as routed_phases
from ._training import step_bytes as step_bytes
from ._training import step_time as step_time
