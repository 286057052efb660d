#!/usr/bin/env bash
# GPU session 17, run 3: the census of the tile classes kernel v14 touched (flat four-lane tiles with step-ahead
# loads: 12 new classes of 128 experts among 102, all run again, chosen by their constexprs), then what is left of
# the two-pass census (6 classes, two of them HUGE 64-group classes whose compile took more than 120 s: one class
# per process here).
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
date +%T
timeout 200 python3 benchmarks/probes/plan_census.py --only flat --where LANES=4 --where PREFETCH=True --jobs 15 \
  --verbose > $OUT/plan_census_flat_four_lanes_prefetch_v14_s17_run3.txt 2>&1
date +%T
timeout 330 python3 benchmarks/probes/plan_census.py --skip $R/plan_census_*.txt $OUT/plan_census_*.txt --jobs 6 \
  --verbose > $OUT/plan_census_rest_v14_s17_run3.txt 2>&1
for f in $OUT/plan_census_*.txt; do echo "== $f: $(grep -c '^ok' $f) ok, $(grep -c '^FAILED' $f) failed"; grep -E "^FAILED|Error" $f | head -10; done
date +%T
