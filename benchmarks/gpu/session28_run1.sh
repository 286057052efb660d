#!/usr/bin/env bash
# GPU session 28, run 1 (at the commit that adds this script): programmatic dependent launch on the rule's plans
# (pdl_probe.py: the tree's kernel against a copy that waits on the previous grid first, launched with the PDL
# attribute, with and without an early trigger; the empty kernel both ways); then the census classes of STORE_FIRST
# that session 27's run 4 left (14 bf16, 4 float32).
# Prediction: the empty kernel 0.74 -> 0.4-0.6 µs with PDL; decode rows (T = 1 / 128) 0.2-0.5 µs faster with the wait
# alone, more with the trigger; 8192 / 65536 tokens within 0.5 µs either way; the census passes.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
(cd benchmarks/probes && timeout 330 python3 pdl_probe.py 2>&1 | tee $OUT/pdl_probe_s28_run1.txt)
date +%T
(cd benchmarks/probes && W="--where STORE_FIRST=True"; \
  timeout 120 python3 plan_census.py --jobs 15 $W --skip ../results/plan_census_v26sf_s27_run4.txt > $OUT/plan_census_v26sf_s28_run1.txt 2>&1; echo "rc=$?" >> $OUT/plan_census_v26sf_s28_run1.txt; \
  timeout 90 python3 plan_census.py --jobs 15 --float32 $W --skip ../results/plan_census_float32_v26sf_s27_run4.txt > $OUT/plan_census_float32_v26sf_s28_run1.txt 2>&1; echo "rc=$?" >> $OUT/plan_census_float32_v26sf_s28_run1.txt)
grep -c "^ok" $OUT/plan_census_*v26sf_s28_run1.txt; grep -h "FAILED\|rc=" $OUT/plan_census_*v26sf_s28_run1.txt | head
date +%T
