#!/usr/bin/env bash
# GPU session 25, run 3 (ran at commit 7c89781's kernel; reverted after it): run 2's ncu profile of the TMA routing arm:
# 335 cycles a warp between instructions, MIO stalls (short scoreboard, MIO throttle), 33 GB/s; TMA streaming alone ran
# at copy speed. Suspect: the bias, read per thread at one address (v13) and turned by the loop pipeliner into cp.async
# (LDGSTS) copies, one per row. Arms at 256 / 8, 65536 tokens: without bias (rule, TMA 2 / 3), with bias (rule, TMA 2
# with the bias by TMA). Prediction: without bias TMA at or under the rule (~19-20 us); the bias by TMA with its
# shuffles (202 SHFL static) slower than the rule but not 50x.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 200 python3 benchmarks/probes/tma_probe.py --shape 256/8/65536 128/8/65536 --no-bias --stages 2 3 \
  --out $OUT/tma_probe_nobias_s25_run3.json 2>&1 | tee $OUT/tma_probe_nobias_s25_run3.txt
date +%T
timeout 200 python3 benchmarks/probes/tma_probe.py --shape 256/8/65536 --stages 2 --bias-tma \
  --out $OUT/tma_probe_biastma_s25_run3.json 2>&1 | tee $OUT/tma_probe_biastma_s25_run3.txt
date +%T
