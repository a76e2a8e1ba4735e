"""RL post-training: a trainer job, rollout generators, and the traffic between them each iteration.

One iteration (synchronous, on-policy): the generators produce ``rollouts`` sequences of
``response_tokens`` after ``prompt_tokens`` with the current weights; the rollouts (token ids and
log-probabilities) flow back to the trainer's first pipeline stage; the trainer takes
``train_steps`` optimizer steps; the new weights go to every generator (the weight sync). With
``schedule: one_step_off`` the generators produce the next batch with the previous weights while
the trainer trains, so generation hides behind training (or training behind generation).

Generators run on their own GPUs (``generators``: int[instances, tp] ranks) or, when none are
given, co-located on the trainer's GPUs, taking turns with it (instances of ``generator_tp``
consecutive trainer ranks).

The weight sync moves ``params x weight_bytes`` from the trainer's layout to the inference layout:

- ``broadcast`` (checkpoint-engine's default mode): the weights go in buckets of ``bucket_bytes``;
  each bucket is broadcast from its owner (a GPU of the trainer's first data-parallel replica) down a
  pipelined chain over every generator GPU, which keeps the part its own shard needs. Every
  generator GPU receives all the weights. With ``channels`` > 1 the bucket is split over that many
  chains (NCCL's channels), chain c entering every scale-up domain at its c-th GPU, so that the chains
  cross between domains through different NICs. With ``weights_in_host`` the weights wait in the owners'
  host memory and each bucket first crosses its owner's host link (H2D), pipelined with the chain.
- ``p2p``: every generator GPU fetches only its own shard, directly from the trainer ranks that hold
  it (a TP re-shard: trainer TP rank t and generator TP rank k share ``|[t/tp, (t+1)/tp) n
  [k/K, (k+1)/K)|`` of every layer), each instance from its own trainer replica (instance i from
  replica ``i mod dp``); with ``weights_in_host`` each piece first crosses its source's host link
  (once per piece read, the pieces a GPU keeps for itself included). A piece whose source and
  destination are the same GPU moves no bytes over the fabric.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .._checks import check_number
from ._serving import Serving
from ._workload import Training

SYNC_MODES = ("broadcast", "p2p")
SCHEDULES = ("synchronous", "one_step_off")


@dataclasses.dataclass(frozen=True)
class RL:
    """One RL post-training workload (the module docstring says what an iteration is).

    Attributes:
      trainer: the training job (its ``ranks`` placed), with its model, parallelism and batch.
      rollouts: sequences generated per iteration, spread evenly over the instances.
      prompt_tokens, response_tokens: tokens per prompt and per generated response.
      generators: int[instances, tp] GPU ranks of each generator instance; empty: co-located on the
        trainer's GPUs, instances of ``generator_tp`` consecutive ranks.
      sync: ``broadcast`` or ``p2p`` (module docstring).  bucket_bytes: the broadcast's bucket.
      channels: parallel chains of the broadcast (module docstring).
      weights_in_host: the weights wait in host memory (checkpoint-engine's parameter server), so
        they cross a host link on the way (``serving.host_bandwidth`` of the site's accelerator).
      weight_bytes: bytes per parameter of the synced weights (default: the model's dtype_bytes).
      rollout_bytes_per_token: bytes per rollout token sent back (int32 id + fp32 log-probability).
      train_steps: optimizer steps per iteration.  schedule: ``synchronous`` or ``one_step_off``.
      serving: the generators' compute (``Serving``).  host_bandwidth: each GPU's host link, bytes/s.
    """

    name: str
    trainer: Training
    rollouts: int
    prompt_tokens: int
    response_tokens: int
    generators: tuple[tuple[int, ...], ...] = ()
    generator_tp: int = 8
    sync: str = "broadcast"
    bucket_bytes: float = 8 * 2**30
    channels: int = 1
    weights_in_host: bool = False
    weight_bytes: int | None = None
    rollout_bytes_per_token: int = 8
    train_steps: int = 1
    schedule: str = "synchronous"
    serving: Serving = Serving()
    host_bandwidth: float = 64e9

    def __post_init__(self):
        where = f"rl[{self.name}]"
        object.__setattr__(self, "generators", tuple(tuple(int(r) for r in g) for g in self.generators))
        for f in ("rollouts", "prompt_tokens", "response_tokens", "generator_tp", "rollout_bytes_per_token",
                  "train_steps", "channels"):
            check_number(f"{where}.{f}", getattr(self, f), minimum=1, integer=True)
        check_number(f"{where}.bucket_bytes", self.bucket_bytes, strict=True)
        check_number(f"{where}.host_bandwidth", self.host_bandwidth, strict=True)
        if self.weight_bytes is not None:
            check_number(f"{where}.weight_bytes", self.weight_bytes, minimum=1, integer=True)
        if self.sync not in SYNC_MODES:
            raise ValueError(f"{where}.sync: must be one of {', '.join(SYNC_MODES)}, got {self.sync!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"{where}.schedule: must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.trainer.ranks is None:
            raise ValueError(f"{where}.trainer: needs its ranks placed (first_rank in a scenario file)")
        if self.generators:
            g = self.generators
            if len({len(i) for i in g}) != 1:
                raise ValueError(f"{where}.generators: every instance needs the same tp, got sizes "
                                 f"{sorted({len(i) for i in g})}")
            shared = sorted(set(self.trainer.ranks) & {r for i in g for r in i})
            if shared:
                raise ValueError(f"{where}.generators: GPU rank {shared[0]} is also the trainer's; leave generators "
                                 f"out to co-locate them with the trainer")
            flat = [r for i in g for r in i]
            if len(set(flat)) != len(flat):
                raise ValueError(f"{where}.generators: a GPU rank is in two instances")
        else:
            n = len(self.trainer.ranks)
            if n % self.generator_tp:
                raise ValueError(f"{where}.generator_tp: {self.generator_tp} does not divide the trainer's {n} GPUs "
                                 f"(co-located generators are instances of generator_tp of its GPUs)")
            if self.schedule == "one_step_off":
                raise ValueError(f"{where}.schedule: one_step_off needs generators on their own GPUs; co-located "
                                 f"ones take turns with the trainer")
        if self.rollouts < self.instances.shape[0]:
            raise ValueError(f"{where}.rollouts: {self.rollouts} rollouts leave some of the "
                             f"{self.instances.shape[0]} generator instances idle")

    @property
    def colocated(self) -> bool:
        return not self.generators

    @property
    def instances(self) -> np.ndarray:
        """int64[instances, tp] the generator instances' GPU ranks."""
        if self.generators:
            return np.asarray(self.generators, np.int64)
        return np.asarray(self.trainer.ranks, np.int64).reshape(-1, self.generator_tp)

    def job_ranks(self, num_gpus: int) -> np.ndarray:
        """Every GPU the workload runs on (trainer, then generators), checked against the fabric."""
        ranks = self.trainer.job_ranks(num_gpus)
        if self.generators:
            gen = self.instances.reshape(-1)
            bad = np.flatnonzero((gen < 0) | (gen >= num_gpus))
            if bad.size:
                raise ValueError(f"rl[{self.name}].generators: GPU rank {gen[bad[0]]} is not one of the fabric's "
                                 f"{num_gpus} GPUs")
            ranks = np.concatenate([ranks, gen])
        return ranks

    @property
    def sync_bytes(self) -> float:
        """Bytes of the weights synced each iteration: ``params x weight_bytes``."""
        per = self.trainer.model.dtype_bytes if self.weight_bytes is None else self.weight_bytes
        return float(self.trainer.model.params * per)

    @property
    def buckets(self) -> int:
        """Broadcast buckets per sync: ``ceil(sync_bytes / bucket_bytes)``."""
        return max(1, math.ceil(self.sync_bytes / self.bucket_bytes))

    def batch(self) -> int:
        """Sequences each generator instance produces per iteration (the busiest one's)."""
        return math.ceil(self.rollouts / self.instances.shape[0])

    def generation_seconds(self) -> float:
        """One instance's generation of its batch: prefill of the prompts, then the decode steps."""
        model, b, tp = self.trainer.model, self.batch(), self.instances.shape[1]
        return (b * self.serving.prefill(model, self.prompt_tokens, 0, tp)  # b prompts, each attending to itself
                + self.serving.decode(model, self.response_tokens, b, self.prompt_tokens, tp))

    def rollout_bytes(self) -> float:
        """Bytes one instance sends back per iteration: its batch's tokens x rollout_bytes_per_token."""
        return float(self.batch() * (self.prompt_tokens + self.response_tokens) * self.rollout_bytes_per_token)
