#!/usr/bin/env bash
# GPU session 14, run 4: the census's last quarter of the two-pass grouped tile classes, and all the two-pass
# classes first met from 16384 tokens (session 13's run was cut after 135 of 182), with kernel v12.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 220 python3 benchmarks/probes/plan_census.py --only two-pass --stride 4 --offset 3 --jobs 15 --verbose \
  > $OUT/census_twopass_offset3.txt 2>&1
date +%T
timeout 200 python3 benchmarks/probes/plan_census.py --only two-pass --plans huge --jobs 15 --verbose \
  > $OUT/census_huge_twopass.txt 2>&1
date +%T
for f in $OUT/census_*.txt; do echo "== $f: $(grep -c '^ok' $f) ok, $(grep -c '^FAILED' $f) failed"; grep -E "^FAILED|Error" $f | head -10; done
