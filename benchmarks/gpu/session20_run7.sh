#!/usr/bin/env bash
# GPU session 20, run 7: v19's decode selection, K rounds of REDUX (the rule since run 6) against a candidate:
# the threads' sorted lists merged by five butterfly halvings (tl.flip of a two-lane axis: shuffles; a bitonic
# merge in registers per level), then every thread holds the row's top 8 ("warp merge"). Static: +80 SHFL and
# ~+500 instructions at 256 / 8. Prediction from run 6 (128 / 1 at 1.51 us: ~0.04 us a round): rounds cost
# ~0.3 us at K = 8; five halvings at ~100 instructions each on one warp ~0.25 us: equal to 0.05 us faster at
# K = 8, slower at 64 / 6 (lists padded from 2 to 8). Also the one census class left (48/1 2:1 no bias).
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
git show HEAD~1:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v18.py
date +%T
timeout 200 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v18.py --tokens 1 128 --rounds 5 --jobs 12 \
  --out $OUT 2>&1 | grep -v " L[0-9]* R[0-9]* W1 \|prefetch=" | tee $OUT/plan_sweep_v19_warp_merge_s20_run7.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_v19_warp_merge_s20_run7.json
date +%T
timeout 120 python3 benchmarks/probes/plan_census.py --where ROUNDS=True --jobs 2 \
  --skip $R/plan_census_rounds_v19_s20_run5.txt $R/plan_census_rounds_v19_s20_run6.txt 2>&1 \
  | tee $OUT/plan_census_rounds_v19_s20_run7.txt | tail -3
date +%T
