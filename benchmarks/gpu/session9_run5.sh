#!/usr/bin/env bash
# GPU session 9, run 5: tiles for 256/8 at T = 8192 (v7's four-lane tile measured +1.5% against v6's
# kernel there), then the kernel test files with v7's final rule in full (run 4's were stopped by its
# timeout before the last test).
#   mkdir -p build && git show 0b19d2e:src/moe_routing/kernels/_bitonic.py > build/bitonic_v6.py
set -o pipefail
export PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$PWD/build/triton-cache
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
sweep="python3 benchmarks/probes/plan_sweep.py --ab build/bitonic_v6.py"
tiles=(--tokens 8192 --experts 256 --tile "L4 R4 W1 G4" --tile "L8 R4 W1 G4" --tile "L4 R8 W2 G4"
       --tile "L4 R16 W2 G4" --tile "L8 R8 W2 G4")
for i in $(seq 0 7); do $sweep "${tiles[@]}" --warm $i/8 --budget-s 1e9 > /dev/null 2>&1 & done; wait
mkdir -p $OUT/ab
timeout 80 $sweep "${tiles[@]}" --budget-s 70 --out $OUT/ab 2>&1 | grep "256 / 8 / 1 of 1" | tail -12
date +%T
timeout 360 python3 -m pytest -q -n 14 -p no:cacheprovider tests/test_grouped_kernel.py tests/test_plans.py \
  tests/test_window_keys.py tests/test_edge_cases.py 2>&1 | tail -4
date +%T
