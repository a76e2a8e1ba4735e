"""Agentic inference: long-context, multi-turn requests whose KV cache lives in a storage tier.

A request runs ``turns`` model calls on one instance, with a tool call between each two of them:

1. **KV fetch**: ``prefix_hit_rate`` of the request's starting context (``context_tokens``) is found
   in the KV-cache store (prefix caching) and read from its site's storage, down the scale-out
   fabric and over the GPU's host link (the cache is staged in host memory); the rest is prefilled.
2. Each call prefills what is new (the misses, then the previous call's output and the tool's
   result, ``tool_tokens``) and decodes ``output_tokens`` with ``batch`` requests decoded together.
3. Each tool call runs for ``tool_seconds`` on the CPU. With ``offload`` the request's KV cache
   goes to host memory over the host link when the call starts and comes back when it ends, each
   transfer counted in the latency beside the tool's time (a conservative schedule: no overlap).
4. With ``write_back`` the final KV cache goes to the store after the answer (off the request's
   latency, but on the fabric: its bytes load it).

Every TP rank of the instance moves its ``1 / tp`` shard. The service spreads ``requests_per_s``
evenly over its instances; the latency is one request's while every instance serves one.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._checks import check_number
from ._serving import Serving
from ._workload import Model


@dataclasses.dataclass(frozen=True)
class Agentic:
    """One agentic inference service (the module docstring says what a request is).

    Attributes:
      model: the served model.  instances: int[instances, tp] GPU ranks of each instance.
      requests_per_s: request rate of the whole service.
      context_tokens: the context a request starts with.  output_tokens: generated per call.
      turns: model calls per request (turns - 1 tool calls).  tool_tokens: each tool result's tokens.
      tool_seconds: each tool call's CPU time.  prefix_hit_rate: fraction of the starting context
        whose KV cache the store holds, in [0, 1].
      batch: requests decoded together on an instance.  offload: KV cache to host memory during
        tool calls.  write_back: the final KV cache to the store.
      storage_bandwidth: each site's KV store, bytes/s in and out.  host_bandwidth: each GPU's host
        link, bytes/s each way.  serving: the instances' compute.
    """

    name: str
    model: Model
    instances: tuple[tuple[int, ...], ...]
    requests_per_s: float
    context_tokens: int
    output_tokens: int
    turns: int = 1
    tool_tokens: int = 0
    tool_seconds: float = 0.0
    prefix_hit_rate: float = 0.0
    batch: int = 8
    offload: bool = True
    write_back: bool = True
    storage_bandwidth: float = 100e9
    host_bandwidth: float = 64e9
    serving: Serving = Serving()

    def __post_init__(self):
        where = f"agentic[{self.name}]"
        object.__setattr__(self, "instances", tuple(tuple(int(r) for r in i) for i in self.instances))
        inst = self.instances
        if not inst or len({len(i) for i in inst}) != 1 or not inst[0]:
            raise ValueError(f"{where}.instances: needs int[instances, tp] GPU ranks, every instance of the same tp")
        flat = [r for i in inst for r in i]
        if len(set(flat)) != len(flat):
            raise ValueError(f"{where}.instances: a GPU rank is in two instances")
        check_number(f"{where}.requests_per_s", self.requests_per_s, strict=True)
        for f in ("context_tokens", "output_tokens", "turns", "batch"):
            check_number(f"{where}.{f}", getattr(self, f), minimum=1, integer=True)
        check_number(f"{where}.tool_tokens", self.tool_tokens, integer=True)
        check_number(f"{where}.tool_seconds", self.tool_seconds)
        check_number(f"{where}.storage_bandwidth", self.storage_bandwidth, strict=True)
        check_number(f"{where}.host_bandwidth", self.host_bandwidth, strict=True)
        if not (0.0 <= self.prefix_hit_rate <= 1.0):
            raise ValueError(f"{where}.prefix_hit_rate: must be in [0, 1], got {self.prefix_hit_rate!r}")

    @property
    def tp(self) -> int:
        return len(self.instances[0])

    def job_ranks(self, num_gpus: int) -> np.ndarray:
        """Every GPU of the service, checked against the fabric."""
        ranks = np.asarray(self.instances, np.int64).reshape(-1)
        bad = np.flatnonzero((ranks < 0) | (ranks >= num_gpus))
        if bad.size:
            raise ValueError(f"agentic[{self.name}].instances: GPU rank {ranks[bad[0]]} is not one of the fabric's "
                             f"{num_gpus} GPUs")
        return ranks

    def contexts(self) -> np.ndarray:
        """float64[turns] the context (tokens) at the start of each call: the first call's is
        ``context_tokens``; each later one adds the previous output and a tool result."""
        return self.context_tokens + np.arange(self.turns) * (self.output_tokens + self.tool_tokens)

    def bytes(self) -> dict[str, float]:
        """KV bytes one request moves, by kind (the whole instance: divide by tp per rank):
        ``kv_fetch`` from the store, ``kv_offload`` and ``kv_reload`` over the host links (summed over
        the tool calls), ``kv_write_back`` to the store."""
        kv = float(self.model.kv_bytes_per_token())
        # the cache at each tool call: the previous call's context and output, not yet the tool's result
        held = self.contexts()[1:] - self.tool_tokens if self.offload else np.zeros(0)
        final = self.contexts()[-1] + self.output_tokens
        return {"kv_fetch": self.prefix_hit_rate * self.context_tokens * kv,
                "kv_offload": float(held.sum()) * kv, "kv_reload": float(held.sum()) * kv,
                "kv_write_back": float(final) * kv if self.write_back else 0.0}

    def compute_times(self) -> dict[str, float]:
        """Seconds of one request on its instance: ``prefill`` (the misses, then every later call's
        tool result), ``decode`` and ``tool`` (the CPU time of the tool calls)."""
        s, m, tp, ctx = self.serving, self.model, self.tp, self.contexts()
        hits = self.prefix_hit_rate * self.context_tokens
        prefill = s.prefill(m, self.context_tokens - hits, hits, tp)
        for t in range(1, self.turns):  # the previous output is cached already: only the tool result is new
            prefill += s.prefill(m, self.tool_tokens, ctx[t] - self.tool_tokens, tp)
        decode = sum(s.decode(m, self.output_tokens, self.batch, c, tp) for c in ctx)
        return {"prefill": prefill, "decode": decode, "tool": (self.turns - 1) * self.tool_seconds}
