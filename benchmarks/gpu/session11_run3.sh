#!/usr/bin/env bash
# GPU session 11, run 3: run 2's kernel test files again, stopping at the first failure and naming it (run 2's
# run of them was cut by its timeout after one failure, unnamed).
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 300 python3 -m pytest -q -rf --tb=short --maxfail=1 -n 14 -p no:cacheprovider tests/test_matrix.py \
  tests/test_plans.py tests/test_edge_cases.py tests/test_invariance.py tests/test_groups.py \
  tests/test_large_batches.py 2>&1 | tail -60
date +%T
