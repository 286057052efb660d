#!/usr/bin/env bash
# GPU session 16, run 2: run 1's candidate (each step's bias read per thread on the lane-per-row word tiles) was no
# faster on the rule's tiles (flat 256 / 8 at 65536 tokens 22.92 against v12's 22.78; 128 / 8 14.74 against 14.30;
# grouped, capped at 128 registers, 31.54 against 27.58: spills), but with step-ahead loads it timed 22.17 (256 /
# 8, 65536) and 9.72 (128 / 8, 32768: v12 10.27) — against v12 *without* them. This run times both kernels with
# and without step-ahead loads on the same tiles, 5 interleaved rounds: is the gain the bias's or the loads'?
# Prediction: with step-ahead loads the exchange is on each step's path (its LDG is issued and used within the
# step while the logits are already there), so the candidate gains over v12 only with them: 2-5% at 256 / 8 and
# 128 / 8; without them equal.
# Run at commit 58656c1's kernel (the candidate re-applied).
set -o pipefail
source benchmarks/gpu/setup.sh
git show cdc3f15:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v12.py
date +%T
timeout 420 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v12.py --huge --prefetch-arms \
  --tokens 65536 49152 32768 --experts 256 128 192 --rounds 5 --tile "L1 R32 W1 G4 P1 words prefetch" \
  --jobs 12 --out $OUT 2>&1 | grep -v "does not apply" | tee $OUT/sweep_bias_loads_prefetch.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v13_bias_loads_prefetch_s16_run2.json
date +%T
