#!/usr/bin/env bash
# GPU validation (issue 2): the test suite with GPU-sized batches, compute-sanitizer, the check sweep.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
start=$(date +%s)
python3 -m pytest -q -x -p no:cacheprovider tests 2>&1 | tee $OUT/pytest_gpu.log | tail -15
echo "pytest wall: $(( $(date +%s) - start )) s"
compute-sanitizer --tool memcheck --leak-check no --print-limit 20 python3 benchmarks/gpu/sanitize_cases.py 2>&1 | tee $OUT/sanitizer.log | tail -20
moe-routing check 2>&1 | tee $OUT/check_gpu.log
