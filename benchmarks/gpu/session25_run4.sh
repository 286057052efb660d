#!/usr/bin/env bash
# GPU session 25, run 4 (ran at commit aee2d1f, whose kernel and plan_sweep.py have the depth; reverted after it):
# PREFETCH as a depth (each step's logits read D steps ahead), against the rule (one step ahead where it has step-ahead
# loads) and v23's kernel on the rule's tile (the same code: the same-arm check). Needs v23's kernel module in .ab/
# (carried): git show 78b3590:src/moe_routing/kernels/_bitonic.py > .ab/v23_bitonic.py. Counted first (sm_90 SASS here):
# the lane-per-row tile of 256 / 8 names 72 registers with one step ahead, 79 with two, one wave at 65536 tokens either
# way. Prediction: the lane-per-row tiles (128 / 256 at 65536, 128 at 32768) 2-6% faster with two steps ahead (long-
# scoreboard stalls on the steps' loads were their first stall, v9 / v12 profiles); three no better than two; the
# two-lane tiles (384 / 512 at 65536, 256 at 32768) 0-4%; the four-lane tiles at 8192 (118-126 registers) slower.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 500 python3 benchmarks/probes/plan_sweep.py --ab .ab/v23_bitonic.py --huge --tokens 65536 32768 8192 \
  --experts 256 128 384 512 --prefetch-depth 1 2 3 --rounds 3 --jobs 15 --budget-s 300 --out $OUT 2>&1 \
  | grep -v "^\s*$" | tee $OUT/plan_sweep_depth_s25_run4.txt
date +%T
