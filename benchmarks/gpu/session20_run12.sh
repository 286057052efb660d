#!/usr/bin/env bash
# GPU session 20, run 12: the float32 census's next part with the device time left (NOTES "What is left": 1892
# classes, only v16's and v19's run so far), one process per core; its "ok" lines let later runs --skip them.
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
date +%T
( s=$(date +%s); timeout 170 python3 benchmarks/probes/plan_census.py --float32 --jobs 15 \
    --skip $R/plan_census_*.txt > $OUT/plan_census_float32_v19_s20_run12.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_float32_v19_s20_run12.txt )
grep -v "^ok" $OUT/plan_census_float32_v19_s20_run12.txt | tail -20; grep -c "^ok" $OUT/plan_census_float32_v19_s20_run12.txt
date +%T
