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


@dataclasses.dataclass(frozen=True)
class Model:
    """A decoder-only transformer (Llama-style: GQA attention, SwiGLU MLP, untied embeddings).

    MoE: with ``experts > 0`` every layer's MLP is ``experts`` experts of ``moe_ffn_hidden`` (default
    ``ffn_hidden``), each token routed to ``top_k`` of them.
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

    def __post_init__(self):
        for f in ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "seq_len", "dtype_bytes"):
            check_number(f"model.{f}", getattr(self, f), minimum=1, integer=True)
        check_number("model.experts", self.experts, integer=True)
        if self.hidden % self.heads:
            raise ValueError(f"model.heads: {self.heads} does not divide hidden {self.hidden}")
        if self.heads % self.kv_heads:
            raise ValueError(f"model.kv_heads: {self.kv_heads} does not divide heads {self.heads}")
        if self.experts:
            check_number("model.top_k", self.top_k, minimum=1, integer=True)
            if self.top_k > self.experts:
                raise ValueError(f"model.top_k: {self.top_k} is more than the {self.experts} experts")

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * (self.hidden // self.heads)

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden or self.ffn_hidden

    @property
    def layer_params(self) -> int:
        attention = self.hidden * (self.hidden + 2 * self.kv_dim) + self.hidden * self.hidden
        if self.experts:
            return attention + self.experts * 3 * self.hidden * self.expert_ffn + self.hidden * self.experts
        return attention + 3 * self.hidden * self.ffn_hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + 2 * self.vocab * self.hidden

    def layer_flops_per_token(self) -> float:
        """Forward FLOP per token of one layer (matmuls and causal attention scores); backward is 2x."""
        h = self.hidden
        attention = 2 * h * (h + 2 * self.kv_dim) + 2 * h * h + 2 * self.seq_len * h  # causal QK^T and AV
        if self.experts:
            mlp = self.top_k * 2 * 3 * h * self.expert_ffn + 2 * h * self.experts
        else:
            mlp = 2 * 3 * h * self.ffn_hidden
        return float(attention + mlp)

    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token: 2 (K and V) x kv_heads x head_dim x layers x dtype bytes."""
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

    def __post_init__(self):
        check_number("training.global_batch", self.global_batch, minimum=1, integer=True)
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

    def _rank_params(self) -> list[float]:
        """Parameters per GPU of each pipeline rank: its layers (and embeddings on the first and last
        stage) over TP, MoE experts also over EP."""
        par, model = self.parallelism, self.model
        p = par.pp
        stage_layers = np.array([len(a) for a in np.array_split(np.arange(model.layers), p * par.virtual_stages)])
        expert = model.experts * 3 * model.hidden * model.expert_ffn
        per_layer = (model.layer_params - expert) / par.tp + expert / (par.tp * par.ep)
        embedding = model.vocab * model.hidden / par.tp
        return [stage_layers[s::p].sum() * per_layer + embedding * ((s == 0) + (s == p - 1)) for s in range(p)]

    def static_memory(self) -> np.ndarray:
        """float64[pp]: weights, gradients and optimizer state per GPU of each pipeline rank (bytes;
        ``memory`` gives the parts of the fullest one)."""
        par = self.parallelism
        return np.array([n * self.model.dtype_bytes + n * self.grad_bytes + 12 * n / (par.dp * par.cp)
                         for n in self._rank_params()], np.float64)

    def memory(self) -> dict[str, float]:
        """Estimated bytes per GPU (docs/sources.md, "Memory per GPU"): the static state of the pipeline
        rank with the most parameters and the activations of the first rank, which holds the most.

        ``weights`` (``dtype_bytes`` per parameter) and ``gradients`` (``grad_bytes``) of the rank's
        layers (and embeddings on the first and last stage) over TP, MoE experts also over EP;
        ``optimizer``: Adam's fp32 master weights and two moments (12 bytes per parameter) sharded
        over DP x CP (a distributed optimizer); ``activations``: the micro-batches the 1F1B schedule
        holds in flight on its first rank, 34 x s x b x h / (tp x cp) bytes per layer each (tensor and
        sequence parallelism with selective recomputation).
        """
        par, model = self.parallelism, self.model
        p, v = par.pp, par.virtual_stages
        V = p * v
        stage_layers = np.array([len(a) for a in np.array_split(np.arange(model.layers), V)])
        fullest = max(self._rank_params())
        in_flight = min(self.micro_batches * v, (p - 1) * 2 + (v - 1) * p + 1 if v > 1 else p)  # chunks, rank 0
        layers_per_chunk = stage_layers[0::p].sum() / v
        activation = 34 * model.seq_len * self.micro_batch * model.hidden / (par.tp * par.cp) * model.dtype_bytes / 2
        return {"weights": fullest * model.dtype_bytes, "gradients": fullest * self.grad_bytes,
                "optimizer": 12 * fullest / (par.dp * par.cp),
                "activations": in_flight * layers_per_chunk * activation}

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


def llama3_405b_training(*, efficiency: float = 0.6, virtual_stages: int = 4) -> Training:
    """Llama 3 405B on 16,384 GPUs, TP8 x PP16 x DP128, 16M tokens (2,048 sequences of 8,192) per step.

    Assumed where the public figures are silent: H100 BF16 peak 989 TFLOP/s, matmul efficiency 0.6,
    an interleaved 1F1B schedule with 4 model chunks per pipeline rank, micro-batch 1 (16 micro-batches
    per replica), bf16 gradients reduced with a ring all-reduce overlapped with the backward pass.
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
