#!/usr/bin/env bash
# GPU session 10, run 3: run 2 again after its compile fix (softmax logit keys: Triton needs one return
# type per function) — the kernel test files, kernel v1 against the bitonic kernel for softmax, then the
# targets table with every arm (the straightforward Triton peer included).
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 280 python3 -m pytest -q -n 14 -p no:cacheprovider tests/test_plans.py tests/test_edge_cases.py \
  tests/test_matrix.py tests/test_invariance.py tests/test_large_batches.py tests/test_groups.py \
  tests/test_host_launch.py tests/test_properties.py tests/test_graphs_and_compile.py 2>&1 | tail -6
date +%T
mkdir -p $OUT/softmax $OUT/targets
timeout 110 python3 benchmarks/probes/softmax_ab.py --experts 64 128 256 512 --out $OUT/softmax 2>&1 | tail -17
date +%T
ARMS="moe_routing.route(out=),moe_routing.route(out=) via Python,moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 150 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
date +%T
