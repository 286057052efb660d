#!/usr/bin/env bash
# GPU session 16, run 1: kernel v13 candidate — the bias of each step read by every thread of the lane-per-row
# word tiles at the same addresses (eight 16-byte loads a step, served by the L1), laid out as the step's logits,
# instead of one 4-byte load a lane spread over the warp through shared memory (STSM, a barrier, eight LDS.128 a
# step: session 15's source page). Static counts (sm_90, this tree): flat 256 / 8 at 65536 tokens 4568
# instructions against 4592, no BAR / STS / LDS left; the grouped one-pass tile capped at 128 registers spills
# more (stack 344 B against 96), uncapped (32768 tokens) none.
# Prediction: flat 256 / 8 and 128 / 8 at 32768-65536 tokens 0-5% faster (the exchange's latency mostly sits
# under the step's DRAM wait; with step-ahead loads it would not: the prefetch tile may gain more); grouped at
# 65536 (capped) slower from the spills, at 32768 (uncapped) 0-3% faster.
# A/B against v12 (cdc3f15's kernel) on the rule's tile, bits checked first; then the plans' tests on the GPU.
set -o pipefail
source benchmarks/gpu/setup.sh
git show cdc3f15:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v12.py
date +%T
timeout 330 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v12.py --huge --tokens 65536 32768 \
  --experts 256 128 --tile "L1 R32 W1 G4 P1 words prefetch" --tile "L1 R32 W1 G4 P1 words onepass" \
  --tile "L1 R32 W1 G4 P1 M128 words onepass prefetch" --jobs 10 --out $OUT 2>&1 | grep -v "does not apply" \
  | tee $OUT/sweep_bias_loads.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v13_bias_loads_s16_run1.json
date +%T
timeout 200 python3 -m pytest -q -x tests/test_plans.py -k "256-8-1-1-sigmoid-True or 256-8-8-4-sigmoid-True or word_loads or 128-4-2-1" \
  2>&1 | tail -4 | tee $OUT/tests.txt
date +%T
