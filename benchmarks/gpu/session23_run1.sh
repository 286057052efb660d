#!/usr/bin/env bash
# Ran at commit fabbafd (the looped rounds tile); reverted in dbe6d62, after which the R > 1 rounds tiles below do
# not apply (`git checkout fabbafd` to reproduce).
# GPU session 23, run 1: kernel v22 candidate -- the rounds tile (one warp) looping over R rows, the bias and its
# window once a program, each row's logits read while the row before it is selected. Count (sm_90 SASS, 256 / 8):
# 416 instructions a row in the loop against 483 for the one-row plan; 84 registers (53 one-row). At 8192 tokens
# the four-lane tile (the rule, 6.7 us) waits on latency (1024 warps, ~8 an SM); v19's one-row rounds tile was
# 7.39 there (8192 one-warp programs: two waves at 32 blocks an SM). Prediction, 256 / 8 at 8192: R2 ~6.0, R4 ~5.5,
# R8 ~6 (1024 programs: latency again); at 4096 R2 below the rule's ~4.4; at 16383 R4 below the rule's.
set -o pipefail
source benchmarks/gpu/setup.sh
git show f264abe:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v21.py  # v21
mkdir -p /tmp/ps
date +%T
timeout 330 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v21.py --huge --tokens 8192 4096 16383 \
  --experts 256 512 384 128 --rounds 3 --jobs 14 --budget-s 200 --out /tmp/ps \
  --tile "L16 R1 W1 prefetch rounds handover" --tile "L16 R2 W1 prefetch rounds handover" \
  --tile "L16 R4 W1 prefetch rounds handover" --tile "L16 R8 W1 prefetch rounds handover" \
  --tile "L16 R4 W1 prefetch rounds" 2>&1 | grep -v "does not apply" | tee $OUT/plan_sweep_v22_rows_s23_run1.txt
cp /tmp/ps/plan_sweep.json $OUT/plan_sweep_v22_rows_s23_run1.json
date +%T
