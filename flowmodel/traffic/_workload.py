"""Workload descriptions: models, parallelism, placement onto GPU ranks, per-step traffic sizes.

Units are SI (bytes, seconds, FLOP). Every bad value raises a ``ValueError`` that names the field.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import _units
from .._checks import check_number
from ._collectives import Phase

DIMS = ("tp", "cp", "pp", "dp")  # rank order, fastest-varying first: TP in a domain, PP across racks, DP widest
# The pipeline schedule is a DAG of 2 x m x v x pp ops, held as int arrays and built op by op in Python when
# the job is planned (about 3 s and a few hundred MB per million ops here). 65,536 micro-batches per pipeline
# is far beyond any real step (Llama 3 405B: 16 to 64 at DP 8 to 32), and 2**22 ops (about 17 s and 1.7 GB to build)
# keeps deep interleaved pipelines in reach (pp 16 x v 4 up to 32,768 micro-batches); past either bound the
# value is a mistake, not a workload.
MAX_MICRO_BATCHES = 65_536
MAX_SCHEDULE_OPS = 2**22
ZERO_STAGES = (0, 1, 2)
RECOMPUTE = ("none", "full")


def stage_layers(layers: int, V: int) -> np.ndarray:
    """int64[V] transformer layers of each virtual stage, contiguous, the first stages taking one
    more when V does not divide ``layers``."""
    return np.array([len(a) for a in np.array_split(np.arange(layers), V)], np.int64)


@dataclasses.dataclass(frozen=True)
class Model:
    """A decoder-only transformer (Llama-style: GQA attention, SwiGLU MLP, untied embeddings).

    MoE (DeepSeek-V3 / Megatron-Core layout): with ``experts > 0`` every layer after the first
    ``dense_layers`` routes each token to ``top_k`` of ``experts`` SwiGLU experts of ``moe_ffn_hidden``
    (default ``ffn_hidden``), with expert buffers of ``capacity_factor`` x top_k slots per token, and
    passes it through ``shared_experts`` more experts of that size; the first ``dense_layers`` layers
    have a dense MLP of ``ffn_hidden``.

    Attention: grouped-query (``kv_heads`` heads of ``head_dim``, default hidden / heads), or with
    ``kv_lora_rank > 0`` DeepSeek's multi-head latent attention: keys and values are projected up
    from a ``kv_lora_rank`` latent, which the KV cache holds with one shared ``rope_head_dim`` rotary
    key per token; queries from a ``q_lora_rank`` latent (0: from the hidden state directly); query
    and key heads are ``head_dim + rope_head_dim`` wide, value heads ``head_dim``.
    """

    name: str
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int
    vocab: int
    seq_len: int
    experts: int = 0
    top_k: int = 0
    moe_ffn_hidden: int | None = None
    dtype_bytes: int = 2
    capacity_factor: float = 1.0
    shared_experts: int = 0
    dense_layers: int = 0
    head_dim: int | None = None
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    rope_head_dim: int = 0

    def __post_init__(self):
        for f in ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "seq_len", "dtype_bytes"):
            check_number(f"model.{f}", getattr(self, f), minimum=1, integer=True)
        for f in ("experts", "shared_experts", "dense_layers", "kv_lora_rank", "q_lora_rank", "rope_head_dim"):
            check_number(f"model.{f}", getattr(self, f), integer=True)
        check_number("model.capacity_factor", self.capacity_factor, strict=True)
        if self.head_dim is not None:
            check_number("model.head_dim", self.head_dim, minimum=1, integer=True)
        elif self.hidden % self.heads:
            raise ValueError(f"model.heads: {self.heads} does not divide hidden {self.hidden} (or give head_dim)")
        if self.heads % self.kv_heads:
            raise ValueError(f"model.kv_heads: {self.kv_heads} does not divide heads {self.heads}")
        if self.experts:
            check_number("model.top_k", self.top_k, minimum=1, integer=True)
            if self.top_k > self.experts:
                raise ValueError(f"model.top_k: {self.top_k} is more than the {self.experts} experts")
            if self.dense_layers > self.layers:
                raise ValueError(f"model.dense_layers: {self.dense_layers} is more than the {self.layers} layers")
        else:
            for f in ("shared_experts", "dense_layers"):  # meaningful only beside routed experts
                if getattr(self, f):
                    raise ValueError(f"model.{f}: {getattr(self, f)} needs a MoE model (experts > 0)")
        if not self.kv_lora_rank:
            for f in ("q_lora_rank", "rope_head_dim"):  # latent attention's other dimensions
                if getattr(self, f):
                    raise ValueError(f"model.{f}: {getattr(self, f)} needs latent attention (kv_lora_rank > 0)")

    @property
    def head(self) -> int:
        """Width of a value head (and of a query/key head without its rotary part)."""
        return self.head_dim or self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head

    @property
    def kv_width(self) -> int:
        """Elements of K and V together per token, as attention reads them (what context parallelism
        gathers): 2 x kv_dim, or with latent attention the up-projected keys and values of every head."""
        if self.kv_lora_rank:
            return self.heads * (self.head + self.rope_head_dim) + self.heads * self.head
        return 2 * self.kv_dim

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden or self.ffn_hidden

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.experts else 0

    def is_moe(self, layer) -> np.ndarray:
        """bool per layer index: whether the layer has routed experts."""
        return (np.asarray(layer) >= self.dense_layers) & (self.experts > 0)

    @property
    def attention_params(self) -> int:
        h, heads, qk = self.hidden, self.heads, self.head + self.rope_head_dim
        out = heads * self.head * h
        if not self.kv_lora_rank:
            return h * heads * qk + h * 2 * self.kv_dim + out
        q = h * self.q_lora_rank + self.q_lora_rank * heads * qk if self.q_lora_rank else h * heads * qk
        kv = h * (self.kv_lora_rank + self.rope_head_dim) + self.kv_lora_rank * heads * 2 * self.head
        return q + kv + out

    def layer_parts(self, moe: bool) -> tuple[int, int]:
        """(parameters outside the routed experts, routed-expert parameters) of one layer, a MoE layer
        if ``moe``. Shared experts and the router count as the former (Megatron-Core shards and
        reduces them like dense weights)."""
        expert = 3 * self.hidden * self.expert_ffn
        if not moe:
            return self.attention_params + 3 * self.hidden * self.ffn_hidden, 0
        return self.attention_params + self.shared_experts * expert + self.hidden * self.experts, self.experts * expert

    @property
    def params(self) -> int:
        dense, moe = self.layer_parts(False), self.layer_parts(True)
        return ((self.layers - self.moe_layers) * sum(dense) + self.moe_layers * sum(moe)
                + 2 * self.vocab * self.hidden)

    @property
    def active_params(self) -> int:
        """Parameters a token passes through: routed experts count top_k times, not ``experts``."""
        routed = self.moe_layers * self.top_k * 3 * self.hidden * self.expert_ffn
        return self.params - self.moe_layers * self.layer_parts(True)[1] + routed

    def layer_flops_per_token(self, moe: bool) -> float:
        """Forward FLOP per token of one layer (a MoE layer if ``moe``): matmuls and causal attention
        scores; backward is 2x. Routed experts compute ``capacity_factor`` x top_k slots per token."""
        h = self.hidden
        scores = self.seq_len * self.heads * (2 * self.head + self.rope_head_dim)  # causal QK^T and AV
        attention = 2 * self.attention_params + scores
        if moe:
            slots = self.top_k * self.capacity_factor + self.shared_experts
            return float(attention + slots * 2 * 3 * h * self.expert_ffn + 2 * h * self.experts)
        return float(attention + 2 * 3 * h * self.ffn_hidden)

    def activation_bytes_per_token(self, moe: bool, tp: int = 1) -> float:
        """Bytes one layer keeps per token for its backward pass, per GPU of a TP group with sequence
        parallelism (everything sharded over ``tp`` except a MoE layer's routed-expert inputs, which
        the expert-tensor-parallel all-gather leaves whole on every TP rank).

        What autograd saves in a Llama-style layer with flash attention (no s x s scores) and no
        dropout: the two norms' inputs and outputs, Q, K and V, the attention output (also the output
        projection's input), the SwiGLU gate and up projections and their product; with latent
        attention also the two latents; a MoE layer keeps its routed tokens' expert inputs and SwiGLU
        tensors per slot (docs/sources.md, "Memory per GPU").
        """
        h, dt = self.hidden, self.dtype_bytes
        attention = 2 * h + self.heads * (self.head + self.rope_head_dim) + self.kv_width + self.heads * self.head
        if self.kv_lora_rank:
            attention += self.q_lora_rank + self.kv_lora_rank + self.rope_head_dim
        if not moe:
            return dt * (attention + 2 * h + 3 * self.ffn_hidden) / tp
        shared = self.shared_experts * 3 * self.expert_ffn
        routed = self.top_k * self.capacity_factor * (h + 3 * self.expert_ffn / tp)
        return dt * ((attention + 2 * h + shared) / tp + routed)

    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token: 2 (K and V) x kv_heads x head_dim x layers x dtype bytes; with
        latent attention the latent and the rotary key, (kv_lora_rank + rope_head_dim) x layers x dtype."""
        if self.kv_lora_rank:
            return (self.kv_lora_rank + self.rope_head_dim) * self.layers * self.dtype_bytes
        return 2 * self.kv_dim * self.layers * self.dtype_bytes


