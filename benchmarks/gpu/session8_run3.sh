#!/usr/bin/env bash
# GPU session 8, run 3: kernel v6's rule. Grouped shapes first, largest T first (runs 1 and 2 ran out of
# their budgets before grouped T = 65536): the rule against its tile with step-ahead loads flipped,
# without word loads, in two passes, and v5's kernel (build/bitonic_v5.py), interleaved. Then the kernel
# test files (every plan of the rule, and each one-pass plan's two-pass twin) and the targets table.
#   mkdir -p build && git show da2bbbe:src/moe_routing/kernels/_bitonic.py > build/bitonic_v5.py
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
mkdir -p $OUT/ab $OUT/targets
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab build/bitonic_v5.py --grouped --tokens 65536 8192 2048 \
  --budget-s 100 --out $OUT/ab 2>&1 | tail -30
timeout 240 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_grouped_kernel.py tests/test_plans.py \
  tests/test_window_keys.py tests/test_edge_cases.py 2>&1 | tail -4
ARMS="moe_routing.route(out=),moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 150 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
