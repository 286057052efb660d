#!/usr/bin/env bash
# GPU session 8, run 1: kernel v6 (grouped routing in one read of the row; word loads one 16-byte load
# per two words, no shuffles) against its two-pass tile and v5's kernel (build/bitonic_v5.py),
# interleaved at the target shapes; the kernel test files.
# v5's kernel is not in the tree: before the run, on the development machine,
#   mkdir -p build && git show da2bbbe:src/moe_routing/kernels/_bitonic.py > build/bitonic_v5.py
# and carry build/ to the GPU machine.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
mkdir -p $OUT/ab
timeout 260 python3 benchmarks/probes/plan_sweep.py --ab build/bitonic_v5.py --budget-s 220 --out $OUT/ab 2>&1 | tail -60
timeout 250 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_grouped_kernel.py tests/test_plans.py \
  tests/test_window_keys.py tests/test_edge_cases.py 2>&1 | tail -4
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
