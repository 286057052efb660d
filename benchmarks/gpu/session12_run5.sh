#!/usr/bin/env bash
# GPU session 12, run 5: the tile-class census on the H200 (benchmarks/probes/plan_census.py): every flat and
# one-pass grouped tile class the rule can choose, then a quarter of the two-pass grouped classes, each run
# on its own inputs and judged against float64 (a line per class in $OUT/census_*.txt).
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 250 python3 benchmarks/probes/plan_census.py --only flat --only one-pass --jobs 15 --verbose \
  > $OUT/census_flat_onepass.txt 2>&1
date +%T
timeout 150 python3 benchmarks/probes/plan_census.py --only two-pass --stride 4 --jobs 15 --verbose \
  > $OUT/census_twopass.txt 2>&1
date +%T
for f in $OUT/census_*.txt; do echo "== $f: $(grep -c '^ok' $f) ok, $(grep -c '^FAILED' $f) failed"; grep -E "^FAILED|^part|Error" $f | head -20; done
