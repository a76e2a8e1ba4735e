"""Optimisation over the network: traffic splits for minimum link utilisation, and gradient search of
oversubscription, scale-across capacity and routing weights for minimum step time under a budget."""

from ._mlu import lp_min_mlu as lp_min_mlu
from ._mlu import split_for_min_mlu as split_for_min_mlu
