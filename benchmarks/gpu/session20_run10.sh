#!/usr/bin/env bash
# GPU session 20, run 10: the rule with v19's rounds in the SMALL class for rows of 128 experts and more (runs
# 8-9 timed the rounds tile as "L8 R1 W1 rounds"; the rule's plan is the LATENCY class's, L16 R1 W1: the same
# code but for the exact redo's lanes), against v18's kernel on the rule's tile, at the class's ends and middle.
# Prediction: runs 8-9's figures (256 / 8 2.10 / 2.48 / 3.42 us at 257 / 1024 / 2047 tokens).
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD~3:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v18.py
date +%T
timeout 300 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v18.py --huge --tokens 257 1024 2047 \
  --experts 128 160 256 384 512 --rounds 3 --jobs 14 --budget-s 220 --out $OUT 2>&1 \
  | grep -v "does not apply\|prefetch=" | tee $OUT/plan_sweep_v19_small_s20_run10.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v19_small_s20_run10.json
date +%T
