"""Fabric builders: descriptions of scale-up, scale-out and scale-across networks, built into networkx
graphs and compiled to arrays; failures.

Describe (``ScaleUp``, ``Clos``, ``Site``, ``LongHaul``, ``Fleet``), build a networkx graph, compile it
to a ``Network`` (capacity and latency per directed link) and its ``FabricInfo`` (names, tags, groups):

>>> from flowmodel import fabric as fb
>>> fleet = fb.Fleet(sites=(fb.Site("a", scale_out=fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=4)),
...                         fb.Site("b", scale_out=fb.Clos(tiers=2, gpus_per_leaf=8, leaves_per_pod=4))),
...                  long_haul=(fb.LongHaul("a", "b", capacity=1.6e12 / 8, length_km=100.0),))
>>> network, info = fb.compile_fabric(fb.build(fleet))
>>> info.num_gpus, info.num_links        # every cable is two directed links
(64, 578)
>>> list(info.groups)                    # link groups: what the optimizer and failures act on
['a/scale_up', 'a/nic', 'a/leaf_up', 'a/border_up', 'b/scale_up', 'b/nic', 'b/leaf_up', 'b/border_up', 'long_haul/a-b']
"""

from ._astra import ASTRA_GB as ASTRA_GB
from ._astra import from_astra as from_astra
from ._astra import read_astra as read_astra
from ._build import FabricTable as FabricTable
from ._build import build as build
from ._build import build_table as build_table
from ._failures import fail as fail
from ._network import FabricInfo as FabricInfo
from ._network import LinkGroup as LinkGroup
from ._network import Network as Network
from ._network import apply_groups as apply_groups
from ._network import compile_fabric as compile_fabric
from ._network import compile_table as compile_table
from ._network import group_values as group_values
from ._network import reverse_links as reverse_links
from ._network import to_networkx as to_networkx
from ._spec import FIBRE_DELAY_S_PER_KM as FIBRE_DELAY_S_PER_KM
from ._spec import Clos as Clos
from ._spec import Fleet as Fleet
from ._spec import LongHaul as LongHaul
from ._spec import ScaleUp as ScaleUp
from ._spec import Site as Site
from ._spec import full_mesh as full_mesh
from ._spec import meta_24k as meta_24k
from ._spec import ring as ring
from ._spec import ring_of_regions as ring_of_regions
from ._tags import Kind as Kind
from ._tags import Tier as Tier
