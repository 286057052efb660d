#!/usr/bin/env bash
# GPU session 13, run 1: the tile-class census (benchmarks/probes/plan_census.py) for what session 12 left:
# every class of kernel v1 ("rounds": its grouped stage reshapes [ROWS, E] into groups and reduces, the
# pattern v10 found miscompiled in the bitonic kernel) and a second quarter of the two-pass grouped classes.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 300 python3 benchmarks/probes/plan_census.py --only rounds --jobs 15 --verbose > $OUT/census_rounds.txt 2>&1
date +%T
timeout 200 python3 benchmarks/probes/plan_census.py --only two-pass --stride 4 --offset 1 --jobs 15 --verbose \
  > $OUT/census_twopass_offset1.txt 2>&1
date +%T
for f in $OUT/census_*.txt; do echo "== $f: $(grep -c '^ok' $f) ok, $(grep -c '^FAILED' $f) failed"; grep -E "^FAILED|^part|Error" $f | head -20; done
