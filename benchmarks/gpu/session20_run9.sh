#!/usr/bin/env bash
# GPU session 20, run 9: run 8 found v19's rounds tile (one row a warp) faster than the rule's tiles at 1024
# tokens (SMALL: 2-20%) and at 2048 (MEDIUM) for 256-512 experts and grouped 256 (7-21%), slower at 2048 for 64
# and 128 experts and everywhere from 8192. Rules change per token class, so the classes' ends: 257 and 2047
# (SMALL), 3072 and 4095 (MEDIUM). Prediction: SMALL faster at both ends; MEDIUM 256-512 still faster at 3072,
# about equal at 4095 (run 8's rounds tile grows ~0.67 ns a row at 256 / 8).
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD~3:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v18.py
date +%T
timeout 330 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v18.py --huge --tokens 257 2047 3072 4095 \
  --experts 64 128 256 384 512 --tile "L8 R1 W1 rounds" --rounds 3 --jobs 14 --budget-s 250 --out $OUT 2>&1 \
  | grep -v "does not apply\|prefetch=" | tee $OUT/plan_sweep_rounds_tile_class_ends_s20_run9.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_rounds_tile_class_ends_s20_run9.json
date +%T
