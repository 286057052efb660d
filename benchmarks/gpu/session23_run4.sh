#!/usr/bin/env bash
# GPU session 23, run 4. (1) Rows kernel v22's LARGE_12K rule left as they were, unmeasured: 160 / 192 experts
# (sigmoid) and softmax rows of 224-512 experts at 12288 / 16383 tokens, the rule against its tile with
# step-ahead loads switched. Prediction: 160 / 192 like 224 (equal at 12288, faster at 16383); softmax unknown.
# (2) The float32 census's remaining classes (338 after run 3).
set -o pipefail
source benchmarks/gpu/setup.sh
git show f264abe:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v21.py  # v21 (the tree's kernel)
mkdir -p /tmp/ps
date +%T
timeout 100 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v21.py --huge --tokens 12288 16383 \
  --experts 160 192 --rounds 3 --jobs 14 --budget-s 70 --out /tmp/ps --prefetch-arms \
  2>&1 | grep -v "does not apply\|baseline kernel" | tee $OUT/plan_sweep_v22_large12k_more_s23_run4.txt
timeout 100 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v21.py --huge --softmax --tokens 12288 16383 \
  --experts 224 256 512 --rounds 3 --jobs 14 --budget-s 70 --out /tmp/ps --prefetch-arms \
  2>&1 | grep -v "does not apply\|baseline kernel" | tee -a $OUT/plan_sweep_v22_large12k_more_s23_run4.txt
date +%T
( s=$(date +%s); timeout 330 python3 benchmarks/probes/plan_census.py --float32 --jobs 15 \
    --skip benchmarks/results/plan_census_*.txt > $OUT/plan_census_float32_v22_s23_run4.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_float32_v22_s23_run4.txt )
grep "FAILED\|failed\|rc=" $OUT/plan_census_float32_v22_s23_run4.txt | grep -v " 0 failed"; grep -c "^ok" $OUT/plan_census_float32_v22_s23_run4.txt
date +%T
