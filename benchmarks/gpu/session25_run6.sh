#!/usr/bin/env bash
# GPU session 25, run 6 (ran at commit 7ae2466, whose rule also had the grouped rows; d57ca3e took them out): the
# candidate rule (token class HUGE_42K at 42240; from 32768 to 42239 tokens step-ahead loads for sigmoid rows with K <=
# 8 on the two-lane word tile, 257-512 experts flat, and on the grouped lane-per-row one-pass tile) against the same
# tiles without them (v23's rule), at both sides of the new boundary; then the census of the tile classes no run has
# passed (8: the grouped one-pass plan with step-ahead loads and its two-pass twin). Prediction: 512 / 8 3-5% faster at
# 32768-36864, 1-3% at 42239; 384 / 8 1-2%; grouped 1-2%; at 42240 the rule as v23's (the toggle arm slower); the census
# passes. Needs v23's kernel module in .ab/ (carried; git show 78b3590:src/moe_routing/kernels/_bitonic.py >
# .ab/v23_bitonic.py): the baseline FILE that plan_sweep --ab requires, whose arms --no-baseline leaves out.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 280 python3 benchmarks/probes/plan_sweep.py --ab .ab/v23_bitonic.py --no-baseline --huge --prefetch-arms \
  --tokens 32768 36864 42239 42240 --experts 384 512 256 --rounds 3 --jobs 15 --budget-s 170 --out $OUT 2>&1 \
  | grep -v "^\s*$" | tee $OUT/plan_sweep_v24_s25_run6.txt
cp $OUT/plan_sweep.json $OUT/plan_sweep_v24_s25_run6.json
date +%T
( s=$(date +%s); timeout 150 python3 benchmarks/probes/plan_census.py --jobs 8 \
    --skip benchmarks/results/plan_census_*.txt > $OUT/plan_census_v24_s25_run6.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_v24_s25_run6.txt )
grep "FAILED\|failed\|rc=\|tile classes" $OUT/plan_census_v24_s25_run6.txt | head; grep -c "^ok" $OUT/plan_census_v24_s25_run6.txt
date +%T
