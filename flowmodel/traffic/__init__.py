"""Traffic: collectives as phases of flows, and the workloads (models, parallelism, placement) that
produce them."""

from ._collectives import ALGORITHMS as ALGORITHMS
from ._collectives import KINDS as KINDS
from ._collectives import Collective as Collective
from ._collectives import Phase as Phase
from ._collectives import all_gather as all_gather
from ._collectives import all_reduce as all_reduce
from ._collectives import all_to_all as all_to_all
from ._collectives import broadcast as broadcast
from ._collectives import bus_factor as bus_factor
from ._collectives import double_binary_tree as double_binary_tree
from ._collectives import reduce_scatter as reduce_scatter
from ._collectives import send_recv as send_recv
from ._workload import Model as Model
from ._workload import Parallelism as Parallelism
from ._workload import Training as Training
from ._workload import llama3_405b as llama3_405b
from ._workload import llama3_405b_training as llama3_405b_training
