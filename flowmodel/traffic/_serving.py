"""The compute of a tensor-parallel inference instance (prefill and decode), as a roofline.

Prefill is compute-bound: 2 FLOP per active parameter per token, plus causal attention over the
context already cached (``4 x layers x heads x head_dim`` FLOP per token per token attended), at
``efficiency x peak_flops`` per GPU. A decode step is bound by the larger of the HBM traffic (the
instance's weights, with only the experts the batch routes to, plus the batch's KV cache) at
``hbm_bandwidth`` and its compute (2 FLOP per active parameter per sequence); every GPU of the
instance holds and reads ``1 / tp`` of both (docs/sources.md, "Serving roofline").
"""

from __future__ import annotations

import dataclasses

from .._checks import check_number
from ._workload import Model


@dataclasses.dataclass(frozen=True)
class Serving:
    """Per-GPU figures of an inference engine (defaults: H100 SXM, BF16).

    Attributes:
      peak_flops: dense FLOP/s per GPU.  efficiency: the fraction prefill and decode matmuls reach.
      hbm_bandwidth: bytes/s per GPU.
    """

    peak_flops: float = 989.4e12
    hbm_bandwidth: float = 3.35e12
    efficiency: float = 0.5

    def __post_init__(self):
        check_number("serving.peak_flops", self.peak_flops, strict=True)
        check_number("serving.hbm_bandwidth", self.hbm_bandwidth, strict=True)
        check_number("serving.efficiency", self.efficiency, strict=True)
        if self.efficiency > 1:
            raise ValueError(f"serving.efficiency: must be in (0, 1], got {self.efficiency!r}")

    def prefill(self, model: Model, tokens: float, context: float, tp: int) -> float:
        """Seconds to prefill ``tokens`` new tokens after ``context`` cached ones on ``tp`` GPUs."""
        attention = 4.0 * model.layers * model.heads * model.head * tokens * (context + tokens / 2)
        flops = 2.0 * model.active_params * tokens + attention
        return flops / (tp * self.peak_flops * self.efficiency)

    def weight_bytes(self, model: Model, batch: float) -> float:
        """Bytes of weights one decode step reads: everything but the routed experts, and of those the
        ones ``batch`` tokens are routed to (``experts x (1 - (1 - top_k / experts)^batch)`` per layer,
        the expected number touched by uniform routing)."""
        routed = model.moe_layers * model.layer_parts(True)[1]
        touched = 1.0 if not model.experts else 1.0 - (1.0 - model.top_k / model.experts) ** batch
        return (model.params - routed + routed * touched) * model.dtype_bytes

    def decode(self, model: Model, steps: float, batch: float, context: float, tp: int) -> float:
        """Seconds for ``steps`` decode steps of ``batch`` sequences whose context starts at
        ``context`` tokens (growing by one a step) on ``tp`` GPUs."""
        mean_context = context + steps / 2
        memory = (self.weight_bytes(model, batch) + batch * mean_context * model.kv_bytes_per_token()) / tp
        compute = 2.0 * model.active_params * batch / (tp * self.peak_flops * self.efficiency)
        return steps * max(memory / self.hbm_bandwidth, compute)
