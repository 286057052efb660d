#!/usr/bin/env bash
# GPU session 26, run 5 (the commit that adds this script): the census of kernel v25's new classes themselves. Run 4's
# --skip counted two of the three as passed by label only (pre-session-16 lines name the same calls), so it ran other
# classes; --where CHECKED_STREAM=False takes exactly the plans the change made. Prediction: 3 classes, none fails.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
( s=$(date +%s); timeout 90 python3 benchmarks/probes/plan_census.py --jobs 3 --where CHECKED_STREAM=False \
    > $OUT/plan_census_v25_unchecked_s26_run5.txt 2>&1; \
  echo "rc=$? after $(( $(date +%s) - s )) s" >> $OUT/plan_census_v25_unchecked_s26_run5.txt )
cat $OUT/plan_census_v25_unchecked_s26_run5.txt
date +%T
