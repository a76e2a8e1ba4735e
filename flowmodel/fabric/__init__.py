"""Fabric builders: topologies with directed, numbered links and their routes."""

from ._fattree import TIERS as TIERS
from ._fattree import FatTree as FatTree
from ._fattree import fat_tree as fat_tree
from ._fattree import random_pairs as random_pairs
