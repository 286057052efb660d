#!/usr/bin/env bash
# GPU session 13, run 6: the census (plan_census.py) of every flat and one-pass tile class the v11 rule chooses
# from 16384 tokens (the classes HUGE, HUGE_32K, HUGE_64K; the register-capped tile is a class of its own), then
# as many of the two-pass classes from 16384 tokens as the time allows.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 300 python3 benchmarks/probes/plan_census.py --only flat --only one-pass --plans huge --jobs 15 --verbose \
  > $OUT/census_huge_flat_onepass.txt 2>&1
date +%T
timeout 100 python3 benchmarks/probes/plan_census.py --only two-pass --plans huge --jobs 15 --verbose \
  > $OUT/census_huge_twopass.txt 2>&1
date +%T
for f in $OUT/census_*.txt; do echo "== $f: $(grep -c '^ok' $f) ok, $(grep -c '^FAILED' $f) failed"; grep -E "^FAILED|Error" $f | head -20; done
