#!/usr/bin/env bash
# GPU session 5, run 1: kernel v3 (window keys, run filter) tile sweep next to v2's exact keys, then the
# exactness tests that cover every plan. Output under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
timeout 330 python3 benchmarks/probes/plan_sweep.py --out $OUT --budget-s 270 2>&1 | tee $OUT/sweep.log | grep -v "^ *$" | tail -120
timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/test_plans.py tests/test_edge_cases.py tests/test_invariance.py tests/test_matrix.py 2>&1 | tail -6 | tee $OUT/tests.log
