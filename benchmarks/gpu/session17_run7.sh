#!/usr/bin/env bash
# GPU session 17, run 7: the census of the 3 tile classes that step-ahead loads for 256 experts in the MEDIUM class
# made (flat, four lanes, K = 9: lists of 16), chosen by constexprs and by run 3's fingerprints.
set -o pipefail
source benchmarks/gpu/setup.sh
R=benchmarks/results
date +%T
timeout 200 python3 benchmarks/probes/plan_census.py --only flat --where LANES=4 --where PREFETCH=True \
  --skip $R/plan_census_*s17*.txt --jobs 3 --verbose > $OUT/plan_census_flat_medium_256_v14_s17_run7.txt 2>&1
f=$OUT/plan_census_flat_medium_256_v14_s17_run7.txt; echo "== $f: $(grep -c '^ok' $f) ok, $(grep -c '^FAILED' $f) failed"
cat $f | tail -8
date +%T