@dataclasses.dataclass(frozen=True)
class Parallelism:
    """How a job's GPUs split the model.

    Attributes:
      tp, cp, pp, dp: tensor, context, pipeline and data parallel degrees (product = the job's GPUs).
      ep: expert parallel degree, a divisor of dp (MoE experts are spread over groups of ep DP ranks).
      virtual_stages: model chunks per pipeline rank (interleaved 1F1B; 1 = plain 1F1B).
      order: rank order, fastest-varying first; the default puts TP inside a scale-up domain, PP
        across neighbouring servers and racks, DP widest (across zones, buildings, regions).
      tp_across_domains: allow a TP group to span scale-up domains (otherwise an error).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    virtual_stages: int = 1
    order: tuple[str, ...] = DIMS
    tp_across_domains: bool = False

    def __post_init__(self):
        for f in ("tp", "pp", "dp", "cp", "ep", "virtual_stages"):
            check_number(f"parallelism.{f}", getattr(self, f), minimum=1, integer=True)
        object.__setattr__(self, "order", tuple(self.order))
        if sorted(self.order) != sorted(DIMS):
            raise ValueError(f"parallelism.order: must order {', '.join(DIMS)} once each, got {list(self.order)}")
        if self.dp % self.ep:
            raise ValueError(f"parallelism.ep: {self.ep} does not divide dp = {self.dp}")

    @property
    def size(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    def grid(self, ranks) -> np.ndarray:
        """int64[dp, pp, cp, tp]: the GPU rank holding each coordinate, from the job's ranks in order."""
        ranks = np.asarray(ranks, np.int64)
        if ranks.ndim != 1 or ranks.size != self.size:
            raise ValueError(f"parallelism: tp x cp x pp x dp = {self.tp} x {self.cp} x {self.pp} x {self.dp} = "
                             f"{self.size} does not match the job's {ranks.size} GPUs")
        sizes = {"tp": self.tp, "cp": self.cp, "pp": self.pp, "dp": self.dp}
        shape = [sizes[d] for d in reversed(self.order)]  # slowest first
        block = ranks.reshape(shape)
        return block.transpose([list(reversed(self.order)).index(d) for d in ("dp", "pp", "cp", "tp")])


