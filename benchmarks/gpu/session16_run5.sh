#!/usr/bin/env bash
# GPU session 16, run 5: the rest of the two-pass census that run 4's timeout cut (kernel v13; --skip every recorded
# run's "ok" lines, by fingerprint where they have one).
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
date +%T
timeout 330 python3 benchmarks/probes/plan_census.py --only two-pass --skip $R/plan_census_*.txt --jobs 15 --verbose \
  > $OUT/census_twopass_rest2_v13.txt 2>&1
for f in $OUT/census_*.txt; do echo "== $f: $(grep -c '^ok' $f) ok, $(grep -c '^FAILED' $f) failed"; grep -E "^FAILED|Error" $f | head -10; done
date +%T
