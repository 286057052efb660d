#!/usr/bin/env bash
# GPU session 20, run 5: the census of kernel v19's new tile classes (ROUNDS: decode plans, 119 bf16 and 112
# float32 classes), every class's first shape checked against the reference on the H200 (v10 found a
# reshape that only the GPU got wrong; v19 reshapes, permutes and joins registers in _rounds_load and _columns).
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
( s=$(date +%s); timeout 280 python3 benchmarks/probes/plan_census.py --where ROUNDS=True --jobs 15 \
    > $OUT/plan_census_rounds_v19_s20_run5.txt 2>&1; echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_rounds_v19_s20_run5.txt )
grep -v "^ok" $OUT/plan_census_rounds_v19_s20_run5.txt | tail -20; grep -c "^ok" $OUT/plan_census_rounds_v19_s20_run5.txt
date +%T
( s=$(date +%s); timeout 250 python3 benchmarks/probes/plan_census.py --float32 --where ROUNDS=True --jobs 15 \
    > $OUT/plan_census_float32_rounds_v19_s20_run5.txt 2>&1; echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_float32_rounds_v19_s20_run5.txt )
grep -v "^ok" $OUT/plan_census_float32_rounds_v19_s20_run5.txt | tail -20; grep -c "^ok" $OUT/plan_census_float32_rounds_v19_s20_run5.txt
date +%T
