"""Traffic: collectives as phases of flows, and the workloads (models, parallelism, placement) that
produce them.

A ring all-reduce of 1 GiB over one group of 8 ranks is one phase of 8 flows and 14 steps
(reduce-scatter then all-gather); each flow carries 1/8 of the buffer per step:

>>> import numpy as np
>>> from flowmodel import traffic as tr
>>> coll = tr.all_reduce(np.arange(8)[None, :], 2**30)
>>> [(ph.num_flows, ph.steps, float(ph.bytes[0]) / 2**27) for ph in coll.phases]
[(8, 14, 14.0)]
>>> tr.bus_factor("all_reduce", 8)      # nccl-tests: busbw = algbw x 2(n-1)/n
1.75

A training job checks itself against its GPUs:

>>> job = tr.Training(tr.llama3_405b(), tr.Parallelism(tp=8, pp=16, dp=128), global_batch=2048)
>>> job.job_ranks(8_192)
Traceback (most recent call last):
...
ValueError: parallelism: tp x cp x pp x dp = 8 x 1 x 16 x 128 = 16384 GPUs, but the fabric has 8192
"""

from ._agentic import Agentic as Agentic
from ._chakra import RankTrace as RankTrace
from ._chakra import Trace as Trace
from ._chakra import TraceError as TraceError
from ._chakra import TraceWriter as TraceWriter
from ._chakra import read_trace as read_trace
from ._collectives import ALGORITHMS as ALGORITHMS
from ._collectives import KINDS as KINDS
from ._collectives import Collective as Collective
from ._collectives import Phase as Phase
from ._collectives import all_gather as all_gather
from ._collectives import all_reduce as all_reduce
from ._collectives import all_to_all as all_to_all
from ._collectives import broadcast as broadcast
from ._collectives import bus_factor as bus_factor
from ._collectives import channel_orders as channel_orders
from ._collectives import double_binary_tree as double_binary_tree
from ._collectives import per_dimension as per_dimension
from ._collectives import reduce_scatter as reduce_scatter
from ._collectives import send_recv as send_recv
from ._nccl import PROTOCOLS as PROTOCOLS
from ._nccl import ProtocolChoice as ProtocolChoice
from ._nccl import ProtocolModel as ProtocolModel
from ._nccl import nccl_protocol as nccl_protocol
from ._nccl import protocol_model as protocol_model
from ._recommendation import Recommendation as Recommendation
from ._rl import RL as RL
from ._serving import Serving as Serving
from ._workload import Background as Background
from ._workload import Inference as Inference
from ._workload import Model as Model
from ._workload import Parallelism as Parallelism
from ._workload import Training as Training
from ._workload import deepseek_v3 as deepseek_v3
from ._workload import kimi_k2 as kimi_k2
from ._workload import llama3_8b as llama3_8b
from ._workload import llama3_70b as llama3_70b
from ._workload import llama3_405b as llama3_405b
from ._workload import llama3_405b_training as llama3_405b_training
from ._workload import mixtral_8x22b as mixtral_8x22b
