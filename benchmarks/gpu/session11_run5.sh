#!/usr/bin/env bash
# GPU session 11, run 5: run 4's tests again after grouped calls with lists of 32 keys were moved to two passes
# (launch.one_pass_ok), and test_grouped_kernel's one-pass tests (K <= 16, unchanged).
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 200 python3 -m pytest -v -rf --tb=short -n 14 -p no:cacheprovider -W ignore \
  tests/test_matrix.py tests/test_plans.py tests/test_grouped_kernel.py \
  -k "1021 or 1024x32 or 256-32 or 512-20 or 200-17 or 1024-24 or 256-8-1-1-sigmoid-False or one_pass" \
  > $OUT/tests.log 2>&1
grep -E "FAILED|passed|failed" $OUT/tests.log | tail -20
grep -n -A30 "^_____" $OUT/tests.log | head -60
date +%T
