#!/usr/bin/env bash
# GPU session 15, run 6: the rest of runs 4 and 5's two census lines that its timeouts cut (--skip both earlier runs'
# "ok" lines). Kernel v12 (9f9e0fa's kernels).
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
date +%T
timeout 120 python3 benchmarks/probes/plan_census.py --only two-pass --stride 4 --offset 3 --jobs 15 --verbose \
  --skip $R/plan_census_twopass_offset3_v12_s14_run4.txt --skip $R/plan_census_twopass_offset3_rest_v12_s15_run4.txt --skip $R/plan_census_twopass_offset3_rest2_v12_s15_run5.txt \
  > $OUT/census_twopass_offset3_rest3.txt 2>&1
timeout 120 python3 benchmarks/probes/plan_census.py --only two-pass --plans huge --jobs 15 --verbose \
  --skip $R/plan_census_huge_twopass_v12_s14_run4.txt --skip $R/plan_census_huge_twopass_rest_v12_s15_run4.txt --skip $R/plan_census_huge_twopass_rest2_v12_s15_run5.txt \
  > $OUT/census_huge_twopass_rest3.txt 2>&1
for f in $OUT/census_*.txt; do echo "== $f: $(grep -c '^ok' $f) ok, $(grep -c '^FAILED' $f) failed"; grep -E "^FAILED|Error" $f | head -10; done
date +%T
