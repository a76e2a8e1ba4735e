"""RL weight sync against its public anchor: checkpoint-engine's broadcast update on H20 clusters.

    PYTHONPATH=. python experiments/rl_weight_sync.py [--out out/rl_weight_sync]

Moonshot's checkpoint-engine (docs/sources.md, "RL weight sync: checkpoint-engine") updates the
weights of vLLM instances co-located with it from a parameter server that holds them sharded in host
memory: every bucket is copied host-to-device by its owner (H2D), then broadcast to every GPU of the
cluster, each keeping the part its own shard needs. Its README reports "Update (Broadcast)" for
DeepSeek-V3.1 and Kimi-K2-Instruct in FP8 on 16 and 256 H20 GPUs (instances of TP16), with the
bucket size of each run. This script builds the same setup as an RL workload (co-located generators
of TP16, ``weights_in_host``, ``sync: broadcast``, the table's bucket) on H20 nodes of 8 GPUs
(NVLink 450 GB/s each way, PCIe Gen5 host links, one 400 Gb/s NIC per GPU on a non-blocking
two-tier fabric: assumed, the README states no network), and reports flowmodel's weight-sync time
with one broadcast chain and with 8 (one per NIC of a node, as NCCL's channels run) against each
row. Writes OUT/result.json.
"""

from __future__ import annotations

import argparse
import os

import jax

jax.config.update("jax_enable_x64", True)

from flowmodel import fabric as fb  # noqa: E402
from flowmodel import hardware  # noqa: E402
from flowmodel import scenario as sc  # noqa: E402
from flowmodel import traffic as tr  # noqa: E402
from flowmodel.results import write_json  # noqa: E402

GIB = 2**30
# checkpoint-engine README, "Benchmark" (current table; the launch table of 2025-09 in brackets in the docs):
# (model, GPUs, bucket GiB, Update (Broadcast) seconds)
ROWS = [("deepseek-v3", 16, 5.39, 10.19), ("kimi-k2", 16, 5.89, 14.36),
        ("deepseek-v3", 256, 8.00, 11.33), ("kimi-k2", 256, 8.00, 16.04)]
LAUNCH = {("deepseek-v3", 16): (2.38, 12.22), ("kimi-k2", 16): (2.93, 15.45),
          ("deepseek-v3", 256): (2.54, 13.88), ("kimi-k2", 256): (2.99, 21.50)}
MODELS = {"deepseek-v3": tr.deepseek_v3, "kimi-k2": tr.kimi_k2}
# H20 (NVIDIA HGX H20, as reported; docs/sources.md): the figures the sync crosses are NVLink, PCIe and the NIC
H20 = hardware.Accelerator(name="h20", bf16_flops=148e12, fp8_flops=296e12, hbm=96e9, hbm_bandwidth=4.0e12,
                           scale_up_size=8, scale_up_bandwidth=450e9, nic_speed=50e9, host_bandwidth=64e9)


def cluster(gpus: int) -> fb.Fleet:
    leaves = max(1, gpus // 32)
    clos = fb.Clos(tiers=2, gpus_per_leaf=min(gpus, 32), leaves_per_pod=leaves, spines_per_pod=leaves,
                   nic_bandwidth=H20.nic_bandwidth, latency=1e-6)
    up = fb.ScaleUp(size=8, bandwidth=H20.scale_up_bandwidth, latency=1e-6)
    return fb.Fleet(sites=(fb.Site("h20", scale_up=up, scale_out=clos, accelerator=H20),))


def sync_seconds(name: str, gpus: int, bucket_gib: float, channels: int) -> float:
    model = MODELS[name]()
    model = tr.Model(**{**model.__dict__, "dtype_bytes": 1})  # FP8 weights: one byte per parameter
    # the benchmark updates the engines from the parameter server alone: the trainer only names the GPUs and
    # the owner of the buckets, so its memory check is waived (hbm) and its step is not part of the figure
    trainer = tr.Training(model, tr.Parallelism(tp=8, dp=gpus // 8), global_batch=gpus // 8,
                          ranks=tuple(range(gpus)), name="trainer", hbm=1e15)
    rl = tr.RL(name="update", trainer=trainer, rollouts=gpus // 16, prompt_tokens=1, response_tokens=1,
               generator_tp=16, sync="broadcast", bucket_bytes=bucket_gib * GIB, weights_in_host=True,
               channels=channels, host_bandwidth=H20.host_bandwidth)
    prepared = sc.prepare(sc.Scenario(f"{name}-{gpus}", cluster(gpus), rl=(rl,)))
    return float(prepared.evaluate().rl["update"].breakdown["weight_sync"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/rl_weight_sync")
    args = ap.parse_args()
    rows = []
    print(f"{'model (FP8)':<14}{'H20s':>6}{'bucket':>9}{'published':>11}{'1 chain':>10}{'error':>8}"
          f"{'8 chains':>10}{'error':>8}   launch table: bucket, published, 8 chains, error")
    for name, gpus, bucket, published in ROWS:
        one, eight = sync_seconds(name, gpus, bucket, 1), sync_seconds(name, gpus, bucket, 8)
        l_bucket, l_published = LAUNCH[(name, gpus)]
        l_eight = sync_seconds(name, gpus, l_bucket, 8)
        rows.append({"model": name, "gpus": gpus, "bucket_gib": bucket, "published_s": published,
                     "one_chain_s": one, "eight_chains_s": eight, "launch_bucket_gib": l_bucket,
                     "launch_published_s": l_published, "launch_eight_chains_s": l_eight})
        print(f"{name:<14}{gpus:>6}{bucket:>7.2f}Gi{published:>10.2f}s{one:>9.2f}s{one / published - 1:>+8.1%}"
              f"{eight:>9.2f}s{eight / published - 1:>+8.1%}   {l_bucket:.2f}Gi, {l_published:.2f}s, "
              f"{l_eight:.2f}s, {l_eight / l_published - 1:+.1%}", flush=True)
    write_json(os.path.join(args.out, "result.json"), {"rows": rows})


if __name__ == "__main__":
    main()