@dataclasses.dataclass(frozen=True)
class Training:
    """One training job: model, parallelism, batch, hardware and where it runs.

    Attributes:
      global_batch: sequences per step.  micro_batch: sequences per micro-batch.
      peak_flops: per-GPU dense peak (FLOP/s; H100 SXM BF16: 989e12).
      efficiency: fraction of peak the model's matmuls reach (compute time = FLOP / (peak x efficiency)).
      grad_bytes: bytes per gradient element in the DP reduction.
      ranks: the job's GPU ranks (default: 0 .. size-1).
      algorithm: all-reduce algorithm of the DP gradient reduction.
      hbm: memory per GPU (bytes; H100 SXM: 80 GB); ``memory()`` must fit in it (docs/sources.md).
      tokens, steps: how much to train (either, for the time to train; ``training_steps``).
      stage_peak_flops, stage_hbm: one value per pipeline stage (pipeline rank), for a job whose stages
        run on different accelerators (``hardware.stage_figures``); each stage's compute is timed at its
        own peak and its weights, gradients and optimizer state must fit in its own HBM. When given,
        ``peak_flops`` and ``hbm`` become their minimum (the slowest stage, the smallest memory).
      zero_stage: what the DP x CP ranks shard (``memory``): 0 nothing (DDP), 1 the optimizer state
        (Megatron's distributed optimizer, ZeRO-1), 2 the gradients too (ZeRO-2; Llama 3's FSDP,
        which keeps the weights unsharded from the forward to the backward pass). Expert parameters'
        state is sharded over their expert-data-parallel group (DP x CP / EP ranks).
      recompute: ``"none"`` (every layer keeps its activations; Llama 3 405B at 8K) or ``"full"``
        (a layer keeps only its input and is recomputed in the backward pass, collectives included).
      optimizer_bytes: optimizer state per parameter (Adam in mixed precision: fp32 master weights
        and two fp32 moments, 12 bytes).
      channels: parallel rings (NCCL channels) of every ring collective whose groups have several
        members in each scale-up domain. None: one per member in a domain, so that every member's NIC
        carries the ring between domains (``traffic.channel_orders``); an integer caps them (1: one
        flat ring, which sends between domains over one NIC per domain).
    """

    model: Model
    parallelism: Parallelism
    global_batch: int
    micro_batch: int = 1
    peak_flops: float = 989e12
    efficiency: float = 0.5
    grad_bytes: int = 2
    ranks: tuple[int, ...] | None = None
    algorithm: str = "ring"
    name: str = "training"
    hbm: float = 80e9
    tokens: float | None = None
    steps: int | None = None
    stage_peak_flops: tuple[float, ...] | None = None
    stage_hbm: tuple[float, ...] | None = None
    zero_stage: int = 2
    recompute: str = "none"
    optimizer_bytes: int = 12
    channels: int | None = None

    def __post_init__(self):
        if self.channels is not None:
            check_number("training.channels", self.channels, minimum=1, integer=True)
        check_number("training.global_batch", self.global_batch, minimum=1, integer=True)
        if self.zero_stage not in ZERO_STAGES or isinstance(self.zero_stage, bool):
            raise ValueError(f"training.zero_stage: must be one of {', '.join(map(str, ZERO_STAGES))}, "
                             f"got {self.zero_stage!r}")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"training.recompute: must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        check_number("training.optimizer_bytes", self.optimizer_bytes, integer=True)
        check_number("training.grad_bytes", self.grad_bytes, minimum=1, integer=True)
        if self.tokens is not None:
            check_number("training.tokens", self.tokens, strict=True)
        if self.steps is not None:
            check_number("training.steps", self.steps, minimum=1, integer=True)
            if self.tokens is not None:
                raise ValueError(f"training.steps: give tokens or steps, not both (got {self.tokens!r} tokens "
                                 f"and {self.steps!r} steps)")
        check_number("training.micro_batch", self.micro_batch, minimum=1, integer=True)
        check_number("training.peak_flops", self.peak_flops, strict=True)
        if not 0 < self.efficiency <= 1:
            raise ValueError(f"training.efficiency: must be in (0, 1], got {self.efficiency!r}")
        par, m = self.parallelism, self.model
        if self.global_batch % (par.dp * self.micro_batch):
            raise ValueError(f"training.global_batch: {self.global_batch} is not a multiple of dp x micro_batch = "
                             f"{par.dp * self.micro_batch}")
        ops = 2 * self.micro_batches * par.virtual_stages * par.pp
        if self.micro_batches > MAX_MICRO_BATCHES or ops > MAX_SCHEDULE_OPS:
            raise ValueError(f"training.global_batch: {self.global_batch} gives {self.micro_batches} micro-batches per "
                             f"pipeline (global_batch / (dp x micro_batch)) and {ops} pipeline-schedule ops "
                             f"(2 x micro-batches x virtual_stages x pp); at most {MAX_MICRO_BATCHES} micro-batches "
                             f"and {MAX_SCHEDULE_OPS} ops")
        if m.layers < par.pp * par.virtual_stages:
            raise ValueError(f"parallelism.pp: {par.pp} x {par.virtual_stages} virtual stages is more than the "
                             f"model's {m.layers} layers")
        if par.virtual_stages > 1 and self.micro_batches % par.pp:
            raise ValueError(f"parallelism.virtual_stages: the interleaved schedule needs the micro-batch count "
                             f"({self.micro_batches}) to be a multiple of pp = {par.pp}")
        if m.experts and m.experts % par.ep:
            raise ValueError(f"parallelism.ep: {par.ep} does not divide the model's {m.experts} experts")
        if m.seq_len % par.cp:
            raise ValueError(f"parallelism.cp: {par.cp} does not divide seq_len {m.seq_len}")
        if self.ranks is not None:
            object.__setattr__(self, "ranks", tuple(int(r) for r in self.ranks))
            if len(set(self.ranks)) != len(self.ranks):
                raise ValueError("training.ranks: a GPU rank is listed twice")
        object.__setattr__(self, "hbm", _units.coerce(self.hbm, "size", "training.hbm"))  # "80GB" as in a config
        check_number("training.hbm", self.hbm, strict=True)
        for key in ("stage_peak_flops", "stage_hbm"):
            values = getattr(self, key)
            if values is None:
                continue
            values = tuple(values) if isinstance(values, (list, tuple, np.ndarray)) else (values,)
            if len(values) != par.pp:
                raise ValueError(f"training.{key}: needs one value per pipeline stage (pp = {par.pp}), got "
                                 f"{len(values)}")
            for i, x in enumerate(values):
                check_number(f"training.{key}[{i}]", x, strict=True)
            object.__setattr__(self, key, tuple(float(x) for x in values))
            object.__setattr__(self, key[len("stage_"):], min(values))  # the slowest stage, the smallest memory
        static = self.static_memory()
        worst = int(np.argmax(static / self.rank_hbm))  # uniform hbm: the fullest rank
        if static[worst] > self.rank_hbm[worst]:
            stage = f", pipeline stage {worst}" if self.stage_hbm is not None else ""
            raise ValueError(f"training.hbm: weights, gradients and optimizer state need {static[worst] / 1e9:.1f} GB "
                             f"per GPU (tp x pp = {par.tp} x {par.pp}{stage}), more than hbm = "
                             f"{self.rank_hbm[worst] / 1e9:.0f} GB; shard the model further or raise hbm")

    @property
    def training_steps(self) -> int | None:
        """Steps to train: ``steps``, or ``tokens`` over the tokens of one step (rounded up)."""
        if self.tokens is None:
            return self.steps
        return math.ceil(self.tokens / (self.global_batch * self.model.seq_len))

    @property
    def micro_batches(self) -> int:
        return self.global_batch // (self.parallelism.dp * self.micro_batch)

    @property
    def rank_peak_flops(self) -> np.ndarray:
        """float64[pp]: each pipeline stage's peak FLOP/s (``stage_peak_flops``, else ``peak_flops``)."""
        return np.array(self.stage_peak_flops or (self.peak_flops,) * self.parallelism.pp, np.float64)

    @property
    def rank_hbm(self) -> np.ndarray:
        """float64[pp]: each pipeline stage's memory per GPU (``stage_hbm``, else ``hbm``)."""
        return np.array(self.stage_hbm or (self.hbm,) * self.parallelism.pp, np.float64)

    @property
    def recomputes(self) -> bool:
        return self.recompute == "full"

    def stage_layout(self) -> tuple[np.ndarray, np.ndarray]:
        """(layers, MoE layers): int64[V] of each virtual stage (V = pp x virtual_stages), the model's
        layers in order, its first ``dense_layers`` dense."""
        par = self.parallelism
        layers = stage_layers(self.model.layers, par.pp * par.virtual_stages)
        first = np.concatenate([[0], np.cumsum(layers)[:-1]])
        moe = np.array([int(self.model.is_moe(np.arange(a, a + n)).sum()) for a, n in zip(first, layers)], np.int64)
        return layers, moe

    def stage_params(self) -> tuple[np.ndarray, np.ndarray]:
        """(dense, expert): float64[V] parameters one GPU holds of each virtual stage. Dense ones
        (attention, dense MLPs, shared experts, router, and the embedding and output head on the
        first and last stage) are sharded over TP, routed experts over TP x EP (expert tensor
        parallelism = TP, Megatron-Core's default)."""
        par, m = self.parallelism, self.model
        layers, moe = self.stage_layout()
        V = layers.size
        (d_dense, _), (d_moe, e_moe) = m.layer_parts(False), m.layer_parts(True)
        ends = (np.arange(V) == 0).astype(np.int64) + (np.arange(V) == V - 1)
        dense = (layers - moe) * d_dense + moe * d_moe + ends * m.vocab * m.hidden
        return dense / par.tp, moe * e_moe / (par.tp * par.ep)

    @property
    def expert_dp(self) -> int:
        """Ranks of an expert-data-parallel group: those holding the same expert shard (DP x CP / EP)."""
        par = self.parallelism
        return par.dp * par.cp // par.ep

    def dp_gradients(self) -> tuple[np.ndarray, np.ndarray]:
        """(dense, expert): float64[V] gradient bytes one GPU reduces per virtual stage, dense ones over
        its DP x CP group, expert ones over its expert-data-parallel group (``expert_dp`` ranks)."""
        dense, expert = self.stage_params()
        return dense * self.grad_bytes, expert * self.grad_bytes

    def layer_traffic(self) -> dict[str, float]:
        """Per-layer collective kind -> bytes per rank of one call (nccl-tests' size: all-gather
        output, reduce-scatter input, all-to-all send buffer), for one micro-batch; only the kinds
        the job runs. ``tp_*``: the activation around attention and a dense MLP (or shared experts);
        ``cp_*``: K and V; ``ep_all_to_all``: a MoE layer's dispatch or combine, the rank's
        b x s / (cp x tp) tokens x top_k x capacity_factor x hidden (the 1/ep that stays on the rank
        crosses no link); ``etp_*``: the routed tokens gathered over TP for the expert matmuls and
        reduce-scattered back (Megatron-Core's all-to-all dispatcher)."""
        par, m = self.parallelism, self.model
        b, h, dt = self.micro_batch, m.hidden, m.dtype_bytes
        seq = m.seq_len // par.cp
        slots = m.top_k * m.capacity_factor
        out = {}
        if par.tp > 1:
            out["tp_all_gather"] = out["tp_reduce_scatter"] = float(b * seq * h * dt)
        if par.cp > 1:
            out["cp_all_gather"] = out["cp_reduce_scatter"] = float(b * m.seq_len * m.kv_width * dt / par.tp)
        if m.moe_layers and par.ep > 1:
            out["ep_all_to_all"] = float(b * seq / par.tp * slots * h * dt)
        if m.moe_layers and par.tp > 1:
            out["etp_all_gather"] = out["etp_reduce_scatter"] = float(b * seq * slots * h * dt)
        return out

    def layer_calls(self, moe: bool, backward: bool = False) -> dict[str, int]:
        """Calls of each per-layer kind (``layer_traffic``) in one layer's forward pass, or its backward
        pass (a MoE layer if ``moe``): TP all-gathers and reduce-scatters around attention and a dense
        MLP or shared experts (an all-gather's gradient is a reduce-scatter and back, so the backward
        makes as many), the CP all-gather of K and V forward and reduce-scatter of their gradients
        backward, a MoE layer's dispatch and combine all-to-alls and expert-TP gather and scatter."""
        tp = 1 + (not moe or self.model.shared_experts > 0)
        calls = {"tp_all_gather": tp, "tp_reduce_scatter": tp, "cp_all_gather": int(not backward),
                 "cp_reduce_scatter": int(backward), "ep_all_to_all": 2 * moe, "etp_all_gather": int(moe),
                 "etp_reduce_scatter": int(moe)}
        return {k: calls[k] for k in self.layer_traffic() if calls[k]}

    def _rank_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(dense, expert, gradients, optimizer): float64[pp] per pipeline rank, the parameters one GPU
        holds (a rank holds every ``pp``-th virtual stage) and the bytes of its gradients and optimizer
        state after ``zero_stage`` sharding (dense over DP x CP, experts over their expert-DP group)."""
        p = self.parallelism.pp
        dense, expert = self.stage_params()
        d = np.array([dense[s::p].sum() for s in range(p)])
        e = np.array([expert[s::p].sum() for s in range(p)])
        sharded = d / (self.parallelism.dp * self.parallelism.cp) + e / self.expert_dp
        grads = self.grad_bytes * (sharded if self.zero_stage >= 2 else d + e)
        optimizer = self.optimizer_bytes * (sharded if self.zero_stage >= 1 else d + e)
        return d, e, grads, optimizer

    def static_memory(self) -> np.ndarray:
        """float64[pp]: weights, gradients and optimizer state per GPU of each pipeline rank (bytes;
        ``memory`` gives the parts of the fullest one)."""
        d, e, grads, optimizer = self._rank_state()
        return (d + e) * self.model.dtype_bytes + grads + optimizer

    def memory(self) -> dict[str, float]:
        """Estimated bytes per GPU (docs/sources.md, "Memory per GPU"): the static state of the pipeline
        rank with the most parameters and the activations of the first rank, which holds the most.

        ``weights``: ``dtype_bytes`` per parameter of the rank's layers (and embedding and output head
        on the first and last stage), dense ones over TP, routed experts over TP x EP, never sharded
        over DP (ZeRO-3 is not modelled); ``gradients``: ``grad_bytes`` per parameter, over the DP
        group too with ``zero_stage`` 2; ``optimizer``: ``optimizer_bytes`` per parameter, over the
        DP group with ``zero_stage`` >= 1 (the DP group: DP x CP ranks for dense parameters, DP x CP /
        EP for experts); ``activations``: the chunks the (interleaved) 1F1B schedule holds in flight on
        its first rank, each its layers' ``Model.activation_bytes_per_token`` x b x s / cp, or with
        full recomputation each layer's input (b x s x h / (tp x cp) elements) plus the activations of
        the one layer being recomputed.
        """
        par, model = self.parallelism, self.model
        p, v = par.pp, par.virtual_stages
        d, e, grads, optimizer = self._rank_state()
        fullest = int(np.argmax(d + e))
        d, e, grads = d[fullest], e[fullest], grads[fullest]
        optimizer = optimizer[fullest]

        layers, moe = self.stage_layout()
        tokens = self.micro_batch * model.seq_len / par.cp
        per_layer = {flag: model.activation_bytes_per_token(flag, par.tp) * tokens for flag in (False, True)}
        kept = [((layers[k] - moe[k]) * per_layer[False] + moe[k] * per_layer[True]) for k in range(0, p * v, p)]
        if self.recomputes:
            kept = [layers[k] * tokens * model.hidden * model.dtype_bytes / par.tp for k in range(0, p * v, p)]
        in_flight = min(self.micro_batches * v, (p - 1) * 2 + (v - 1) * p + 1 if v > 1 else p)  # chunks, rank 0
        activations = in_flight * float(np.mean(kept))
        if self.recomputes:  # the layer being recomputed holds all its activations meanwhile
            activations += max(per_layer[True] if model.moe_layers else 0.0,
                               per_layer[False] if model.layers > model.moe_layers else 0.0)
        return {"weights": float((d + e) * model.dtype_bytes), "gradients": float(grads),
                "optimizer": float(optimizer), "activations": float(activations)}

    def job_ranks(self, num_gpus: int) -> np.ndarray:
        """The job's GPU ranks, checked against the parallelism and a fabric of ``num_gpus`` GPUs."""
        par = self.parallelism
        if self.ranks is None:
            if par.size > num_gpus:
                raise ValueError(f"parallelism: tp x cp x pp x dp = {par.tp} x {par.cp} x {par.pp} x {par.dp} = "
                                 f"{par.size} GPUs, but the fabric has {num_gpus}")
            return np.arange(par.size)
        ranks = np.asarray(self.ranks, np.int64)
        par.grid(ranks)  # raises when the sizes differ
        bad = np.flatnonzero((ranks < 0) | (ranks >= num_gpus))
        if bad.size:
            raise ValueError(f"training.ranks[{bad[0]}] = {ranks[bad[0]]} is not one of the fabric's {num_gpus} GPUs")
        return ranks


