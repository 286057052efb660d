#!/usr/bin/env bash
# GPU session 23, run 3: kernel v22's rule (LARGE_12K: 12288-16383 tokens, sigmoid rows of 224 / 256 / 512 experts
# and 256 grouped without step-ahead loads on the four-lane tile). Prediction from run 2: 2-5% faster than the
# old rule ("rule's tile, prefetch=1") at 12288-16383 for those rows; 10240 (LARGE) unchanged. Then the census:
# every bf16 class no run has passed (the 16 new "large 12k" classes and the 18 "medium 3k" ones), and the float32
# census's remaining classes with the time left.
set -o pipefail
source benchmarks/gpu/setup.sh
git show f264abe:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v21.py  # v21 (the tree's kernel)
mkdir -p /tmp/ps
date +%T
timeout 170 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v21.py --huge --tokens 12288 16383 10240 \
  --experts 256 512 224 --rounds 3 --jobs 14 --budget-s 120 --out /tmp/ps --prefetch-arms \
  2>&1 | grep -v "does not apply\|baseline kernel" | tee $OUT/plan_sweep_v22_large12k_s23_run3.txt
cp /tmp/ps/plan_sweep.json $OUT/plan_sweep_v22_large12k_s23_run3.json
date +%T
( s=$(date +%s); timeout 170 python3 benchmarks/probes/plan_census.py --jobs 15 \
    --skip benchmarks/results/plan_census_*.txt > $OUT/plan_census_v22_s23_run3.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_v22_s23_run3.txt )
grep "FAILED\|failed\|rc=" $OUT/plan_census_v22_s23_run3.txt; grep -c "^ok" $OUT/plan_census_v22_s23_run3.txt
date +%T
( s=$(date +%s); timeout 220 python3 benchmarks/probes/plan_census.py --float32 --jobs 15 \
    --skip benchmarks/results/plan_census_*.txt > $OUT/plan_census_float32_v22_s23_run3.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_float32_v22_s23_run3.txt )
grep "FAILED\|failed\|rc=" $OUT/plan_census_float32_v22_s23_run3.txt; grep -c "^ok" $OUT/plan_census_float32_v22_s23_run3.txt
date +%T
