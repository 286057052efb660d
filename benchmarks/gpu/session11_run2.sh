#!/usr/bin/env bash
# GPU session 11, run 2: kernel v9's rule. 32-key tiles at 2048 and 4096 tokens (the MEDIUM class); route()
# side by side with the straightforward Triton peer at K = 32 and sigmoid without bias beyond 512 experts
# (3 interleaved rounds); the kernel test files on the H200.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
mkdir -p $OUT/wide_topk_medium $OUT/v9
timeout 110 python3 benchmarks/probes/plan_sweep.py --wide-topk --tokens 2048 4096 --rounds 2 --jobs 14 \
  --out $OUT/wide_topk_medium 2>&1 | tail -20
date +%T
timeout 170 moe-routing bench --shape 1024/32 --shape 256/32 --shape 1024/8/nobias --tokens 1,128,1024,8192,65536 \
  --arms "moe_routing.route(out=),empty kernel,straightforward Triton" --out $OUT/v9 2>&1 | tail -22
date +%T
timeout 250 python3 -m pytest -q -n 14 -p no:cacheprovider tests/test_plans.py tests/test_edge_cases.py \
  tests/test_matrix.py tests/test_invariance.py tests/test_large_batches.py tests/test_groups.py 2>&1 | tail -6
date +%T
