#!/usr/bin/env bash
# GPU session 11, run 4: the tests of what v9 changed (lists of 32 keys; sigmoid without bias beyond 512
# experts), naming any failure as it happens (runs 2 and 3 each saw one failure, cut before its name).
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 230 python3 -m pytest -v -rf --tb=short -n 14 -p no:cacheprovider -W ignore \
  tests/test_matrix.py tests/test_plans.py -k "1021 or 1024x32 or 256-32 or 512-20 or 200-17 or 1024-24 or 256-8-1-1-sigmoid-False" \
  > $OUT/tests.log 2>&1
grep -E "FAILED|passed|failed" $OUT/tests.log | tail -20
grep -n -A30 "^_____" $OUT/tests.log | head -80
date +%T
