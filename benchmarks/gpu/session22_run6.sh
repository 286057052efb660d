#!/usr/bin/env bash
# GPU session 22, run 6: the device time left goes to the float32 census (NOTES "What is left": 1204 classes no
# recorded run has passed; `plan_census.py --count --float32 --skip benchmarks/results/plan_census_*` before this run).
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
( s=$(date +%s); timeout 290 python3 benchmarks/probes/plan_census.py --float32 --jobs 15 \
    --skip benchmarks/results/plan_census_* > $OUT/plan_census_float32_v21_s22_run6.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s (float32)" >> $OUT/plan_census_float32_v21_s22_run6.txt )
grep "failed\|rc=\|FAIL" $OUT/plan_census_float32_v21_s22_run6.txt | grep -v " 0 failed" | tail; grep -c "^ok" $OUT/plan_census_float32_v21_s22_run6.txt
date +%T
