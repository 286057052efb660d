#!/usr/bin/env bash
# GPU session 3, part B: tests touched since session 2, host time, the end-to-end A/B. Output under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
python3 -m pytest -q -x -p no:cacheprovider tests/test_plans.py tests/test_graphs_and_compile.py \
  tests/test_invariance.py tests/test_errors.py tests/test_transformers_integration.py 2>&1 | tee $OUT/pytest_gpu.log | tail -3
python3 benchmarks/gpu/host_time_probe.py 2>&1 | tee $OUT/host_time.log | tail -16
moe-routing e2e --out $OUT 2>&1 | grep -v "^\[transformers\]" | tee $OUT/e2e.log | tail -16
