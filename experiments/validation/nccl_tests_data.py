"""Per-message-size nccl-tests output copied from public sources (docs/sources.md, "nccl-tests on H100").

Rows are the out-of-place columns as printed: (size bytes, time us, algbw GB/s, busbw GB/s).
"""

from __future__ import annotations

# kvcache-ai/Mooncake pull request #3484 ("[PG][1/N] Initialize the new collective framework", by
# caozhanhao), https://github.com/kvcache-ai/Mooncake/pull/3484: an all_reduce_perf table on 8 ranks
# (busbw / algbw = 1.75 = 2 x 7 / 8) of one node. The run printed after it in the same post lists
# 8x NVIDIA H20 on host qjh001 (nccl-tests 2.19.7, NCCL 2.30.4, -b 64 -e 1G -f 2, 10 warm-up and
# 100 timed iterations); this table's own header and algorithm are not in the text we could read.
# Peak busbw 358 GB/s at 1 GiB is the ring / Simple regime (NVLS reaches ~480 on the same NVLink4).
# The 64 MiB row is cut off in the source and is left out; rows below 32 KiB were not readable.
NVLINK4_8GPU_ALL_REDUCE = (
    (32768, 18.66, 1.76, 3.07),
    (65536, 18.95, 3.46, 6.05),
    (131072, 19.25, 6.81, 11.91),
    (262144, 19.54, 13.42, 23.48),
    (524288, 20.39, 25.71, 45.00),
    (1048576, 27.76, 37.78, 66.11),
    (2097152, 40.66, 51.58, 90.27),
    (4194304, 53.24, 78.78, 137.87),
    (8388608, 81.16, 103.36, 180.88),
    (16777216, 121.33, 138.28, 242.00),
    (33554432, 195.40, 171.72, 300.51),
    (134217728, 700.25, 191.67, 335.43),
    (268435456, 1366.17, 196.49, 343.85),
    (536870912, 2671.60, 200.96, 351.67),
    (1073741824, 5252.64, 204.42, 357.73),
)

# Which rows the calibration sees: every other size from the smallest; the rest are held out.
FIT_ROWS = tuple(range(0, len(NVLINK4_8GPU_ALL_REDUCE), 2))
