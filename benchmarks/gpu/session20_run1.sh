#!/usr/bin/env bash
# GPU session 20, run 1. (1) Decode probe: K rounds of one 32-bit warp reduction (REDUX) on the window keys
# against the rule's kernel at T = 1 and 128 (every row's ids checked against the rule first). Prediction:
# 256 / 8 at T = 1 ~1.6-1.8 us against 2.16 if REDUX's latency is ~30 cycles (8 rounds of it and ~5 dependent
# ALU steps, instead of a chunk sort and four halving merges); int window (min/max of the bias by REDUX of
# ordered bits instead of 2 x 5 shuffles) ~0.05 us less. (2) The census's 208 classes with 32 groups (v18).
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
date +%T
timeout 200 python3 benchmarks/probes/decode_rounds_probe.py --rounds 5 --out $OUT 2>&1 | tail -14
date +%T
( s=$(date +%s); timeout 330 python3 benchmarks/probes/plan_census.py --where BLOCK_GROUPS=32 --jobs 15 \
    --skip $R/plan_census_*.txt > $OUT/plan_census_32_groups_v18_s20_run1.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_32_groups_v18_s20_run1.txt )
grep -v "^ok" $OUT/plan_census_32_groups_v18_s20_run1.txt | tail -20
grep -c "^ok" $OUT/plan_census_32_groups_v18_s20_run1.txt
date +%T
