"""Optimisation over the network: traffic splits for minimum link utilisation, and gradient search of
oversubscription, scale-across capacity and routing weights for minimum step time under a budget."""

from ._mlu import lp_min_mlu as lp_min_mlu
from ._mlu import split_for_min_mlu as split_for_min_mlu
from ._refine import Check as Check
from ._refine import Finish as Finish
from ._refine import Infeasible as Infeasible
from ._refine import budget_range as budget_range
from ._refine import finish as finish
from ._refine import optimality_check as optimality_check
from ._refine import pareto as pareto
from ._refine import polish as polish
from ._refine import refine as refine
from ._search import GBPS as GBPS
from ._search import CostModel as CostModel
from ._search import Knob as Knob
from ._search import Position as Position
from ._search import Result as Result
from ._search import Space as Space
from ._search import baseline_value as baseline_value
from ._search import grid_search as grid_search
from ._search import minimize as minimize
from ._search import project_budget as project_budget
from ._search import random_search as random_search
