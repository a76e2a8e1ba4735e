"""Recommendation training (DLRM-class, docs/sources.md "DLRM"): embedding tables sharded table-wise
over the job's GPUs (model parallel), the dense MLPs replicated (data parallel).

Per iteration each GPU trains on ``batch_per_gpu`` samples. The owner of a table looks up and pools
(sums) ``pooling`` rows per sample for the whole global batch, then the forward all-to-all sends every
GPU the pooled vectors of every table for its local samples; the backward all-to-all returns their
gradients to the owners (the same bytes); the dense MLP gradients are all-reduced over all GPUs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._checks import check_number


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """One DLRM-class training job on ``gpus`` GPU ranks (``ranks``; default 0 .. gpus-1).

    Attributes:
      tables: embedding tables, ``tables / gpus`` whole tables per GPU (table-wise sharding).
      rows: rows per table.  dim: embedding width.  element_bytes: bytes per embedding element (the
        pooled vectors and their gradients travel at this width).
      pooling: lookups per sample per table (pooled into one vector; > 0).
      batch_per_gpu: samples per GPU per iteration.
      dense_params: parameters of the bottom and top MLPs, replicated on every GPU.
      grad_bytes: bytes per dense gradient element in the all-reduce.
      peak_flops, efficiency: the dense compute rate (6 FLOP per parameter per sample: forward 2,
        backward 4).
      hbm_bandwidth: the rate of embedding lookups and updates (bytes/s; H100 SXM: 3.35 TB/s).
    """

    name: str
    gpus: int
    tables: int
    rows: int
    dim: int
    batch_per_gpu: int
    dense_params: float
    pooling: float = 1.0
    element_bytes: int = 4
    grad_bytes: int = 2
    peak_flops: float = 989e12
    efficiency: float = 0.5
    hbm_bandwidth: float = 3.35e12
    algorithm: str = "ring"
    ranks: tuple[int, ...] | None = None

    def __post_init__(self):
        for f in ("gpus", "tables", "rows", "dim", "batch_per_gpu", "element_bytes", "grad_bytes"):
            check_number(f"recommendation.{f}", getattr(self, f), minimum=1, integer=True)
        for f in ("pooling", "peak_flops", "hbm_bandwidth"):
            check_number(f"recommendation.{f}", getattr(self, f), strict=True)
        check_number("recommendation.dense_params", self.dense_params)
        check_number("recommendation.efficiency", self.efficiency, strict=True)
        if self.efficiency > 1:
            raise ValueError(f"recommendation.efficiency: must be in (0, 1], got {self.efficiency!r}")
        if self.tables % self.gpus:
            raise ValueError(f"recommendation.tables: {self.tables} tables cannot be sharded table-wise over "
                             f"{self.gpus} GPUs (tables must be a multiple of gpus)")
        if self.ranks is not None and len(self.ranks) != self.gpus:
            raise ValueError(f"recommendation.ranks: {len(self.ranks)} ranks for gpus = {self.gpus}")

    @property
    def tables_per_gpu(self) -> int:
        return self.tables // self.gpus

    def all_to_all_bytes(self) -> float:
        """Each GPU's all-to-all send buffer (nccl-tests' size): its tables' pooled vectors for the
        global batch, ``tables/gpus x gpus x batch_per_gpu x dim x element_bytes``; the share for
        each GPU (itself included) is 1/gpus of it."""
        return float(self.tables_per_gpu * self.gpus * self.batch_per_gpu * self.dim * self.element_bytes)

    def all_reduce_bytes(self) -> float:
        """Each GPU's dense-gradient buffer: ``dense_params x grad_bytes``."""
        return float(self.dense_params * self.grad_bytes)

    def lookup_bytes(self) -> float:
        """HBM bytes a GPU reads to pool its tables' rows for the global batch (its update writes the
        same): ``tables/gpus x gpus x batch_per_gpu x pooling x dim x element_bytes``."""
        return self.all_to_all_bytes() * self.pooling

    def embedding_bytes(self) -> float:
        """Bytes of the embedding rows one GPU holds: ``tables/gpus x rows x dim x element_bytes``."""
        return float(self.tables_per_gpu * self.rows * self.dim * self.element_bytes)

    def compute_times(self) -> dict[str, float]:
        """Seconds of the iteration's compute: embedding lookup (forward), dense MLPs forward and
        backward, embedding update (backward)."""
        embedding = self.lookup_bytes() / self.hbm_bandwidth
        return {"embedding_forward": embedding,
                "dense": 6.0 * self.dense_params * self.batch_per_gpu / (self.peak_flops * self.efficiency),
                "embedding_backward": embedding}

    def job_ranks(self, num_gpus: int) -> np.ndarray:
        """The job's GPU ranks, checked against a fabric of ``num_gpus`` GPUs."""
        if self.ranks is None:
            if self.gpus > num_gpus:
                raise ValueError(f"recommendation.gpus: {self.gpus} GPUs, but the fabric has {num_gpus}")
            return np.arange(self.gpus)
        ranks = np.asarray(self.ranks, np.int64)
        bad = np.flatnonzero((ranks < 0) | (ranks >= num_gpus))
        if bad.size:
            raise ValueError(f"recommendation.ranks[{bad[0]}] = {ranks[bad[0]]} is not one of the fabric's "
                             f"{num_gpus} GPUs")
        return ranks
