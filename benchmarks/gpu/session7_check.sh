#!/usr/bin/env bash
# GPU session 7, run 6: the final rule (word loads with step-ahead loads for the flat lane-per-row tile):
# the plan tests on the GPU, then the flat T = 65536 comparison again.
# v4's kernel is not in the tree: before the run, on the development machine,
#   mkdir -p build && git show 09d5d74:src/moe_routing/kernels/_bitonic.py > build/bitonic_v4.py
# and carry build/ to the GPU machine.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 100 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_plans.py 2>&1 | tail -2
mkdir -p $OUT/ab
timeout 60 python3 benchmarks/probes/plan_sweep.py --ab build/bitonic_v4.py --tokens 65536 --budget-s 1 --out $OUT/ab 2>&1 | tail -8
