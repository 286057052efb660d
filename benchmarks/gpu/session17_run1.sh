#!/usr/bin/env bash
# GPU session 17, run 1: v13's per-thread bias read in its plain form on the other tiles (the four-lane tiles of
# 2048-16383 tokens: `_step_bias` loads `bias_ptr + every_row + expert[None]`, the rows' common addresses laid out
# as the logits; an uncommitted edit of the tree, switched by BIAS_PER_THREAD: NOTES.md v14) against kernel v13
# (HEAD's file), with step-ahead loads both ways. Static counts (sass_counts.py --bias-exchange --baseline FILE):
# L4 R8 (4096-16383 tokens) loses 5 barriers and 24 shared loads for +72 instructions; L4 R4 (2048) gains 1424
# instructions; grouped one pass L4 R8 loses 4 barriers and 8 shared loads (-48 instructions), L4 R4 +704 instructions.
# Prediction: L4 R8 flat 0-3% faster (one-warp programs: a barrier only waits for the warp's own shared stores,
# the exchange is a few short round trips per step); L4 R4 (2048) slower; grouped L4 R8 0-2% faster.
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_v13.py
date +%T
timeout 420 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_v13.py --huge --prefetch-arms \
  --tokens 2048 8192 12288 --experts 256 384 128 --rounds 5 --jobs 8 --out $OUT 2>&1 \
  | grep -v "does not apply" | tee $OUT/sweep_bias_per_thread_four_lanes.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_bias_per_thread_s17_run1.json
date +%T
