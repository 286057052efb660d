#!/usr/bin/env bash
# GPU session 7, run 4: the final v5 rule (step-ahead loads where measured faster, the first step's
# logits loaded before the bias window) against its prefetch-flipped tile and v4's kernel
# (build/bitonic_v4.py), interleaved; the kernel test files; the targets table.
# v4's kernel is not in the tree: before the run, on the development machine,
#   mkdir -p build && git show 09d5d74:src/moe_routing/kernels/_bitonic.py > build/bitonic_v4.py
# and carry build/ to the GPU machine.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
mkdir -p $OUT/ab $OUT/targets
timeout 200 python3 benchmarks/probes/plan_sweep.py --ab build/bitonic_v4.py --budget-s 150 --out $OUT/ab 2>&1 | tail -45
timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_plans.py tests/test_grouped_kernel.py \
  tests/test_window_keys.py tests/test_edge_cases.py tests/test_invariance.py 2>&1 | tail -3
ARMS="moe_routing.route(out=),moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 150 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
