#!/usr/bin/env bash
# GPU session 10, run 5: softmax without renormalisation on the bitonic kernel (the row's denominator in a
# second, tile-independent read) — the kernel test files, then kernel v1 against it side by side.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
mkdir -p $OUT/softmax
timeout 120 python3 benchmarks/probes/softmax_ab.py --experts 64 128 256 512 --no-renormalize --out $OUT/softmax \
  2>&1 | tail -17
date +%T
timeout 300 python3 -m pytest -q -n 14 -p no:cacheprovider tests/test_plans.py tests/test_edge_cases.py \
  tests/test_matrix.py tests/test_invariance.py tests/test_large_batches.py tests/test_groups.py 2>&1 | tail -6
date +%T
