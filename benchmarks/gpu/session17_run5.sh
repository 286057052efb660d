#!/usr/bin/env bash
# GPU session 17, run 5: the 4 two-pass census classes no run has passed (2 HUGE 64-group classes whose compile
# outlasted run 3's 330 s, 512/9 16:4 MEDIUM, 640/17 64:8 SMALL), one class per process, a longer limit.
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
date +%T
timeout 480 python3 benchmarks/probes/plan_census.py --skip $R/plan_census_*.txt --jobs 4 --verbose \
  > $OUT/plan_census_rest2_v14_s17_run5.txt 2>&1
f=$OUT/plan_census_rest2_v14_s17_run5.txt; echo "== $f: $(grep -c '^ok' $f) ok, $(grep -c '^FAILED' $f) failed"
cat $f | tail -12
date +%T
