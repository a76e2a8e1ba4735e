"""Fabric builders: descriptions of scale-up, scale-out and scale-across networks, built into networkx
graphs and compiled to arrays; failures; and the closed-form k-ary fat-tree used by the benchmarks."""

from ._astra import AstraRouter as AstraRouter
from ._astra import from_astra as from_astra
from ._build import build as build
from ._failures import fail as fail
from ._fattree import TIERS as TIERS
from ._fattree import FatTree as FatTree
from ._fattree import fat_tree as fat_tree
from ._fattree import random_pairs as random_pairs
from ._network import FabricInfo as FabricInfo
from ._network import LinkGroup as LinkGroup
from ._network import Network as Network
from ._network import apply_groups as apply_groups
from ._network import compile_fabric as compile_fabric
from ._network import group_values as group_values
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