def llama3_405b() -> Model:
    """Llama 3 405B (docs/sources.md, "Meta's 24K-GPU cluster (Llama 3)")."""
    return Model("llama3-405b", layers=126, hidden=16_384, ffn_hidden=53_248, heads=128, kv_heads=8, vocab=128_256,
                 seq_len=8_192)


def llama3_8b() -> Model:
    """Llama 3 8B (docs/sources.md, "Model presets": the Llama 3 paper, Table 3)."""
    return Model("llama3-8b", layers=32, hidden=4_096, ffn_hidden=14_336, heads=32, kv_heads=8, vocab=128_256,
                 seq_len=8_192)


def llama3_70b() -> Model:
    """Llama 3 70B (docs/sources.md, "Model presets": the Llama 3 paper, Table 3)."""
    return Model("llama3-70b", layers=80, hidden=8_192, ffn_hidden=28_672, heads=64, kv_heads=8, vocab=128_256,
                 seq_len=8_192)


def mixtral_8x22b() -> Model:
    """Mixtral 8x22B, a sparse MoE of 141B parameters with 39B active (docs/sources.md, "Model presets"):
    every layer's MLP is 8 SwiGLU experts of 16,384, each token routed to 2. Assumed where the public
    figures are silent: sequences of 8,192 tokens (Mistral publishes a 64K context window, not the
    pre-training length)."""
    return Model("mixtral-8x22b", layers=56, hidden=6_144, ffn_hidden=16_384, heads=48, kv_heads=8, vocab=32_000,
                 seq_len=8_192, experts=8, top_k=2)


