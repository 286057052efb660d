#!/usr/bin/env bash
# GPU session 26, run 4 (the commit that adds this script): kernel v25 as shipped. The census of the classes no run has
# passed (3: the four-lane plans with CHECKED_STREAM off), the new tests on the H200 (67 tokens), and the rule's plans
# against the same plans with the stream's check back on. Prediction: none fails; run 3's gains (256 / 8 at 8192 tokens
# ~6.4 us against ~6.8, 160 / 8 ~9%, 224 / 8 ~6%, 512 / 8 ~3%, 256 / 8 at 4096 / 12288 ~5%) within drift of run 3.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
( s=$(date +%s); timeout 100 python3 benchmarks/probes/plan_census.py --jobs 3 \
    --skip benchmarks/results/plan_census_*.txt > $OUT/plan_census_v25_s26_run4.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_v25_s26_run4.txt )
grep -c "^ok" $OUT/plan_census_v25_s26_run4.txt; grep "FAILED\|rc=" $OUT/plan_census_v25_s26_run4.txt | head
date +%T
(cd benchmarks/probes && timeout 130 python3 constexpr_ab.py --jobs 6 --arm "checked=CHECKED_STREAM:1" \
  --shape 256/8/8192 256/8/4096 256/8/12288 160/8/8192 224/8/8192 512/8/8192 2>&1 | tee $OUT/constexpr_ab_s26_run4.txt)
date +%T
timeout 110 python3 -m pytest -q -x -n 8 -p no:cacheprovider tests/test_plans.py -k "infinite or unchecked" 2>&1 \
  | tail -3 | tee $OUT/pytest_v25_s26_run4.txt
date +%T
