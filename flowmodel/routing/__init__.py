"""Routing: candidate paths on a compiled fabric and the policies that split flows over them.

``Router(info).candidates`` lists each pair's shortest up-down paths; a policy turns them into
``SubFlows`` (``ecmp``: one hashed path; ``qp_scaling``: several hashed queue pairs; ``spray``: every
path; ``wcmp``: learnable weights). Between the two racks of a 16-spine leaf-spine fabric:

>>> import numpy as np
>>> from flowmodel import fabric as fb, routing as rt
>>> fleet = fb.Fleet(sites=(fb.Site("a", scale_out=fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=4)),))
>>> network, info = fb.compile_fabric(fb.build(fleet))
>>> router = rt.Router(info)
>>> int(router.candidates(np.array([0]), np.array([31])).count[0])
16
>>> sub = rt.route(router, [0], [31], "spray")
>>> sub.routes.shape, float(sub.fraction.sum())
((16, 4), 1.0)
>>> rt.route(router, [0], [31], "ecmp").routes.shape
(1, 4)
"""

from ._astra import AstraRouter as AstraRouter
from ._paths import Candidates as Candidates
from ._paths import Router as Router
from ._paths import Unreachable as Unreachable
from ._policies import HASHED as HASHED
from ._policies import POLICIES as POLICIES
from ._policies import SubFlows as SubFlows
from ._policies import ecmp as ecmp
from ._policies import qp_scaling as qp_scaling
from ._policies import route as route
from ._policies import split as split
from ._policies import spray as spray
from ._policies import wcmp as wcmp