def deepseek_v3() -> Model:
    """DeepSeek-V3 (docs/sources.md, "DeepSeek-V3"): 61 layers, hidden 7,168, the first 3 dense (FFN
    18,432), then 1 shared + 256 routed experts of 2,048, top-8; MLA with 128 heads of 128 (+ 64
    rotary), KV latent 512, query latent 1,536; vocabulary 129,280; 4K sequences in pre-training.
    671B parameters, 37B activated per token (the multi-token-prediction module is not counted)."""
    return Model("deepseek-v3", layers=61, hidden=7168, ffn_hidden=18_432, heads=128, kv_heads=128, vocab=129_280,
                 seq_len=4096, experts=256, top_k=8, moe_ffn_hidden=2048, shared_experts=1, dense_layers=3,
                 head_dim=128, kv_lora_rank=512, q_lora_rank=1536, rope_head_dim=64)


def kimi_k2() -> Model:
    """Kimi K2 (docs/sources.md, "Kimi K2"): DeepSeek-V3's layout with 384 routed experts and 64 heads: 61
    layers, hidden 7,168, the first one dense (FFN 18,432), then 1 shared + 384 routed experts of 2,048,
    top-8; MLA (KV latent 512, query latent 1,536, heads of 128 + 64 rotary); vocabulary 163,840.
    1T parameters, 32B activated. Assumed: the dense FFN width and the latent sizes are DeepSeek-V3's
    (the model card gives the rest)."""
    return Model("kimi-k2", layers=61, hidden=7168, ffn_hidden=18_432, heads=64, kv_heads=64, vocab=163_840,
                 seq_len=4096, experts=384, top_k=8, moe_ffn_hidden=2048, shared_experts=1, dense_layers=1,
                 head_dim=128, kv_lora_rank=512, q_lora_rank=1536, rope_head_dim=64)


