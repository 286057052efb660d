#!/usr/bin/env bash
# GPU session 5, run 2: v3 with the exact keys streaming unfiltered (fewer registers); a wider tile sweep;
# then the exactness tests of every plan on the GPU (the interpreter cannot run the inline-asm sigmoid).
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
timeout 290 python3 benchmarks/probes/plan_sweep.py --out $OUT --budget-s 230 2>&1 | tee $OUT/sweep.log | tail -100
timeout 250 python3 -m pytest -q -x -p no:cacheprovider tests/test_plans.py tests/test_edge_cases.py tests/test_invariance.py 2>&1 | tail -6 | tee $OUT/tests.log
