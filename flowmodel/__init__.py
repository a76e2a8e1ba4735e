"""flowmodel: a differentiable flow-level model of AI fleet networks, written in JAX."""

from . import fabric as fabric
from . import reference as reference
from ._maxmin import MaxMinStructure as MaxMinStructure
from ._maxmin import maxmin_rates as maxmin_rates
from ._maxmin import maxmin_structure as maxmin_structure

__version__ = "0.1.0"