def llama3_405b_training(*, efficiency: float = 0.6, virtual_stages: int = 4) -> Training:
    """Llama 3 405B on 16,384 GPUs, TP8 x PP16 x DP128, 16M tokens (2,048 sequences of 8,192) per step.

    Assumed where the public figures are silent: H100 BF16 peak 989 TFLOP/s, matmul efficiency 0.6,
    an interleaved 1F1B schedule with 4 model chunks per pipeline rank, micro-batch 1 (16 micro-batches
    per replica), bf16 gradients reduced with a ring all-reduce overlapped with the backward pass.
    Memory as the Llama 3 paper states it (Sec. 3.3.2, the defaults): optimizer state and gradients
    sharded over DP (``zero_stage`` 2), no activation recomputation at 8K: about 75.5 GB per GPU.
    """
    return Training(llama3_405b(), Parallelism(tp=8, pp=16, dp=128, virtual_stages=virtual_stages),
                    global_batch=2048, micro_batch=1, efficiency=efficiency, name="llama3-405b")


@dataclasses.dataclass(frozen=True)
class Background:
    """Constant-rate traffic (storage, agentic CPU<->GPU, telemetry): flows ``src -> dst`` of ``rate``
    bytes/s each (scalar or one per flow)."""

    name: str
    src: tuple[int, ...]
    dst: tuple[int, ...]
    rate: float | str | tuple[float | str, ...]

    def __post_init__(self):  # rates as in a config ("100Gbps"), read once here
        where = f"background[{self.name}].rate"
        if isinstance(self.rate, (list, tuple)):
            rate = tuple(_units.coerce(r, "bandwidth", f"{where}[{i}]") for i, r in enumerate(self.rate))
        else:
            rate = _units.coerce(self.rate, "bandwidth", where)
        object.__setattr__(self, "rate", rate)


