#!/usr/bin/env bash
# GPU session 27, run 3 (at the commit that adds this script: kernel v26, plus .ab/v26_store_first.py): (1) the window
# path's rows stored before the exact redo (.ab/v26_store_first.py), so that the hot path runs straight on to its
# stores instead of jumping over ~2800 instructions of the redo: run 2's profile at 256 / 8, 8192 tokens put 27.7% of
# the stall samples in the store path, 15% of them waiting on instruction fetch (ncu flushes caches between passes:
# partly the profiler's). Prediction: 0-3% faster on the four-lane tile (more registers: 85 -> 100), 0-2% at 65536
# tokens. (2) The targets table with kernel v26 (the tree's rule).
set -o pipefail
source benchmarks/gpu/setup.sh
mkdir -p $OUT/targets
date +%T
(cd benchmarks/probes && timeout 230 python3 constexpr_ab.py --jobs 12 --variant "store_first=../../.ab/v26_store_first.py" \
  --shape 256/8/8192 384/8/8192 256/8/8192/8/4 256/8/4096 256/8/65536 384/8/65536 256/8/65536/8/4 256/8/16384 \
          128/8/65536 512/8/16384 2>&1 | tee $OUT/store_first_ab_s27_run3.txt)
date +%T
ARMS="moe_routing.route(out=),moe_routing.route(out=) via Python,moe_routing.route,empty kernel,torch.max(dim=-1),straightforward Triton"
timeout 230 moe-routing bench --preset targets --arms "$ARMS" --out $OUT/targets 2>&1 | tail -32
date +%T
