#!/usr/bin/env bash
# GPU session 11, run 1: the C++ host path's tests (session 10's accept() refactor had not run on a GPU);
# kernel v9 candidates: K up to 32 on the bitonic kernel (tiles of 32-key lists against kernel v1, the rule
# before), and sigmoid without bias ranked by the logits (against v8's kernel on the same tile;
# build/bitonic_v8.py = `git show b407450:src/moe_routing/kernels/_bitonic.py`). The sigmoid-without-bias
# candidate it timed also ranked up to 512 experts by 16-bit logit keys; that part was reverted (slower,
# NOTES.md v9), so run today this A/B compares v8's keys with themselves there.
set -o pipefail
source benchmarks/gpu/setup.sh
date +%T
timeout 120 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_host_launch.py 2>&1 | tail -3
date +%T
mkdir -p $OUT/wide_topk $OUT/no_bias
timeout 230 python3 benchmarks/probes/plan_sweep.py --wide-topk --rounds 2 --jobs 14 --budget-s 120 \
  --out $OUT/wide_topk 2>&1 | tail -70
date +%T
timeout 170 python3 benchmarks/probes/plan_sweep.py --ab build/bitonic_v8.py --no-bias --jobs 14 --budget-s 80 \
  --out $OUT/no_bias 2>&1 | tail -50
date +%T
