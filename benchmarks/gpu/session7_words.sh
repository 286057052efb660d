#!/usr/bin/env bash
# GPU session 7, run 5: 16-bit logits read as 64-bit words by the lane-per-row tile (flat, T >= 16384),
# against the same tile's plain loads and v4's kernel, interleaved at T = 65536; the plan tests (the
# word loads' first run on a GPU) and the edge cases; the targets table with the final rule.
# v4's kernel is not in the tree: before the run, on the development machine,
#   mkdir -p build && git show 09d5d74:src/moe_routing/kernels/_bitonic.py > build/bitonic_v4.py
# and carry build/ to the GPU machine.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
mkdir -p $OUT/ab $OUT/targets
timeout 150 python3 benchmarks/probes/plan_sweep.py --ab build/bitonic_v4.py --tokens 65536 8192 --budget-s 100 \
  --out $OUT/ab 2>&1 | tail -30
timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_plans.py tests/test_edge_cases.py \
  tests/test_window_keys.py 2>&1 | tail -3
ARMS="moe_routing.route(out=),moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 150 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
