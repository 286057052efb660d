#!/usr/bin/env bash
# GPU session 18, run 6: step-ahead loads for float32 logits below the HUGE class. Run 5 found the rule's four-lane
# tile for 384 / 8 float32 at 16384 tokens 21% slower with them (17.95 us against 14.17; the clause was measured on
# bf16 rows, v11), and every other float32 shape from 16384 up slower or mixed with them. The rule gives them to the
# four-lane tiles of 2048-16383 tokens (v5 / v7 / v14, bf16 measurements). 128-512 / 8 float32 at 2048-16384 tokens,
# the rule's tile against the same with them switched. Prediction: slower with them wherever a step's float32
# logits double the registers they hold (most at 384-512 experts).
set -o pipefail
source benchmarks/gpu/setup.sh
git show HEAD:src/moe_routing/kernels/_bitonic.py > /tmp/bitonic_tree.py
date +%T
timeout 250 python3 benchmarks/probes/plan_sweep.py --ab /tmp/bitonic_tree.py --huge --prefetch-arms --float32 \
  --budget-s 200 --tokens 2048 8192 12288 16384 --experts 128 256 384 512 --rounds 3 --jobs 14 --out $OUT 2>&1 \
  | grep -v "does not apply" | tee $OUT/plan_sweep_float32_prefetch_large_s18_run6.txt
mv $OUT/plan_sweep.json $OUT/plan_sweep_float32_prefetch_large_s18_run6.json
date +%T
