#!/usr/bin/env bash
# GPU session 23, run 2. (1) T = 8192 (target 4 us, the four-lane tile at 6.8): run 1 says the rounds tiles lose
# there; the four-lane tile issues ~185 instructions a row (static count) = ~1.5 us of issue at 8192 rows, so its
# 6.1 us of kernel time wait on dependencies (~8 warps an SM). Re-time tiles with more warps or more lanes a row
# (v7 measured them slower, five kernel versions ago). Prediction: none faster by more than the drift (v7's
# finding stands) unless the lanes' merges got cheaper than the latency they hide. (2) Run 1 saw the LARGE class's
# top (16383 tokens) 5% faster without step-ahead loads for 256 / 8, 512 / 8 and grouped, slower at 8192:
# locate the crossing (10240-16383 tokens) for a class split.
set -o pipefail
source benchmarks/gpu/setup.sh
git show f264abe:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v21.py  # v21 (the tree's kernel)
mkdir -p /tmp/ps
date +%T
timeout 200 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v21.py --huge --tokens 8192 \
  --experts 256 384 --rounds 3 --jobs 14 --budget-s 150 --out /tmp/ps --prefetch-arms \
  --tile "L8 R4 W1 G4 prefetch" --tile "L4 R4 W1 G4 prefetch" --tile "L8 R8 W2 G4 prefetch" \
  --tile "L16 R2 W1 G4 prefetch" --tile "L2 R16 W1 G4 prefetch" --tile "L4 R8 W1 G2 prefetch" \
  --tile "L4 R8 W1 G8 prefetch" --tile "L4 R8 W1 G4 prefetch words" --tile "L4 R8 W1 G4 prefetch onepass" \
  2>&1 | grep -v "does not apply" | tee $OUT/plan_sweep_tiles8k_s23_run2.txt
cp /tmp/ps/plan_sweep.json $OUT/plan_sweep_tiles8k_s23_run2.json
date +%T
timeout 200 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v21.py --huge --tokens 12288 16383 10240 14336 \
  --experts 256 512 384 128 224 --rounds 3 --jobs 14 --budget-s 150 --out /tmp/ps --prefetch-arms \
  2>&1 | grep -v "does not apply\|baseline kernel" | tee $OUT/plan_sweep_large_prefetch_s23_run2.txt
cp /tmp/ps/plan_sweep.json $OUT/plan_sweep_large_prefetch_s23_run2.json
date +%T