@dataclasses.dataclass(frozen=True)
class Inference:
    """Prefill/decode-disaggregated serving: every request's KV cache moves from a prefill instance to a
    decode instance (instance ``i`` of prefill sends to instance ``i mod D`` of decode), each TP rank
    its shard.

    Attributes:
      prefill, decode: int[instances, tp] GPU ranks of each instance.
      requests_per_s: request rate of the whole service.
      prompt_tokens: tokens per prompt (KV bytes per request = model.kv_bytes_per_token() x this).
    """

    name: str
    model: Model
    prefill: tuple[tuple[int, ...], ...]
    decode: tuple[tuple[int, ...], ...]
    requests_per_s: float
    prompt_tokens: int

    def __post_init__(self):
        pre, dec = np.asarray(self.prefill), np.asarray(self.decode)
        if pre.ndim != 2 or dec.ndim != 2 or pre.shape[1] != dec.shape[1] or pre.size == 0 or dec.size == 0:
            raise ValueError(f"inference[{self.name}]: prefill and decode must be int[instances, tp] with the same tp, "
                             f"got shapes {pre.shape} and {dec.shape}")
        check_number(f"inference[{self.name}].requests_per_s", self.requests_per_s, strict=True)
        check_number(f"inference[{self.name}].prompt_tokens", self.prompt_tokens, minimum=1, integer=True)

    @property
    def kv_bytes(self) -> int:
        return self.model.kv_bytes_per_token() * self.prompt_tokens

    def transfer(self) -> Phase:
        """One request's KV transfer: prefill instance 0's ranks to decode instance 0's, shard by shard."""
        pre, dec = np.asarray(self.prefill, np.int64), np.asarray(self.decode, np.int64)
        tp = pre.shape[1]
        return Phase(src=pre[0], dst=dec[0], bytes=np.full(tp, self.kv_bytes / tp), steps=1)

    def flows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Average traffic: (src, dst, bytes/s) of every shard stream, requests spread evenly."""
        pre, dec = np.asarray(self.prefill, np.int64), np.asarray(self.decode, np.int64)
        pairs = np.arange(pre.shape[0])
        src, dst = pre[pairs].reshape(-1), dec[pairs % dec.shape[0]].reshape(-1)
        rate = self.requests_per_s * self.kv_bytes / src.size
        return src, dst, np.full(src.size, rate)
