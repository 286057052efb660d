#!/usr/bin/env bash
# GPU session 20, run 8: v19's rounds tile (one row on one warp) beyond decode sizes. Today the rule gives it
# T <= 256 only; from 257 tokens one-row tiles (SMALL, long rows) and then several rows a warp (MEDIUM up). Count:
# the rounds tile executes ~450 warp instructions a row at 256 / 8 against ~185 on the four-lane tile, so it
# can only pay where the four-lane tile waits on latency (T = 8192: 6.74 us, issue well under half); with 32
# one-warp programs an SM, 8192 rows x 450 / (132 x 4 per cycle) ~ 3.5 us if issue-bound. Prediction: faster at
# 1024 (same tile as the rule's, 10%), 2048 and 8192 unclear (4-6 us at 8192), slower at 16384.
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD~3:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v18.py
date +%T
timeout 330 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v18.py --huge --tokens 1024 2048 8192 16384 \
  --experts 64 128 256 384 512 --tile "L8 R1 W1 rounds" --rounds 3 --jobs 14 --budget-s 250 --out $OUT 2>&1 \
  | grep -v "does not apply" | tee $OUT/plan_sweep_rounds_tile_prefill_s20_run8.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_rounds_tile_prefill_s20_run8.json
date +%T
