"""Routing: candidate paths on a compiled fabric and the policies that split flows over them."""

from ._paths import Candidates as Candidates
from ._paths import Router as Router
from ._policies import POLICIES as POLICIES
from ._policies import SubFlows as SubFlows
from ._policies import ecmp as ecmp
from ._policies import qp_scaling as qp_scaling
from ._policies import route as route
from ._policies import spray as spray
from ._policies import wcmp as wcmp
