#!/usr/bin/env bash
# GPU session 6, run 3: the kernel test files on the H200 with the final code (run 2's whole-suite run
# was cut by its timeout at ~92%, every test that ran had passed).
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 420 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_grouped_kernel.py tests/test_plans.py \
  tests/test_groups.py tests/test_edge_cases.py tests/test_window_keys.py tests/test_invariance.py \
  tests/test_large_batches.py tests/test_matrix.py tests/test_properties.py tests/test_graphs_and_compile.py \
  tests/test_dispatch.py 2>&1 | tail -8 | tee $OUT/tests.log
