#!/usr/bin/env bash
# GPU session 10, run 2: softmax on the bitonic kernel (logit keys) — the kernel test files on the H200,
# then kernel v1 against the bitonic kernel side by side (benchmarks/probes/softmax_ab.py).
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 330 python3 -m pytest -q -n 14 -p no:cacheprovider tests/test_plans.py tests/test_edge_cases.py \
  tests/test_matrix.py tests/test_invariance.py tests/test_large_batches.py tests/test_groups.py \
  tests/test_host_launch.py tests/test_properties.py tests/test_graphs_and_compile.py 2>&1 | tail -6
date +%T
mkdir -p $OUT/softmax
timeout 150 python3 benchmarks/probes/softmax_ab.py --experts 64 128 256 512 --out $OUT/softmax 2>&1 | tail -20
timeout 60 python3 benchmarks/probes/softmax_ab.py --experts 128 --tokens 1 65536 --dtype fp32 2>&1 | tail -3
date +%T
